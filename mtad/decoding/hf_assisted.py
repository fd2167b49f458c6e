"""transformers' assisted generation (its speculative sampling) behind the decoders' contract: the
draft proposes a constant `gamma` tokens per block (transformers' dynamic schedule and confidence
stop off), verified by the target. Seeding, stopping and the record as `hf_generate`'s; how many
forwards it ran is not seen, so its record counts none."""

from __future__ import annotations

from mtad.decode_stats import DecodeStats
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.hf_generate import HFGenerate
from mtad.decoding.params import HFAssistedParams
from mtad.decoding.registry import VANILLA, MethodSpec


class HFAssisted(HFGenerate):
    spec = MethodSpec(
        name="hf_assisted",
        label="HF assisted",
        order=111,
        color="#bcbd22",
        marker="s",
        settings=HFAssistedParams,
        lossless=True,  # transformers' speculative sampling keeps the target's distribution
        drafts="chain",
        implements=VANILLA,
        study=False,  # a reference implementation: the bench's row beside SpS
    )
    needs_draft = True
    params: HFAssistedParams

    def __init__(self, target, draft=None, decode_path=None, params=None, **values):
        super().__init__(target, draft, decode_path, params, **values)
        if reads_target_features(self.draft):
            raise ValueError(f"{self.name}: the draft must be a model generate() can assist with, not a feature head")

    def extra_kwargs(self) -> dict:
        config = self.draft.generation_config
        config.num_assistant_tokens = self.params.gamma
        config.num_assistant_tokens_schedule = "constant"  # a fixed γ, not transformers' dynamic schedule
        config.assistant_confidence_threshold = 0.0  # never stop drafting early
        return {"assistant_model": self.draft}

    def count_forwards(self, stats: DecodeStats) -> None:
        pass  # generate() does not say how many blocks it verified
