"""MTAD: multi-token assisted decoding (the paper's method). Lossy by design.

Draft a γ-token block by beam sampling with q, keep the best final beam, then accept the
longest prefix whose joint likelihood ratio r_d = Π p_j(x_j) / Π q_j(x_j) exceeds τ, and
sample one more token from p. No random draw in the acceptance.
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import mtad_accept_length
from mtad.decoding.base import Decoder, Step
from mtad.decoding.beam import beam_sample
from mtad.decoding.logits import logits_to_probs, sample
from mtad.decoding.sampling import SAMPLING_PARAMS

# the official implementation's settings: every MTAD example of it samples beams with replacement
MTAD_PARAMS = {"gamma": 4, "beam_width": 4, "threshold": 0.5, "replacement": True, **SAMPLING_PARAMS}


class MultiTokenDecoder(Decoder):
    """Shared by MTAD and MMTAD. At temperature 0 the beams are chosen by beam search and the
    emitted token is the argmax, while the probabilities in the ratio stay at temperature 1
    (a one-hot ratio would be meaningless)."""

    defaults = MTAD_PARAMS

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def score_probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.temperature or 1.0, self.top_k, self.top_p)

    def next_token(self, p: torch.Tensor) -> int:
        return int(p.argmax()) if self.greedy else int(sample(p, self.generator))

    def validate(self) -> None:
        if not isinstance(self.replacement, bool):
            raise ValueError(f"replacement must be true or false, got {self.replacement!r}")

    def draft_beams(self):
        return beam_sample(
            self.draft_lm,
            self.uncached(self.draft_lm),
            self.gamma,
            self.beam_width,
            self.score_probs,
            self.greedy,
            self.replacement,
            self.generator,
        )


class MTAD(MultiTokenDecoder):
    name = "mtad"

    def step(self) -> Step:
        base = self.length
        beams = self.draft_beams()
        path = beams.tree.path(beams.best_leaf)  # γ nodes, root to leaf
        draft = torch.tensor([beams.tree.tokens[i] for i in path], device=self.seq.device)  # [γ]
        logq = beams.q_token[path].log()  # [γ]
        fresh = self.uncached(self.target_lm)
        p = self.score_probs(self.target_lm.extend(torch.cat([fresh, draft]))[-(self.gamma + 1) :])  # [γ+1, V]
        logp = p[torch.arange(self.gamma, device=p.device), draft].log()  # [γ]
        n = mtad_accept_length(logp, logq, self.threshold)
        token = self.next_token(p[n])
        self.target_lm.crop(base + n)
        self.draft_lm.commit_path(path[:n])
        return Step(emitted=draft[:n].tolist() + [token], accepted=n, drafted=self.gamma)
