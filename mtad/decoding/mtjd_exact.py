"""Exact multi-token joint decoding for tiny vocabularies (analysis and tests only).

Enumerates all |V|^γ continuations, forms their joint target probability under the raw
distribution, applies temperature, top-k and top-p to the *blocks* and samples one block.
This is the distribution MTAD approximates with a draft model and a threshold.
"""

from __future__ import annotations

import itertools

import torch
from transformers import PreTrainedModel

from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import logits_to_probs, sample
from mtad.decoding.params import MTJDExactParams
from mtad.decoding.registry import MethodSpec
from mtad.devices import model_device

MAX_BLOCKS = 1 << 16


@torch.inference_mode()
def joint_block_logprobs(
    target: PreTrainedModel, prefix: torch.Tensor, gamma: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """All blocks [N=V^γ, γ] and their joint raw log-probability [N] given prefix [L]."""
    vocab = target.config.vocab_size
    if vocab**gamma > MAX_BLOCKS:
        raise ValueError(f"mtjd_exact enumerates V^γ = {vocab}^{gamma} blocks; limit is {MAX_BLOCKS}")
    device = model_device(target)
    blocks = torch.tensor(list(itertools.product(range(vocab), repeat=gamma)), device=device)  # [N, γ]
    inputs = torch.cat([prefix.to(device).expand(blocks.shape[0], -1), blocks], dim=1)  # [N, L+γ]
    logits = target(input_ids=inputs).logits[:, prefix.numel() - 1 : -1].float()  # [N, γ, V] predicts each block token
    logp = logits.log_softmax(-1).gather(-1, blocks[..., None])[..., 0].sum(-1)  # [N]
    return blocks, logp


def exact_block_distribution(
    target: PreTrainedModel,
    prefix: torch.Tensor,
    gamma: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks [N, γ] and the processed joint distribution over them [N]."""
    blocks, logp = joint_block_logprobs(target, prefix, gamma)
    return blocks, logits_to_probs(logp, temperature, top_k, top_p)


class MTJDExact(Decoder):
    spec = MethodSpec(
        name="mtjd_exact",
        label="exact MTJD",
        order=100,
        color="#8c564b",
        marker="*",
        settings=MTJDExactParams,
        lossless=False,  # top-k and top-p act on whole blocks: the joint's distribution, not p's per token
        drafts="none",
        study=False,  # enumerates |V|^γ blocks: tiny vocabularies only (tests, analysis)
    )
    needs_draft = False
    params: MTJDExactParams

    def step(self) -> Step:
        p = self.params
        blocks, probs = exact_block_distribution(
            self.target, self.seq[: self.length], p.gamma, p.temperature, p.top_k, p.top_p
        )
        self.target_lm.calls += 1  # one batched forward over every block, no cache
        return Step(emitted=blocks[int(sample(probs, self.generator))].tolist(), accepted=0, drafted=0)
