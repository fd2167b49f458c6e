"""Decoding methods behind one contract (rules and settings: mtad/decoding/README.md):

dec = get_decoder(name, target=target_model, draft=draft_model, **params)  # or params=MTADParams(gamma=3)
out = dec.generate(input_ids, max_new_tokens=N, eos_token_id=None, generator=g)
out.tokens, out.stats

The contract in ``base`` (its statistics declared in ``mtad.decode_stats``), settings
classes in ``params``, one module per method, the acceptance rules in ``acceptance``, p/q
processing in ``logits``, caches and fast paths in ``kv``, ``static_kv`` and ``head_kv``, attention
masks in ``masks``, trees and beams in ``tree`` and ``beam``.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel

from mtad.decoding.base import DecodeOutput, Decoder, DecodeStats
from mtad.decoding.mmtad import MMTAD
from mtad.decoding.mtad import MTAD
from mtad.decoding.mtjd_exact import MTJDExact, exact_block_distribution
from mtad.decoding.params import (
    DecoderParams,
    MMTADParams,
    MTADParams,
    MTJDExactParams,
    SamplingFields,
    SamplingParams,
    SpecInferParams,
    SpecTrParams,
    SpSParams,
)
from mtad.decoding.sampling import Sampling
from mtad.decoding.specinfer import SpecInfer
from mtad.decoding.spectr import SpecTr
from mtad.decoding.sps import SpeculativeSampling
from mtad.methods import METHODS

DECODERS: dict[str, type[Decoder]] = {
    cls.name: cls for cls in (Sampling, SpeculativeSampling, SpecTr, SpecInfer, MTAD, MMTAD, MTJDExact)
}

# METHODS: the six methods of the study (mtad.methods); mtjd_exact is for tiny vocabularies
# (tests, analysis).


def get_decoder(name: str, target: PreTrainedModel, draft: PreTrainedModel | None = None, **params: Any) -> Decoder:
    """Build a decoder by name; unknown names list the valid ones. `params`: the method's settings
    as keywords, and/or `params=` a ready settings object of its class (`DECODERS[name].params_type`),
    and `decode_path=`."""
    if name not in DECODERS:
        raise KeyError(f"unknown decoding method {name!r}; valid: {', '.join(DECODERS)}")
    return DECODERS[name](target=target, draft=draft, **params)


__all__ = [
    "DECODERS",
    "METHODS",
    "DecodeOutput",
    "DecodeStats",
    "Decoder",
    "DecoderParams",
    "MMTADParams",
    "MTADParams",
    "MTJDExactParams",
    "SamplingFields",
    "SamplingParams",
    "SpSParams",
    "SpecInferParams",
    "SpecTrParams",
    "exact_block_distribution",
    "get_decoder",
]
