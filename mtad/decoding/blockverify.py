"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh; ICLR 2025): SpS's
draft chain verified as one block rather than token by token; lossless, and it keeps at least as
many tokens per block as SpS in expectation.

The chain is SpS's own (`SpeculativeSampling.propose`: a draft model or head, prompt-lookup copies as
point masses, adaptive drafting with `stop_below`); only the verification differs
(`acceptance.block_verify`). Both stay exact here:

- a chain that ends early on the draft's confidence (γ' < γ) is verified as a block of γ': the rule
  that ended it reads only the drafted prefix, so the chain is a draft that continues with q until
  the rule fires and with p after it, and on such a draft block verification over γ tokens keeps
  the same law as over the γ' drafted ones (past γ' every ratio is 1, every Z is 0, and h_γ = p_γ');
- a copied token's q is a point mass: it was drawn from q, so the premise holds; the rule then
  keeps each block with P(τ >= i | X^i) = Π_{j<=i} p(X_j), SpS's law of the accepted length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mtad.decoding.acceptance import block_verify
from mtad.decoding.logits import Dist
from mtad.decoding.params import SpSParams
from mtad.decoding.registry import VANILLA, MethodSpec
from mtad.decoding.sps import SpeculativeSampling


@dataclass(frozen=True)
class BlockVerifyParams(SpSParams):
    """`blockverify`: SpS's settings (gamma, stop_below, then sampling): the same chain, verified as a block."""


class BlockVerification(SpeculativeSampling):
    spec = MethodSpec(
        name="blockverify",
        label="BlockVerify",
        order=15,  # beside SpS, whose chain it verifies
        color="#17becf",
        marker="X",
        settings=BlockVerifyParams,
        lossless=True,
        drafts="chain",
        test_settings={"gamma": 3},
        exactness_settings=({"gamma": 2},),
        adaptive_stop=0.3,  # SpS's: the same drafts, so the same point where a further token stops paying
        verifies_drafts_of=VANILLA,  # SpS's chain, verified as one block (mtad.paper.CONVENTIONAL leaves it out)
    )
    params: BlockVerifyParams

    def verify(self, p: Dist, q: Dist, draft: torch.Tensor) -> tuple[int, int]:
        """The chain verified as one block (`acceptance.block_verify`): (τ, next token)."""
        return block_verify(p, q, draft, self.generator)
