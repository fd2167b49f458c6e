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
from mtad.decoding.logits import Dist, Support, logits_to_dist, sample
from mtad.decoding.params import MTADParams
from mtad.decoding.registry import MethodSpec


class MultiTokenDecoder(Decoder):
    """Shared by MTAD and MMTAD. At temperature 0 the beams are chosen by beam search and the
    emitted token is the argmax, while the probabilities in the ratio stay at temperature 1
    (a one-hot ratio would be meaningless)."""

    params_type = MTADParams
    params: MTADParams  # MMTAD: an MMTADParams, which extends it

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0

    def score_probs(self, logits: torch.Tensor, support: Support | None = None) -> Dist:
        """p or q as the joint rule scores them: a greedy run's at temperature 1 (`logits_to_dist`'s
        `support`: the tokens a restricted head's logits cover)."""
        p = self.params
        return logits_to_dist(logits, p.temperature or 1.0, p.top_k, p.top_p, support)

    def next_token(self, p: Dist) -> int:
        # ids ascend, so the first maximum is the lowest id, as a dense row's argmax
        return int(p.ids[p.probs.argmax()]) if self.greedy else int(sample(p, self.generator))

    def draft_beams(self):
        p = self.params
        return beam_sample(
            self.draft_lm,
            self.uncached(self.draft_lm),
            p.gamma,
            p.beam_width,
            self.score_probs,
            self.greedy,
            p.replacement,
            self.generator,
            p.beam_weighting,
            p.stop_below,
        )


class MTAD(MultiTokenDecoder):
    spec = MethodSpec(
        name="mtad",
        label="MTAD",
        order=40,
        color="#d62728",
        marker="D",
        settings=MTADParams,
        lossless=False,
        drafts="beams",
        test_settings={"gamma": 3, "beam_width": 3},
        # the joint-probability rule costs block efficiency soon, hence a threshold far below SpS's
        adaptive_stop=0.03,
    )

    def step(self) -> Step:
        base = self.length
        beams = self.draft_beams()
        path = beams.tree.path(beams.best_leaf)  # γ' <= γ nodes, root to leaf
        gamma = len(path)
        draft = torch.tensor([beams.tree.tokens[i] for i in path], device=self.seq.device)  # [γ]
        logq = beams.q_token[path].log()  # [γ]
        fresh = self.uncached(self.target_lm)
        p = self.score_probs(self.target_lm.extend(torch.cat([fresh, draft]))[-(gamma + 1) :])  # [γ+1, k]
        logp = p[:gamma].prob_of(draft).log()  # [γ]
        n = mtad_accept_length(logp, logq, self.params.threshold)
        token = self.next_token(p[n])
        self.target_lm.crop(base + n)
        self.draft_lm.commit_path(path[:n])
        return Step(emitted=draft[:n].tolist() + [token], accepted=n, drafted=gamma)
