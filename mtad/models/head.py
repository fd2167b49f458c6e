"""A feature head: an EAGLE-style draft that reads the target's own hidden states.

At position i the head takes the token x_i and the target's feature g_{i-1} of the position
before (the one that predicted x_i), fuses them,

    z_i = W_fuse [e(x_i); g_{i-1}]              (Linear 2H -> H, e = the target's embedding)
    f^_i = norm(layers(z_<=i))                  (Llama decoder layer(s), causal over the head's cache)
    q(x_{i+1}) = softmax(W_out f^_i)            (over a restricted vocabulary)

Two designs share this module, told apart by the file's metadata:

- one depth (EAGLE-1/2): g is the target's final hidden state f, W_out the target's frozen
  LM-head rows, and training also regresses f^ onto f (the head predicts the next feature);
- fused depths (EAGLE-3): g = W_depths [h_low; h_mid; h_high], the target's hidden states
  after three layers (`fused_depths`) mapped 3H -> H by one linear map, and W_out the head's
  own trainable output layer (initialised from the target's rows); no feature is predicted,
  so nothing ties f^ to the target's top layer.

While drafting a block the head runs on its own outputs (f^ in place of g for positions the
target has not scored yet), which is how training unrolls it too (`mtad.distill.head_training`).

It is still an auxiliary model with a q over every γ-token block, so every method drafts
with it unchanged; the decoding side (`mtad.decoding.head_kv`) feeds it the target's features
at the depths it declares (`target_depths`), taken from the target's own forward. The head's
vocabulary is restricted to `head_token_ids` (q = 0 elsewhere, which keeps every lossless method
exact). Shared with the target and never saved: the token embedding, and the LM-head rows of a
one-depth head; the head file holds the rest.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from mtad.decoding.layer_math import attend, attention_inputs, finish_layer
from mtad.decoding.masks import attends

from .draft import expand_to_vocabulary, read_meta, write_with_meta

HEAD_FORMAT = "mtad-head-v2"
FORMATS = ("mtad-head-v1", HEAD_FORMAT)  # v1: one depth, the target's LM head (no design fields)


def fused_depths(num_layers: int, final: bool = False) -> tuple[int, int, int]:
    """The target's hidden states a fused head reads, as indices into a forward's `hidden_states`
    (0 = the embeddings, d = the output of layer d, num_layers or -1 = after the final norm): a
    low, a middle and a high one, as EAGLE-3 picks them (layers 2, L/2 and L-3: 2, 15 and 27 of
    SmolLM2-135M's 30). A target of fewer than 6 layers (the tests' tiny ones) gives 1, L/2 and L.
    `final`: the high one is the final normed feature (-1), the one the target's LM head reads; the
    producer stores the other three, and the final one beside them."""
    if num_layers < 1:
        raise ValueError(f"a fused head reads a target with at least one layer, not {num_layers}")
    small = num_layers < 6
    low, mid, high = (1, max(num_layers // 2, 1), num_layers) if small else (2, num_layers // 2, num_layers - 3)
    return (low, mid, -1 if final else high)


class HeadBody(nn.Module):
    """Fusion, decoder layer(s), norm and rotary table; `embed_tokens` is the target's (not registered)."""

    def __init__(self, config: LlamaConfig, embed_tokens: nn.Embedding):
        super().__init__()
        # kept out of the module tree on purpose: `.to(dtype)` or `state_dict()` on the head must
        # neither convert nor save the target's embedding
        self.__dict__["embed_tokens"] = embed_tokens
        H = config.hidden_size
        depths = getattr(config, "head_fused_depths", None)
        # fused depths: [h_low; h_mid; h_high] -> H by one map (EAGLE-3); one depth reads f as it is
        self.depths_fc = nn.Linear(len(depths) * H, H, bias=False) if depths else None
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(H, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        # EAGLE-1's published heads have neither an input norm in their first layer nor a final norm
        # (the layer output goes straight to the target's LM head): the same maths with identities
        if not getattr(config, "head_first_input_norm", True):
            self.layers[0].input_layernorm = nn.Identity()
        if not getattr(config, "head_final_norm", True):
            self.norm = nn.Identity()

    def reduce(self, target_features: torch.Tensor) -> torch.Tensor:
        """The target's features as the head reads them: [..., D*H] -> [..., H] (one depth: as they are)."""
        if self.depths_fc is None:
            return target_features
        return self.depths_fc(target_features.to(self.depths_fc.weight.dtype))

    def fuse(self, input_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """[B, n] tokens and [B, n, H] preceding features -> layer inputs [B, n, H]."""
        e = self.embed_tokens(input_ids).detach().to(self.fc.weight.dtype)  # the target's: frozen
        return self.fc(torch.cat([e, features.to(e.dtype)], dim=-1))


class FeatureHead(nn.Module):
    """The head over the target's vocabulary; logits only on `head_token_ids` (-inf elsewhere)."""

    # decoding feeds it the target's hidden states (mtad.decoding.capabilities, head_kv)
    reads_target_features = True

    def __init__(
        self,
        config: LlamaConfig,
        embed_tokens: nn.Embedding,
        lm_head_weight: torch.Tensor,
        head_token_ids: list[int] | None = None,
        target_depths: tuple[int, ...] | None = None,
    ):
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.model = HeadBody(config, embed_tokens)
        ids = sorted(set(int(i) for i in head_token_ids)) if head_token_ids is not None else None
        if ids is not None and (not ids or ids[0] < 0 or ids[-1] >= config.vocab_size):
            raise ValueError(f"head_token_ids must lie in [0, {config.vocab_size})")
        self.head_ids = ids
        if ids is not None:
            self.register_buffer("head_token_ids", torch.tensor(ids, dtype=torch.long), persistent=False)
            rows = lm_head_weight[self.head_token_ids]
        else:
            self.head_token_ids = None
            rows = lm_head_weight
        # which of the target's `hidden_states` the head reads, low to high (one depth: the final one)
        fused = getattr(config, "head_fused_depths", None)
        self.target_depths = tuple(fused) if fused else tuple(target_depths or (-1,))
        if getattr(config, "head_own_output", False):  # trainable, saved with the head
            self.lm_head = nn.Linear(rows.shape[1], rows.shape[0], bias=False)
            with torch.no_grad():
                self.lm_head.weight.copy_(rows.detach())
            self.lm_head_rows = None
        else:  # the target's LM-head rows: frozen, shared in value (a copy of the rows), never saved
            self.lm_head = None
            self.register_buffer("lm_head_rows", rows.detach().clone(), persistent=False)

    # what decoders and loaders read of a draft model
    @property
    def dtype(self) -> torch.dtype:
        return self.model.fc.weight.dtype

    @property
    def is_restricted(self) -> bool:
        return self.head_token_ids is not None

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def fused_depths(self) -> tuple[int, ...] | None:
        """The target depths fused by one map (the EAGLE-3 design), None for a one-depth head."""
        depths = getattr(self.config, "head_fused_depths", None)
        return tuple(depths) if depths else None

    @property
    def own_output(self) -> bool:
        return self.lm_head is not None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., |head|]"""
        if self.lm_head is not None:
            return self.lm_head(hidden.to(self.lm_head.weight.dtype))
        return hidden.to(self.lm_head_rows.dtype) @ self.lm_head_rows.T

    def expand_logits(self, head_logits: torch.Tensor) -> torch.Tensor:
        """[..., |head|] -> [..., V], -inf off the head."""
        return expand_to_vocabulary(head_logits, self.head_token_ids, self.vocab_size)

    # -- teacher-forced forwards (training, measurement)
    def unroll(
        self,
        input_ids: torch.Tensor,
        features: torch.Tensor,
        steps: int = 1,
        first_row: int = 0,
        valid: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Teacher-forced forward, unrolled `steps` times on its own predictions (training-time test).

        input_ids [B, T]; features [B, T, D*H]: the target's features at each position (shifted
        here: position i reads g_{i-1}, zeros at 0; D = len(target_depths)). valid [B, T]: False
        on left padding, whose keys no real row sees (each pad row sees itself only; positions
        are relative under rotary, so a left-padded sequence computes what it would alone).
        Step 1 reads the target's features; step s > 1 reads step s-1's outputs, and its query at
        position i sees what a head drafting its s-th token sees: the step-1 keys of positions
        <= i-s+1 (committed, true features) and the step-m key of position i-s+m for m = 2..s
        (its own earlier drafts). Steps s > 1 run on rows >= first_row only (the rows a loss
        reads): rows below first_row come back as 0, and rows in [first_row, first_row + s - 2)
        of step s are computed from an incomplete chain of earlier steps, so only rows from
        first_row + s - 2 on are exact.
        Returns the head's output f^ of each step, [B, T, H].
        """
        B, T = input_ids.shape
        body = self.model
        position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        predicted = body.reduce(features)  # step 0: the target's own features, [B, T, H]
        cos, sin = body.rotary_emb(predicted, position_ids)
        i = torch.arange(T, device=input_ids.device)
        w = i[first_row:]  # positions of the rows that later steps run on
        outs, keys, values = [], [[] for _ in body.layers], [[] for _ in body.layers]
        for s in range(1, steps + 1):
            rows = i if s == 1 else w
            previous = torch.cat([predicted.new_zeros(B, 1, predicted.shape[-1]), predicted[:, :-1]], dim=1)[:, rows]
            # keys of step 1 (true features, all T positions): causal up to i - s + 1; keys of step
            # m >= 2 (positions w): only position i - s + m (m = s: the row's own key, so no row is
            # ever fully masked)
            causal = attends(rows, i, lag=s - 1, key_valid=valid)  # [B or 1, 1, rows, T]
            later_valid = None if valid is None else valid[:, first_row:]  # [B, |w|]: padding among the drafts too
            later = [attends(rows, w, lag=s - m, only=True, key_valid=later_valid) for m in range(2, s + 1)]
            later = [mk.expand(causal.shape[0], -1, -1, -1) for mk in later]  # [B or 1, 1, rows, |w|] each
            mask = torch.cat([causal, *later], dim=-1)  # [B or 1, 1, rows, T + (s-1)|w|]
            x = body.fuse(input_ids[:, rows], previous)  # [B, rows, H]
            for li, layer in enumerate(body.layers):
                q, k, v = attention_inputs(layer, x, cos[:, rows], sin[:, rows])
                keys[li].append(k)
                values[li].append(v)
                o = attend(layer, q, torch.cat(keys[li], dim=2), torch.cat(values[li], dim=2), mask)
                x = finish_layer(layer, x, o)
            out = body.norm(x)
            predicted = out if s == 1 else torch.cat([out.new_zeros(B, first_row, out.shape[-1]), out], dim=1)
            outs.append(predicted)  # [B, T, H]
        return outs


# ---------------------------------------------------------------- building and files


def head_config_from_target(
    target_config, num_layers: int, fused: bool = False, own_output: bool = False, final: bool = False
) -> LlamaConfig:
    """Llama layers of the target's shape (a non-Llama target, OPT say: of its width, heads and MLP size)."""
    values = target_config.to_dict()
    if target_config.model_type != "llama":
        heads = values["num_attention_heads"]
        values = {
            "vocab_size": values["vocab_size"],
            "hidden_size": values["hidden_size"],
            "intermediate_size": values.get("intermediate_size") or values["ffn_dim"],
            "num_attention_heads": heads,
            "num_key_value_heads": values.get("num_key_value_heads") or heads,
            "max_position_embeddings": values.get("max_position_embeddings", 2048),
        }
    cfg = LlamaConfig.from_dict(values)
    cfg.head_fused_depths = list(fused_depths(target_config.num_hidden_layers, final)) if fused else None
    cfg.head_own_output = bool(own_output)
    cfg.num_hidden_layers = num_layers
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    return cfg


def build_head(
    target,
    num_layers: int = 1,
    head_token_ids: list[int] | None = None,
    seed: int = 0,
    fused: bool = False,
    own_output: bool = False,
    final: bool = False,
) -> FeatureHead:
    """A randomly initialised head over `target` (fusion, layers and norm are its own; `fused`: it
    reads three depths of the target, with `final` the final feature as the high one (`fused_depths`);
    `own_output`: its output layer is its own, from the target's rows)."""
    width = target.get_output_embeddings().weight.shape[1]
    if width != target.config.hidden_size:  # OPT-350m projects its last hidden state to a smaller width
        raise ValueError(
            f"a feature head reads the LM head's input ({width} wide), which is not the target's "
            f"hidden size ({target.config.hidden_size}); such targets are not supported"
        )
    cfg = head_config_from_target(target.config, num_layers, fused, own_output, final)
    torch.manual_seed(seed)
    head = FeatureHead(cfg, target.get_input_embeddings(), target.get_output_embeddings().weight, head_token_ids)
    std = getattr(cfg, "initializer_range", 0.02)
    for module in head.model.modules():  # the output layer keeps the target's rows it starts from
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return head.to(target.dtype).eval()


def save_head(
    head: FeatureHead, path: str | Path, dtype: torch.dtype = torch.bfloat16, extra_meta: dict | None = None
) -> Path:
    """Write the head's own parameters (fusion, layers, norm) with its layout in the metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    meta = {
        "format": HEAD_FORMAT,
        "num_layers": head.num_layers,
        "head_token_ids": head.head_ids,
        "fused_depths": list(head.fused_depths) if head.fused_depths else None,
        "own_output": head.own_output,
    } | (extra_meta or {})
    return write_with_meta(path, tensors, meta)


def read_head_meta(path: str | Path) -> dict:
    """The head file's metadata (either format: a v1 file is a one-depth head on the target's LM head)."""
    return read_meta(path, FORMATS, "feature-head")


def load_head(path: str | Path, target, dtype: torch.dtype | None = None) -> FeatureHead:
    """Rebuild the head on `target` (shared embedding and LM-head rows) from its file. No training."""
    from safetensors.torch import load_file

    meta = read_head_meta(path)
    fused, layers = meta.get("fused_depths"), target.config.num_hidden_layers
    valid = [list(fused_depths(layers)), list(fused_depths(layers, final=True))]
    if fused and list(fused) not in valid:
        raise ValueError(
            f"head file {path} reads target depths {fused}, not one of this target's {valid}: it was trained "
            "on another target"
        )
    head = build_head(
        target,
        meta["num_layers"],
        meta["head_token_ids"],
        fused=bool(fused),
        own_output=meta.get("own_output", False),
        final=bool(fused) and list(fused) == valid[1],
    )
    own, expected = load_file(str(path)), head.state_dict()
    missing, unexpected = sorted(set(expected) - set(own)), sorted(set(own) - set(expected))
    if missing or unexpected:
        raise ValueError(f"head file {path}: missing {missing}, unexpected {unexpected}")
    wrong = [k for k, v in own.items() if v.shape != expected[k].shape]
    if wrong:
        k = wrong[0]
        raise ValueError(
            f"head file {path} was made for another model: {len(wrong)} tensor(s) of another shape, e.g. {k} "
            f"{list(own[k].shape)} where this target needs {list(expected[k].shape)}"
        )
    head.load_state_dict({k: v.to(head.dtype) for k, v in own.items()})
    head.meta = meta
    return (head.to(dtype) if dtype is not None else head).eval()


# ---------------------------------------------------------------- EAGLE-1's published heads

EAGLE_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def load_eagle_head(source: str | Path, target, dtype: torch.dtype | None = None) -> FeatureHead:
    """A head published in EAGLE-1's format (SafeAILab/EAGLE, `model/cnets1.py`: the
    `yuhuili/EAGLE-llama2-chat-{7B,13B,70B}` repositories) on `target`, from a local directory or a
    hub id: `config.json` (a LlamaConfig of the head's layers) and `pytorch_model.bin` or
    `model.safetensors` with `fc.{weight,bias}` over [embedding; feature] and `layers.N.*`; its
    first layer has no input norm and there is no final norm. Its `embed_tokens.weight`, if
    present, is the target's own and is not read; the LM head is the target's full one."""
    import json as _json

    folder = Path(source)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(str(source), allow_patterns=["config.json", *EAGLE_WEIGHT_FILES]))
    config = _json.loads((folder / "config.json").read_text())
    if config.get("hidden_size") != target.config.hidden_size:
        raise ValueError(
            f"EAGLE head {source}: hidden size {config.get('hidden_size')} is not the target's "
            f"{target.config.hidden_size}"
        )
    weights = next((folder / name for name in EAGLE_WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"EAGLE head {source}: none of {EAGLE_WEIGHT_FILES} in {folder}")
    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(weights))
    else:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if k != "embed_tokens.weight"}
    cfg = head_config_from_target(target.config, int(config.get("num_hidden_layers", 1)))
    cfg.head_first_input_norm, cfg.head_final_norm = False, False
    head = FeatureHead(cfg, target.get_input_embeddings(), target.get_output_embeddings().weight)
    ours = {("model." + k): v for k, v in state.items()}
    expected = set(head.state_dict())
    if set(ours) != expected:
        raise ValueError(
            f"EAGLE head {source}: missing {sorted(expected - set(ours))}, unexpected {sorted(set(ours) - expected)}"
        )
    head.load_state_dict({k: v.to(target.dtype) for k, v in ours.items()})
    head = head.to(target.dtype)
    return (head.to(dtype) if dtype is not None else head).eval()
