"""What the decoding engine asks of a model: capabilities it has or declares, never its class.

The draft architectures sit in a layer above the engine, which therefore never imports them;
a model offers what the fast path and the caches need:

- a lean forward (`has_lean_forward`): the static/compiled path replaces the model's forward
  with `static_kv.llama_body` and its head. That needs a Llama body (`model.model` with
  `embed_tokens`, `layers`, `rotary_emb`, `norm`) and a forward that computes nothing else.
  transformers' own `LlamaForCausalLM` has one; any other class says so in its own body,
  `lean_llama_forward = True`. The declaration is not inherited: a subclass with another forward
  (a logit bias, say) would lose it on the lean path, so it runs eager unless it declares
  the capability itself.
- a restricted head (`RestrictedHead`): logits on the head's own tokens (`head_logits`), then
  scattered into the vocabulary with -inf elsewhere (`expand_logits`); the lean forward keeps
  such a head restricted instead of calling `lm_head` over every token.
- reading the target's features (`reads_target_features`): a draft declaring
  `reads_target_features = True` (a feature head) is fed the target's final hidden states
  (`head_kv.HeadCachedModel`), so the target's cache keeps them. Such a draft also offers
  `model.fuse(input_ids, features)` (the layer inputs), the Llama layers `static_kv.run_layers`
  walks (`model.layers`, `model.rotary_emb`, `model.norm`) and a restricted head.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from transformers import LlamaForCausalLM

LEAN_FORWARD = "lean_llama_forward"
READS_TARGET_FEATURES = "reads_target_features"


def has_lean_forward(model) -> bool:
    """Whether the lean Llama forward computes exactly what `model`'s own forward does."""
    cls = type(model)
    return cls is LlamaForCausalLM or vars(cls).get(LEAN_FORWARD) is True


@runtime_checkable
class RestrictedHead(Protocol):
    """A head over part of the vocabulary (or all of it), read in two steps."""

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., |head|]"""

    def expand_logits(self, head_logits: torch.Tensor) -> torch.Tensor:
        """[..., |head|] -> [..., V], -inf off the head."""


def reads_target_features(model) -> bool:
    """Whether `model` is a draft that reads the target's hidden states (a feature head)."""
    return getattr(model, READS_TARGET_FEATURES, False) is True


def target_feature_depths(draft) -> tuple[int, ...] | None:
    """The target's `hidden_states` indices the draft reads, low to high (-1: the final, normed
    one), or None when it reads none: what the target's cache keeps per slot for it."""
    if draft is None or not reads_target_features(draft):
        return None
    return tuple(getattr(draft, "target_depths", (-1,)))
