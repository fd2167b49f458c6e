"""The fast decode path: preallocated (static) KV caches and a lean Llama forward.

`StaticCachedModel` keeps CachedModel's contract (kv.py: committed chain, pending token,
tree nodes after it, crop / commit_path) but stores keys and values in buffers allocated
once, [layers, 1, kv_heads, capacity, head_dim]. New positions are written at the fill
pointer, so

- rollback (crop) only moves the pointer: nothing is copied or freed;
- keeping a tree path copies the path's slots down to the committed end once;
- a forward never concatenates caches or builds HF's mask objects: it is embedding ->
  (norm, q/k/v, rotary, write slots, SDPA with a bool mask, o, norm, MLP) x layers -> norm,
  then the LM head on the rows a decoder reads only (the draft's restricted head stays
  restricted: `head_logits` then `expand_logits`).

decode_path "compiled" runs the same body through `torch.compile` with fixed shapes: the
new positions are padded to a bucket (1, 2, 4, 8, ...), attention spans the whole buffer
under the mask, and buffers are reused, so steady-state decoding never recompiles (the
count is kept: `compiles`). On CUDA the compiled body is captured as CUDA graphs
(mode "reduce-overhead", buffers marked as static addresses). Prefills longer than the
largest bucket run the uncompiled body on the same buffers.

Only Llama-family models whose forward is the lean one take this path (LlamaForCausalLM, and a
class that declares it, such as the mtad draft: `capabilities.has_lean_forward`); any other
model runs the eager path (`fast_unsupported` says why).
"""

from __future__ import annotations

import os
import weakref

import torch
from transformers import PreTrainedModel

from mtad.data import cache_root
from mtad.decoding.capabilities import LEAN_FORWARD, RestrictedHead, has_lean_forward
from mtad.decoding.kernels import choose as choose_kernels
from mtad.decoding.kv import CachedModel, model_device
from mtad.decoding.layer_math import Rotary, attend, attention_dtype, finish_layer, rms_norm, rotated_attention_inputs
from mtad.decoding.lookup import PromptLookup
from mtad.decoding.masks import chain_mask, padded, step_mask

# eager: the model's own forward on a DynamicCache (kv.CachedModel); static: static cache and
# lean forward; compiled: static + torch.compile; fast: the measured winner on this device.
DECODE_PATHS = ("eager", "static", "compiled", "fast")
CAPACITY_STEP = 512  # buffers hold a multiple of this many positions (fixed shapes across prompts)
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # padded widths of a compiled forward; wider ones run uncompiled


def fast_unsupported(model: PreTrainedModel) -> str | None:
    """Why `model` cannot take the static/compiled path (None when it can)."""
    if not has_lean_forward(model):
        return f"{type(model).__name__} has no lean forward (LlamaForCausalLM, or a class declaring {LEAN_FORWARD})"
    if len({str(d) for d in getattr(model, "hf_device_map", {}).values()}) > 1:
        return "the model is split over several devices (device_map)"
    return None


def resolve_decode_path(path: str | None, model: PreTrainedModel) -> str:
    """The concrete path ("eager" | "static" | "compiled") that `path` means for `model`."""
    path = path or "fast"
    if path not in DECODE_PATHS:
        raise ValueError(f"unknown decode_path {path!r}; valid: {', '.join(DECODE_PATHS)}")
    if path == "eager" or fast_unsupported(model) is not None:
        return "eager"
    if path == "fast":  # compiled pays on CUDA (launch-bound); on this CPU class it does not (levers.md)
        return "compiled" if model_device(model).type == "cuda" else "static"
    return path


def kernel_record(models: dict, decode_path: str | None) -> dict | None:
    """For a run's environment record: each model's (role -> model) product kernel per forward
    width on its lean path (`kernels.choose`; None for a model not concerned), or None where
    every model runs eager (oneDNN throughout). A lookup draft is recorded by the model it carries."""
    models = {role: m.model if isinstance(m, PromptLookup) else m for role, m in models.items()}
    lean = {role: m for role, m in models.items() if m is not None and resolve_decode_path(decode_path, m) != "eager"}
    if not lean:
        return None
    return {role: (choice.as_dict() if (choice := choose_kernels(m)) else None) for role, m in lean.items()}


def cached_model(
    model: PreTrainedModel,
    out_device: torch.device | None,
    decode_path: str | None,
    min_capacity: int = 0,
    features: bool | tuple[int, ...] | None = None,
) -> CachedModel:
    """A CachedModel for `model` on the resolved decode path (`features`: keep hidden states)."""
    path = resolve_decode_path(decode_path, model)
    if path == "eager":
        return CachedModel(model, out_device, features)
    return StaticCachedModel(model, out_device, min_capacity, compiled=path == "compiled", features=features)


POOL_BYTES = 512 * 2**20  # KV buffers kept for reuse, at most (the least recently released go first)
_pool: dict[tuple, list[torch.Tensor]] = {}  # (shape, dtype, device) -> free buffers, oldest first


def kv_buffer(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed buffer, reused from one a finished generation released when there is one. Zeros,
    not empty: masked-out slots still enter SDPA's weighted sum (0 x NaN = NaN). Reuse is what pays:
    a fresh allocation of this size is mapped anew by the allocator, and touching its pages costs
    ~60 ms for a 12 MB buffer on a VM, against ~1 ms to zero memory already mapped."""
    free = _pool.get((shape, dtype, str(device)))
    return free.pop().zero_() if free else torch.zeros(shape, dtype=dtype, device=device)


def release(buffers: list[torch.Tensor]) -> None:
    """Keep a finished cache's buffers for the next generation (within `POOL_BYTES`)."""
    for buf in buffers:
        if buf.is_inference():  # made under inference mode: no in-place zeroing outside it
            continue
        _pool.setdefault((tuple(buf.shape), buf.dtype, str(buf.device)), []).append(buf)
    held = [(key, buf) for key, free in _pool.items() for buf in free]
    excess = sum(b.numel() * b.element_size() for _, b in held) - POOL_BYTES
    for key, buf in held:  # oldest key first (insertion order), then oldest buffer
        if excess <= 0:
            break
        _pool[key].remove(buf)
        excess -= buf.numel() * buf.element_size()


class StaticKV:
    """Preallocated keys and values, [layers, 1, kv_heads, capacity, head_dim] each, in the dtype
    the model attends in (`attention_dtype`), and the fill pointer `length` (slots [0, length)
    hold the committed tokens then the cached tree nodes). The buffers go back to a pool when the
    cache is collected (`release`), for the next generation's cache (`kv_buffer`)."""

    def __init__(self, model: PreTrainedModel, capacity: int):
        cfg = model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.shape = (cfg.num_hidden_layers, 1, cfg.num_key_value_heads, capacity, head_dim)
        device = model_device(model)
        dtype = attention_dtype(model.dtype, device)
        self.keys, self.values = kv_buffer(self.shape, dtype, device), kv_buffer(self.shape, dtype, device)
        self._buffers = [self.keys, self.values]  # what goes back to the pool (grow replaces them)
        weakref.finalize(self, release, self._buffers)
        self.length = 0
        self._views: tuple = (None, [], [])  # (the keys buffer they view, keys views, values views)

    @property
    def capacity(self) -> int:
        return self.shape[3]

    def grow(self, needed: int) -> None:
        """Reallocate to hold `needed` positions (a multiple of CAPACITY_STEP), keeping the content."""
        if needed <= self.capacity:
            return
        capacity = -(-needed // CAPACITY_STEP) * CAPACITY_STEP
        self.shape = (*self.shape[:3], capacity, self.shape[4])
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = kv_buffer(self.shape, old.dtype, old.device)
            new[..., : self.length, :] = old[..., : self.length, :]
            setattr(self, name, new)
        release(self._buffers)
        self._buffers[:] = [self.keys, self.values]

    def keep(self, start: int, tail: torch.Tensor | None) -> None:
        """Keep slots [0, start) then slots start + tail (in that order), drop the rest."""
        if tail is not None and tail.numel():
            index = (start + tail).to(self.keys.device)
            for buf in (self.keys, self.values):  # gather first: source and destination overlap
                buf[..., start : start + tail.numel(), :] = buf.index_select(3, index)
        self.length = start + (0 if tail is None else tail.numel())

    def get_seq_length(self) -> int:  # what CachedModel.seq_length reads of a DynamicCache
        return self.length

    def layer_views(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each layer's keys and values, [1, kv_heads, capacity, head_dim] views of the buffers: what
        the compiled body writes into. Given the whole buffer, torch.compile functionalizes each
        layer's write into a clone of all of it (60 clones of a 12 MB buffer per forward)."""
        if self._views[0] is not self.keys:
            self._views = (self.keys, list(self.keys.unbind(0)), list(self.values.unbind(0)))
        return self._views[1], self._views[2]


def llama_body(
    model: PreTrainedModel,
    keys: torch.Tensor,
    values: torch.Tensor,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    slots: torch.Tensor | int,
    allowed: torch.Tensor | None,
    depths: tuple[int, ...] | None = None,
    kv_len: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Decoder layers and final norm over new positions, writing their K/V at `slots`.

    input_ids, position_ids: [1, n]; slots: the n new positions' buffer slots, a tensor [n] (the
    compiled body's: its values change without a recompile) or the first of n consecutive ones;
    allowed: bool [1, 1, n, kv] (kv <= capacity: attention spans buffer slots [0, kv)), None =
    every slot in [0, kv_len). keys/values: [layers, 1, kv_heads, capacity, head_dim], or a
    sequence of each layer's [1, kv_heads, capacity, head_dim] (what the compiled body takes).
    Returns hidden states [n, H] and, with `depths` (`hidden_states` indices, as `CachedModel`
    keeps them), those depths side by side [n, D*H]."""
    x = model.model.embed_tokens(input_ids)
    return run_layers(model.model, x, keys, values, position_ids, slots, allowed, depths, kv_len)


def run_layers(
    body,
    x: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    position_ids: torch.Tensor,
    slots: torch.Tensor | int,
    allowed: torch.Tensor | None,
    depths: tuple[int, ...] | None = None,
    kv_len: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`llama_body` from the layer inputs x [1, n, H] on: body.layers, body.rotary_emb, body.norm.
    `depths`: also the inputs of those layers (index d: after layer d-1; the layer count or -1:
    after the final norm), concatenated [n, D*H]. `kv_len`: the slots attended to, which the
    caller tracks on the host (needed without a mask; a mask's width otherwise)."""
    if allowed is not None:
        kv_len = allowed.shape[-1]
    elif kv_len is None:
        raise ValueError("run_layers: without a mask, kv_len (the slots attended to) is needed")
    rot = Rotary.of(*body.rotary_emb(x, position_ids))  # cos, sin [1, n, D]: once for every layer
    last = len(body.layers)
    captured = {}
    for i, layer in enumerate(body.layers):
        if depths is not None and i in depths:
            captured[i] = x[0]
        q, k, v = rotated_attention_inputs(layer, x, rot)  # [1, Hq, n, D], [1, Hkv, n, D] x 2
        layer_keys, layer_values = keys[i], values[i]  # [1, Hkv, capacity, D] each
        write_slots(layer_keys, slots, k)
        write_slots(layer_values, slots, v)
        o = attend(layer, q, layer_keys.narrow(2, 0, kv_len), layer_values.narrow(2, 0, kv_len), allowed)
        x = finish_layer(layer, x, o)
    hidden = rms_norm(body.norm, x)[0]
    if depths is None:
        return hidden
    return hidden, torch.cat([hidden if d in (-1, last) else captured[d] for d in depths], dim=-1)


def write_slots(buffer: torch.Tensor, slots: torch.Tensor | int, new: torch.Tensor) -> None:
    """new [1, Hkv, n, D] into buffer [1, Hkv, capacity, D] at `slots` (a tensor [n], or the first
    of n consecutive slots: one copy that casts to the buffer's dtype on the way)."""
    if isinstance(slots, int):
        buffer.narrow(2, slots, new.shape[2]).copy_(new)
    else:
        buffer.index_copy_(2, slots, new.to(buffer.dtype))


def head_logits(model: PreTrainedModel, hidden: torch.Tensor, restricted: bool) -> torch.Tensor:
    """LM head on the given rows only: [r, H] -> [r, V] (a restricted draft head, `restricted`,
    stays restricted)."""
    if restricted:
        return model.expand_logits(model.head_logits(hidden))
    return model.lm_head(hidden)


class CompiledBody:
    """`llama_body` of one model under torch.compile (fixed shapes), counting its compilations.

    Inductor's caches (FX graphs, compiled kernels) live under ``$MTAD_CACHE/inductor`` unless
    TORCHINDUCTOR_CACHE_DIR says otherwise, so a machine compiles each shape once: a later process
    loads it (measured on a 2-core CPU: 76 s the first time, 7 s from the cache)."""

    def __init__(self, model: PreTrainedModel, depths: tuple[int, ...] | None = None):
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
        self.model_ref = weakref.ref(model)
        self.compiles = 0
        cuda = model_device(model).type == "cuda"

        def backend(gm, example_inputs):
            from torch._inductor.compile_fx import compile_fx

            self.compiles += 1
            return compile_fx(gm, example_inputs)

        def body(keys, values, input_ids, position_ids, slots, allowed):
            return llama_body(self.model_ref(), keys, values, input_ids, position_ids, slots, allowed, depths)

        # CUDA: capture graphs (launch-bound decoding); CPU: inductor's default code generation
        self.fn = (
            torch.compile(body, mode="reduce-overhead", dynamic=False)
            if cuda
            else torch.compile(body, backend=backend, dynamic=False)
        )
        self.cuda = cuda

    def __call__(self, *args) -> torch.Tensor:
        return self.fn(*args)


_COMPILED: "weakref.WeakKeyDictionary[PreTrainedModel, dict]" = weakref.WeakKeyDictionary()


def compiled_body(model: PreTrainedModel, depths: tuple[int, ...] | None = None) -> CompiledBody:
    """One compiled body per model and kept depths, shared by every decoder and generation that uses it."""
    bodies = _COMPILED.setdefault(model, {})
    if depths not in bodies:
        bodies[depths] = CompiledBody(model, depths)
    return bodies[depths]


def bucket(n: int) -> int | None:
    """The padded width of an n-position compiled forward (None: too wide, run uncompiled)."""
    return next((b for b in BUCKETS if b >= n), None)


class StaticCachedModel(CachedModel):
    """CachedModel on a StaticKV with the lean Llama forward (optionally compiled)."""

    def __init__(
        self,
        model: PreTrainedModel,
        out_device: torch.device | None = None,
        min_capacity: int = 0,
        compiled: bool = False,
        features: bool | tuple[int, ...] | None = None,
    ):
        reason = fast_unsupported(model)
        if reason:
            raise ValueError(f"decode_path static/compiled: {reason}; use decode_path=eager")
        capacity = max(CAPACITY_STEP, -(-(min_capacity + BUCKETS[-1]) // CAPACITY_STEP) * CAPACITY_STEP)
        super().__init__(model, out_device, features, cache=StaticKV(model, capacity))
        self.restricted = isinstance(model, RestrictedHead)  # a Protocol check costs microseconds: once
        self.kernels = choose_kernels(model)
        self.compiled = compiled_body(model, self.feature_depths) if compiled else None
        if self.compiled is not None and self.compiled.cuda:
            for buf in (self.cache.keys, self.cache.values, *sum(self.cache.layer_views(), [])):
                torch._dynamo.mark_static_address(buf)

    @property
    def compiles(self) -> int:
        """Compilations of this model's body so far (all generations together)."""
        return self.compiled.compiles if self.compiled is not None else 0

    @torch.no_grad()  # decoding never differentiates; in-place cache writes must not enter autograd
    def _model_logits(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None, keep_last: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        kv = self.cache
        n, start = input_ids.numel(), kv.length
        width = bucket(n) if self.compiled is not None else None
        kv.grow(start + (width or n))
        device = self.device
        if width is None:  # uncompiled: attend over the filled slots only
            mask = step_mask(allowed, start, n, device)
            out = llama_body(
                self.model,
                kv.keys,
                kv.values,
                input_ids[None].to(device),
                position_ids[None].to(device),
                start,  # slots start .. start + n - 1
                mask,
                self.feature_depths,
                kv_len=start + n,
            )
        else:  # compiled: fixed shapes; pad rows write scratch slots past the fill pointer
            full = padded(chain_mask(start, n) if allowed is None else allowed, width, kv.capacity)
            ids = torch.zeros(width, dtype=torch.long)
            ids[:n] = input_ids
            pos = torch.zeros(width, dtype=torch.long)
            pos[:n] = position_ids
            out = self.compiled(
                *kv.layer_views(),
                ids[None].to(device),
                pos[None].to(device),
                torch.arange(start, start + width, device=device),
                full.to(device),
            )
            out = tuple(t[:n] for t in out) if isinstance(out, tuple) else out[:n]
        kv.length = start + n
        hidden, kept = out if isinstance(out, tuple) else (out, None)
        return head_logits(self.model, hidden[-keep_last:] if keep_last else hidden, self.restricted), kept

    def _select_tail(self, start: int, tail: torch.Tensor | None) -> None:
        self.cache.keep(start, tail)
