"""A layer-subset draft of a Llama target, optionally with a restricted-vocabulary head.

The draft keeps the target's token embedding (shared, never saved) and a few of its
decoder layers (trained by distillation). Its head is either the target's tied embedding
(full vocabulary) or a trainable head over a subset of token ids `head_token_ids`: the
logits of every other token are -inf, so q is exactly zero there. That keeps speculative
sampling exact (a token q never proposes is simply never accepted from q; the residual
max(0, p - q) still covers it) while the head costs |subset|/|V| of the full one.

The forward is the standard causal-LM one (DynamicCache, 2-D or custom 4-D masks,
explicit position_ids) because the body is transformers' own `LlamaModel`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import GenerationMixin, LlamaConfig, LlamaModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaPreTrainedModel

from mtad import PACKAGE
from mtad.models.quantized import dense_state_dict

DRAFT_FORMAT = "mtad-draft-v1"


def expand_to_vocabulary(
    head_logits: torch.Tensor, head_token_ids: torch.Tensor | None, vocab_size: int
) -> torch.Tensor:
    """Logits over a restricted head's tokens into the full vocabulary, -inf elsewhere (q = 0 there):
    [..., |head|] -> [..., V]; an unrestricted head (ids None) is returned as it is."""
    if head_token_ids is None:
        return head_logits
    full = head_logits.new_full((*head_logits.shape[:-1], vocab_size), float("-inf"))
    full[..., head_token_ids] = head_logits
    return full


class LlamaDraftForCausalLM(LlamaPreTrainedModel, GenerationMixin):
    """Causal LM over the full vocabulary whose head may cover only `head_token_ids`."""

    _tied_weights_keys = None  # the head is a separate tensor (copied or restricted), never tied
    # the forward is LlamaModel then the head, which is what the decode fast path's lean forward
    # computes (mtad.decoding.capabilities); a subclass with another forward does not inherit this
    lean_llama_forward = True

    def __init__(self, config: LlamaConfig, head_token_ids: list[int] | None = None):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.vocab_size = config.vocab_size
        ids = head_token_ids if head_token_ids is not None else getattr(config, "draft_head_token_ids", None)
        if ids is not None:
            ids = sorted(set(int(i) for i in ids))
            if not ids or ids[0] < 0 or ids[-1] >= config.vocab_size:
                raise ValueError(f"head_token_ids must lie in [0, {config.vocab_size})")
            config.draft_head_token_ids = ids
            self.register_buffer("head_token_ids", torch.tensor(ids, dtype=torch.long), persistent=False)
            head_size = len(ids)
        else:
            self.head_token_ids = None
            head_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, head_size, bias=False)
        self.post_init()

    @property
    def is_restricted(self) -> bool:
        return self.head_token_ids is not None

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the head's own tokens only: [..., H] -> [..., |head|]."""
        return self.lm_head(hidden)

    def expand_logits(self, head_logits: torch.Tensor) -> torch.Tensor:
        """Scatter head logits into the full vocabulary, -inf elsewhere: [..., |head|] -> [..., V]."""
        return expand_to_vocabulary(head_logits, self.head_token_ids, self.vocab_size)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        past_key_values=None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        # transformers 5.x renamed `past_key_values` to `cache`; accept either name.
        if cache is None:
            cache = past_key_values
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = outputs.last_hidden_state  # [B, T, H]
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.expand_logits(self.head_logits(hidden[:, keep, :]))  # [B, T', V]
        return CausalLMOutputWithPast(logits=logits, cache=outputs.cache)


# ---------------------------------------------------------------- building and files


def draft_config_from_target(target_config: LlamaConfig, num_layers: int) -> LlamaConfig:
    cfg = LlamaConfig.from_dict(target_config.to_dict())
    cfg.num_hidden_layers = num_layers
    cfg.tie_word_embeddings = False
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.architectures = ["LlamaDraftForCausalLM"]
    return cfg


def build_draft_from_target(
    target, layers: list[int], head_token_ids: list[int] | None = None
) -> LlamaDraftForCausalLM:
    """Draft initialised from `target`: embedding, the chosen decoder layers, final norm, head rows."""
    n_target = target.config.num_hidden_layers
    if not layers or any(i < 0 or i >= n_target for i in layers):
        raise ValueError(f"draft layers {layers} must be indices into the target's {n_target} layers")
    cfg = draft_config_from_target(target.config, len(layers))
    cfg.draft_source_layers = list(layers)
    draft = LlamaDraftForCausalLM(cfg, head_token_ids=head_token_ids).to(target.dtype)
    src = target.model
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(src.embed_tokens.weight)
        for dst_i, src_i in enumerate(layers):
            draft.model.layers[dst_i].load_state_dict(dense_state_dict(src.layers[src_i]))  # a q4_1 target too
        draft.model.norm.load_state_dict(src.norm.state_dict())
        head_rows = target.get_output_embeddings().weight  # [V, H]
        if draft.is_restricted:
            head_rows = head_rows[draft.head_token_ids]
        draft.lm_head.weight.copy_(head_rows)
    return draft.eval()


def own_state_dict(draft: LlamaDraftForCausalLM) -> dict[str, torch.Tensor]:
    """The parameters that belong to the draft alone (everything but the shared embedding;
    the head too unless it is the full, untrained copy of the target's tied head)."""
    state = {}
    for key, value in draft.state_dict().items():
        if key == "model.embed_tokens.weight":
            continue
        if (
            key == "lm_head.weight"
            and not draft.is_restricted
            and not getattr(draft.config, "draft_head_trained", False)
        ):
            continue
        state[key] = value.detach().contiguous()
    return state


def draft_meta(draft: LlamaDraftForCausalLM) -> dict:
    return {
        "format": DRAFT_FORMAT,
        "source_layers": list(draft.config.draft_source_layers),
        "head_token_ids": list(draft.config.draft_head_token_ids) if draft.is_restricted else None,
        "head_trained": bool(draft.is_restricted or getattr(draft.config, "draft_head_trained", False)),
    }


def save_draft(
    draft: LlamaDraftForCausalLM, path: str | Path, dtype: torch.dtype = torch.bfloat16, extra_meta: dict | None = None
) -> Path:
    """Write the draft's own parameters to `path` (.safetensors) with its layout in the metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in own_state_dict(draft).items()}
    return write_with_meta(path, tensors, draft_meta(draft) | (extra_meta or {}))


def write_with_meta(path: Path, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
    """A safetensors file with our layout record under the metadata key "mtad", written atomically."""
    from safetensors.torch import save_file

    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={PACKAGE: json.dumps(meta)})
    tmp.replace(path)
    return path


def read_meta(path: str | Path, expected_format: str | tuple[str, ...], what: str) -> dict:
    """The "mtad" metadata of a file; refused unless its format is `expected_format` (or one of them)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get(PACKAGE, "{}"))
    formats = (expected_format,) if isinstance(expected_format, str) else tuple(expected_format)
    if meta.get("format") not in formats:
        raise ValueError(
            f"{path} is not an mtad {what} file (metadata format {meta.get('format')!r}, "
            f"expected {' or '.join(map(repr, formats))})"
        )
    return meta


def read_draft_meta(path: str | Path) -> dict:
    return read_meta(path, DRAFT_FORMAT, "draft")


def load_draft(path: str | Path, target, dtype: torch.dtype | None = None) -> LlamaDraftForCausalLM:
    """Rebuild the draft: shared parts from `target`, its own parameters from `path`. No training."""
    from safetensors.torch import load_file

    meta = read_draft_meta(path)
    draft = build_draft_from_target(target, meta["source_layers"], meta["head_token_ids"])
    own = load_file(str(path))
    missing = set(own_state_dict(draft)) - set(own)
    if missing and meta.get("head_trained"):
        raise ValueError(f"draft file {path} lacks {sorted(missing)}")
    with torch.no_grad():
        params = dict(draft.named_parameters())
        for key, value in own.items():
            if key not in params:
                raise ValueError(f"draft file {path} has unexpected tensor {key}")
            if value.shape != params[key].shape:
                raise ValueError(
                    f"draft file {path} was made for another model: {key} is {list(value.shape)} where this "
                    f"target needs {list(params[key].shape)}"
                )
            params[key].copy_(value.to(params[key].dtype))
    if meta.get("head_trained"):
        draft.config.draft_head_trained = True
    if dtype is not None:
        draft = draft.to(dtype)
    return draft.eval()
