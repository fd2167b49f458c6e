"""Autoregressive sampling: x_t ~ p(.|x_<t), one target call per token (the baseline)."""

from __future__ import annotations

from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import sample
from mtad.decoding.params import SamplingParams
from mtad.decoding.registry import MethodSpec

# The paper's sampling setting, the default of every method, as a plain dict (keyword arguments
# for logits_to_probs, a record's "setting"): temperature 1, then top-k 10, then top-p 0.9.
SAMPLING_PARAMS = SamplingParams.defaults()


class Sampling(Decoder):
    spec = MethodSpec(
        name="sampling",
        label="sampling",
        order=0,
        color="#7f7f7f",
        marker="o",
        settings=SamplingParams,
        lossless=True,
        drafts="none",
        exactness_settings=({},),  # the reference's own draws against the target's distribution
    )
    needs_draft = False
    params: SamplingParams

    def step(self) -> Step:
        logits = self.target_lm.extend(self.uncached(self.target_lm))[-1]  # [V]
        return Step(emitted=[int(sample(self.probs(logits), self.generator))], accepted=0, drafted=0)
