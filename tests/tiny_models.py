"""Tiny random-weight Llama and OPT models built from configs, for the decoding tests.

float64 so that a chain forward and a tree forward agree to ~1e-15 and greedy ties never
flip; `sharpness` scales the output head so distributions are far from uniform.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM


def tiny_llama(seed: int, vocab: int = 6, sharpness: float = 1.0, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    return _finish(LlamaForCausalLM(config), sharpness)


def tiny_opt(seed: int, vocab: int = 6, sharpness: float = 1.0, layers: int = 2) -> OPTForCausalLM:
    torch.manual_seed(seed)
    config = OPTConfig(
        vocab_size=vocab,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        max_position_embeddings=512,
        word_embed_proj_dim=32,
        tie_word_embeddings=False,
    )
    return _finish(OPTForCausalLM(config), sharpness)


def _finish(model, sharpness: float):
    model = model.double().eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpness)
    return model


class BiasedLlama(LlamaForCausalLM):
    """A Llama whose logits get a fixed bias: -inf removes tokens from the support, a large
    value makes the distribution (numerically) one-hot. Adversarial drafts/targets."""

    def set_bias(self, bias: torch.Tensor) -> "BiasedLlama":
        self.register_buffer("logit_bias", bias.to(torch.float64), persistent=False)
        return self

    def forward(self, input_ids=None, cache=None, logits_to_keep=0, **kwargs):
        out = super().forward(input_ids=input_ids, cache=cache, logits_to_keep=logits_to_keep, **kwargs)
        out.logits = out.logits + self.logit_bias.to(out.logits.dtype)
        return out


def biased_llama(seed: int, bias: torch.Tensor, sharpness: float = 1.0) -> BiasedLlama:
    base = tiny_llama(seed, vocab=bias.numel(), sharpness=sharpness)
    model = BiasedLlama(base.config).double().eval()
    model.load_state_dict(base.state_dict())
    return model.set_bias(bias)


BUILDERS = {"llama": tiny_llama, "opt": tiny_opt}


def tiny_head(target, seed: int, sharpness: float = 1.0, layers: int = 1, head_token_ids=None):
    """A random feature head over `target` (its embedding and LM-head rows), float64 like the target;
    `sharpness` scales the fusion so that the head's q is far from the target's."""
    from mtad.models.head import build_head

    head = build_head(target, num_layers=layers, head_token_ids=head_token_ids, seed=seed).double().eval()
    with torch.no_grad():
        head.model.fc.weight.mul_(sharpness)
    return head
