"""A model with its own KV cache: extend by a chain or a token tree, roll back, keep a path.

Invariant kept by every decoder: the cache holds the committed sequence except its last
token ("pending"), followed by the nodes of the tree under construction, if any. Each
forward therefore starts with the committed tokens the cache lacks (usually just the
pending one), so a prompt is encoded once and never again.

Tree attention uses only the public model forward: a custom 4-D additive attention mask
[1, 1, q, kv] and explicit position ids (a node at depth d sits at position committed-1+d
whatever its storage slot). Llama-family models and OPT (whose learned positions take
`position_ids` and add their offset internally) both accept these.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time

import torch
from transformers import DynamicCache, PreTrainedModel

from mtad.decoding.logits import Support
from mtad.decoding.masks import additive, tree_mask
from mtad.decoding.phases import phase, phased, record_forward
from mtad.devices import model_device, sync


def feature_depths(features: bool | tuple[int, ...] | None) -> tuple[int, ...] | None:
    """A cache's `features` argument as `hidden_states` indices (None: no features kept)."""
    if features is None or features is False:
        return None
    return (-1,) if features is True else tuple(int(d) for d in features)


class FeatureStore:
    """The final hidden state of every cached slot, [capacity, H], kept by the same rules as the
    KV cache (committed slots, then tree nodes; crop and commit_path select the same slots).
    What a feature-head draft reads of the target (mtad/decoding/head_kv.py)."""

    def __init__(self, width: int, dtype: torch.dtype, device: torch.device, capacity: int = 512):
        self.buf = torch.zeros(capacity, width, dtype=dtype, device=device)

    def write(self, start: int, hidden: torch.Tensor) -> None:
        """hidden [n, H] into slots [start, start + n)."""
        end = start + hidden.shape[0]
        if end > self.buf.shape[0]:
            grown = self.buf.new_zeros(max(end, 2 * self.buf.shape[0]), self.buf.shape[1])
            grown[:start] = self.buf[:start]
            self.buf = grown
        self.buf[start:end] = hidden

    def keep(self, start: int, tail: torch.Tensor | None) -> None:
        """Slots [0, start) then slots start + tail, moved down to follow them."""
        if tail is not None and tail.numel():
            self.buf[start : start + tail.numel()] = self.buf[start + tail.to(self.buf.device)]


@functools.lru_cache(maxsize=32)
def forward_keywords(model_class: type) -> tuple[bool, str]:
    """Whether a model class's forward takes `logits_to_keep`, and the name of its cache argument
    (transformers >= 5.2x names it `cache`, older releases `past_key_values`); read once per class,
    not per generation (`inspect.signature` costs tens of microseconds)."""
    accepted = inspect.signature(model_class.forward).parameters
    return "logits_to_keep" in accepted, "cache" if "cache" in accepted else "past_key_values"


class CachedModel:
    """One causal LM plus its DynamicCache, with tree-aware extension and rollback.

    `features` also keeps hidden states of each slot (`self.features`, a FeatureStore): True or
    (-1,) the final (normed) one, a tuple of `hidden_states` indices those depths side by side
    ([D*H] per slot, low to high). The forward computes them anyway, so keeping them costs one
    copy per call."""

    def __init__(
        self,
        model: PreTrainedModel,
        out_device: torch.device | None = None,
        features: bool | tuple[int, ...] | None = None,
        cache=None,
    ):
        self.model = model
        self.device = model_device(model)
        self.out_device = out_device or self.device
        self.cache = cache if cache is not None else DynamicCache(config=model.config)  # `cache`: a static path's
        self.committed = 0  # cache slots [0, committed) hold committed tokens
        self.node_parents: list[int] = []  # for each cached tree node: parent node index, -1 = committed end
        self.node_depths: list[int] = []
        self._ancestors = torch.zeros(0, 0, dtype=torch.bool)  # [nodes, nodes] ancestor-or-self
        self.role = "target"  # or "draft": how a profile names this model's forwards (phases.py)
        self.calls = 0
        self.tokens_fed = 0  # positions run through the model: the prompt once, then only new tokens
        self.seconds = 0.0  # wall time inside this model's forwards (for the overhead breakdown)
        self.prefill_seconds = 0.0  # of which caching prompts (`prefill`)
        self.prefilling = False  # inside `prefill`: a profile names the forward "<role> prefill"
        self.kernels = None  # the fast path's product kernel per width (kernels.KernelChoice); None: oneDNN
        # the tokens its logits cover where not the whole vocabulary (logits.Support; a restricted head's)
        self.support: Support | None = None
        self._keep_kw, self._cache_kw = forward_keywords(type(model))
        self.feature_depths = feature_depths(features)
        width = model.config.hidden_size * len(self.feature_depths or ())
        self.features = FeatureStore(width, model.dtype, self.device) if self.feature_depths else None

    @property
    def num_nodes(self) -> int:
        return len(self.node_parents)

    def _forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None, keep_last: int = 0
    ) -> torch.Tensor:
        """Run the new positions through the model (`allowed`: tree mask, None = causal chain)
        and time it; returns logits [n, V] (the last `keep_last` rows if > 0)."""
        start, first_slot = time.perf_counter(), self.seq_length()
        with self.kernels.scope(input_ids.numel()) if self.kernels is not None else contextlib.nullcontext():
            logits, hidden = self._model_logits(input_ids, position_ids, allowed, keep_last)
        logits = logits.to(self.out_device)
        if self.features is not None:
            self.features.write(first_slot, hidden)
        sync(self.device)  # charge the kernels to this forward, not to what follows
        elapsed = time.perf_counter() - start
        self.seconds += elapsed
        record_forward(f"{self.role} prefill" if self.prefilling else self.role, input_ids.numel(), elapsed)
        self.calls += 1
        self.tokens_fed += input_ids.numel()
        return logits

    def _model_logits(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None, keep_last: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model's own forward on its DynamicCache: logits [n or keep_last, V] and, when
        features are kept, the final hidden states of all n new positions [n, H] (else None)."""
        kwargs = {self._cache_kw: self.cache}
        if self.features is not None:
            kwargs["output_hidden_states"] = True
        if keep_last and self._keep_kw:
            kwargs["logits_to_keep"] = keep_last
        mask = None if allowed is None else additive(allowed, self.model.dtype).to(self.device)
        out = self.model(
            input_ids=input_ids[None].to(self.device),
            position_ids=position_ids[None].to(self.device),
            attention_mask=mask,
            use_cache=True,
            **kwargs,
        )
        logits = out.logits[0]
        hidden = None
        if self.features is not None:  # [n, D*H]; index -1 is after the final norm
            hidden = torch.cat([out.hidden_states[d][0] for d in self.feature_depths], dim=-1)
        return (logits[-keep_last:] if keep_last else logits), hidden

    def prefill(self, tokens: torch.Tensor) -> None:
        """Cache a committed chain without computing its logits (only the last is kept)."""
        if tokens.numel():
            before, self.prefilling = self.seconds, True
            try:
                self.extend(tokens, keep_last=1)
            finally:
                self.prefilling = False
            self.prefill_seconds += self.seconds - before

    def extend(
        self,
        tokens: torch.Tensor,
        nodes: torch.Tensor | None = None,
        parents: list[int] | None = None,
        keep_last: int = 0,
    ) -> torch.Tensor:
        """Forward committed `tokens` [m] and/or tree `nodes` [k]; returns logits [m+k, V]
        (only the last `keep_last` rows when it is > 0).

        parents[i] indexes the cached-or-new tree nodes (in creation order); -1 hangs the
        node under the last committed token. Committed tokens may only be added while no
        tree nodes are cached (they must stay contiguous at the front of the cache).
        """
        if tokens.numel() and self.num_nodes:
            raise RuntimeError("commit or drop the cached tree before extending the committed chain")
        if nodes is None or nodes.numel() == 0:
            start = self.committed
            positions = torch.arange(start, start + tokens.numel())
            logits = self._forward(tokens, positions, None, keep_last)  # plain causal attention
            self.committed += tokens.numel()
            return logits
        m = tokens.numel()
        assert parents is not None and len(parents) == nodes.numel()
        first_new = self.num_nodes
        with phase("mask"):
            for parent in parents:
                if not -1 <= parent < self.num_nodes:
                    raise ValueError(f"tree parent {parent} is not a cached or earlier node")
                self.node_depths.append(1 if parent < 0 else self.node_depths[parent] + 1)
                self.node_parents.append(parent)
            self._grow_ancestors(first_new)
            committed_end = self.committed + m  # the committed chain after this call
            depths = torch.tensor(self.node_depths[first_new:])
            positions = torch.cat([torch.arange(self.committed, committed_end), committed_end - 1 + depths])
            allowed = tree_mask(self.committed, m, self._ancestors[first_new:])  # [1, 1, m+k, committed+m+nodes]
        logits = self._forward(torch.cat([tokens.to(nodes.device), nodes]), positions, allowed, keep_last)
        self.committed = committed_end
        return logits

    def _grow_ancestors(self, first_new: int) -> None:
        n = self.num_nodes
        anc = torch.zeros(n, n, dtype=torch.bool)
        anc[:first_new, :first_new] = self._ancestors
        for i in range(first_new, n):  # parents precede children, so their rows are complete
            parent = self.node_parents[i]
            if parent >= 0:
                anc[i] = anc[parent]
            anc[i, i] = True
        self._ancestors = anc

    @phased("commit")
    def crop(self, length: int) -> None:
        """Roll back to the first `length` committed tokens, dropping any tree nodes."""
        self._keep(length, None)
        self.committed = length
        self._drop_tree()

    @phased("commit")
    def commit_path(self, path: list[int]) -> None:
        """Keep the committed tokens plus the cached tree nodes `path` (root-to-leaf order),
        which become committed; every other node is dropped."""
        path = [i for i in path if i < self.num_nodes]  # nodes past the cached depth were never forwarded
        self._keep(self.committed, torch.tensor(path) if path else None)
        self.committed += len(path)
        self._drop_tree()

    def _drop_tree(self) -> None:
        self.node_parents, self.node_depths = [], []
        self._ancestors = torch.zeros(0, 0, dtype=torch.bool)

    def _keep(self, start: int, tail: torch.Tensor | None) -> None:
        """Keep slots [0, start) then slots start + tail, in the KV cache and the feature store."""
        self._select_tail(start, tail)
        if self.features is not None:
            self.features.keep(start, tail)

    def _select_tail(self, start: int, tail: torch.Tensor | None) -> None:
        """Each layer keeps slots [0, start) then slots start + tail (if given)."""
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            if tail is None:
                layer.keys, layer.values = layer.keys[..., :start, :], layer.values[..., :start, :]
            else:
                index = torch.cat([torch.arange(start), start + tail]).to(layer.keys.device)
                layer.keys = layer.keys.index_select(-2, index)
                layer.values = layer.values.index_select(-2, index)

    def seq_length(self) -> int:
        return self.cache.get_seq_length()
