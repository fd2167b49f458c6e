"""Autoregressive sampling: x_t ~ p(.|x_<t), one target call per token (the baseline)."""

from __future__ import annotations

from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import sample

# The paper's sampling setting, the default of every method (mtad-run reads the same values,
# mtad/decoding/README.md "Parameters"): temperature 1, then top-k 10, then top-p 0.9.
# The unprocessed distribution is temperature=1.0, top_k=0, top_p=1.0.
SAMPLING_PARAMS = {"temperature": 1.0, "top_k": 10, "top_p": 0.9}


class Sampling(Decoder):
    name = "sampling"
    needs_draft = False
    defaults = dict(SAMPLING_PARAMS)

    def step(self) -> Step:
        logits = self.target_lm.extend(self.uncached(self.target_lm))[-1]  # [V]
        return Step(emitted=[int(sample(self.probs(logits), self.generator))], accepted=0, drafted=0)
