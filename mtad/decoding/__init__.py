"""Decoding methods behind one contract (rules and settings: mtad/decoding/README.md):

dec = get_decoder(name, target=target_model, draft=draft_model, **params)  # or params=MTADParams(gamma=3)
out = dec.generate(input_ids, max_new_tokens=N, eos_token_id=None, generator=g)
out.tokens, out.stats

The contract in ``base`` (its statistics declared in ``mtad.decode_stats``), settings
classes in ``params``, one module per method (each declares its ``mtad.decoding.registry.MethodSpec`` beside
its class; importing this package imports every module, which registers them), the acceptance
rules in ``acceptance``, p/q processing in ``logits``, caches and fast paths in ``kv``, ``static_kv``
and ``head_kv``, attention masks in ``masks``, trees and beams in ``tree`` and ``beam``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from typing import Any

from transformers import PreTrainedModel

from mtad.decoding.base import DecodeOutput, Decoder, DecodeStats
from mtad.decoding.mtjd_exact import exact_block_distribution
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
from mtad.decoding.registry import implementations, study_methods

# every module of the package is imported: a method module's class registers its spec as it is made
# (Decoder.__init_subclass__), so a new method needs no line here
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


class Registered(Mapping):
    """Name -> decoder class of every registered method (the study's and the tools', such as
    mtjd_exact), in table order; read from the registry at each use (``mtad.decoding.registry``), so a method
    registered later is in it."""

    def __getitem__(self, name: str) -> type[Decoder]:
        return implementations()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(implementations())

    def __len__(self) -> int:
        return len(implementations())

    def __repr__(self) -> str:
        return f"DECODERS({', '.join(self)})"


DECODERS: Mapping[str, type[Decoder]] = Registered()
METHODS = study_methods()  # the study's methods in table order (mtad.decoding.registry)


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
