"""Each method's settings class (mtad/decoding/params.py): fields and defaults in the config's
order, frozen, every rule checked when built, and the decoders built from keywords or an object."""

import dataclasses

import pytest
import torch

from mtad.decoding import (
    DECODERS,
    MMTADParams,
    MTADParams,
    MTJDExactParams,
    SamplingParams,
    SpecInferParams,
    SpecTrParams,
    SpSParams,
    get_decoder,
)
from mtad.models.tiny import tiny_llama
from mtad.runner.checks import SettingError, check_method

SAMPLING = {"temperature": 1.0, "top_k": 10, "top_p": 0.9}
# what each method's `defaults` dict held, in its order: the composed configs depend on both
EXPECTED = {
    "sampling": (SamplingParams, SAMPLING),
    "sps": (SpSParams, {"gamma": 4, "stop_below": 0.0, **SAMPLING}),
    "spectr": (SpecTrParams, {"gamma": 4, "num_drafts": 4, "stop_below": 0.0, **SAMPLING}),
    "specinfer": (
        SpecInferParams,
        {"k_config": (4, 2, 2), "replacement": True, "node_budget": 0, "stop_below": 0.0, **SAMPLING},
    ),
    "mtad": (
        MTADParams,
        {
            "gamma": 4,
            "beam_width": 4,
            "threshold": 0.5,
            "replacement": True,
            "beam_weighting": "proportional",
            "stop_below": 0.0,
            **SAMPLING,
        },
    ),
    "mmtad": (
        MMTADParams,
        {
            "gamma": 4,
            "beam_width": 4,
            "threshold": 0.5,
            "replacement": True,
            "beam_weighting": "proportional",
            "stop_below": 0.0,
            **SAMPLING,
            "denominator": "best_column",
            "node_budget": 0,
        },
    ),
    "mtjd_exact": (MTJDExactParams, {"gamma": 2, **SAMPLING}),
}


@pytest.mark.parametrize("method", list(EXPECTED))
def test_fields_defaults_and_their_order(method):
    cls, expected = EXPECTED[method]
    assert DECODERS[method].params_type is cls
    values = dataclasses.asdict(cls())
    assert list(values) == list(expected) and values == expected
    assert [type(v) for v in values.values()] == [type(v) for v in expected.values()]  # 1.0 stays a float
    assert dict(DECODERS[method].defaults) == expected


def test_settings_are_frozen_and_hashable():
    params = MTADParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.gamma = 3
    with pytest.raises(TypeError):
        DECODERS["mtad"].defaults["gamma"] = 3  # a read-only view
    assert hash(SpecInferParams(k_config=[2, 2])) == hash(SpecInferParams(k_config=(2, 2)))


def test_k_config_from_a_config_list_becomes_a_tuple():
    assert SpecInferParams(k_config=[2, 2, 1]).k_config == (2, 2, 1)


@pytest.mark.parametrize(
    "cls, values, message",
    [
        (SpSParams, {"gamma": 0}, "gamma must be an int >= 1, got 0"),
        (SpSParams, {"gamma": 2.5}, "gamma must be an int >= 1, got 2.5"),
        (MTJDExactParams, {"gamma": 0}, "gamma must be an int >= 1, got 0"),
        (MTADParams, {"beam_width": 0}, "beam_width must be an int >= 1, got 0"),
        (SpecTrParams, {"num_drafts": 0}, "num_drafts must be an int >= 1, got 0"),
        (MTADParams, {"threshold": 0.0}, "threshold must be in (0, 1], got 0.0"),
        (MMTADParams, {"threshold": 1.5}, "threshold must be in (0, 1], got 1.5"),
        (SamplingParams, {"temperature": -1.0}, "temperature must be >= 0 (0 = greedy), got -1.0"),
        (MTADParams, {"temperature": float("nan")}, "temperature must be >= 0"),
        (SpSParams, {"top_k": -1}, "top_k must be an int >= 0 (0 = off), got -1"),
        (SpSParams, {"top_k": 2.0}, "top_k must be an int >= 0 (0 = off), got 2.0"),
        (SpecInferParams, {"top_p": 0.0}, "top_p must be in (0, 1] (1 = off), got 0.0"),
        (SpecInferParams, {"top_p": 1.5}, "top_p must be in (0, 1] (1 = off), got 1.5"),
        (SpecInferParams, {"k_config": ()}, "k_config must be a non-empty sequence of ints >= 1, got ()"),
        (SpecInferParams, {"k_config": (2, 0)}, "k_config must be a non-empty sequence of ints >= 1, got (2, 0)"),
        (SpecInferParams, {"replacement": "yes"}, "replacement must be true or false, got 'yes'"),
        (MTADParams, {"replacement": 1}, "replacement must be true or false, got 1"),
        (MMTADParams, {"denominator": "own"}, "denominator must be one of ('best_column', 'node'), got 'own'"),
    ],
)
def test_every_rule_is_checked_when_built(cls, values, message):
    with pytest.raises(ValueError) as failure:
        cls(**values)
    assert message in str(failure.value)
    with pytest.raises(ValueError):  # replace() builds anew: the same checks
        dataclasses.replace(cls(), **values)


def test_sampling_fields_are_checked_first_as_before():
    with pytest.raises(ValueError, match="temperature"):
        MMTADParams(gamma=0, temperature=-1.0, denominator="own")
    with pytest.raises(ValueError, match="gamma"):
        MMTADParams(gamma=0, denominator="own")


@pytest.fixture(scope="module")
def models():
    return tiny_llama(0, vocab=8), tiny_llama(1, vocab=8)


def test_decoder_from_keywords_or_a_settings_object(models):
    target, draft = models
    from_keywords = get_decoder("mtad", target=target, draft=draft, gamma=3, threshold=0.3)
    from_object = get_decoder("mtad", target=target, draft=draft, params=MTADParams(gamma=3, threshold=0.3))
    both = get_decoder("mtad", target=target, draft=draft, params=MTADParams(gamma=3), threshold=0.3)
    assert from_keywords.params == from_object.params == both.params == MTADParams(gamma=3, threshold=0.3)
    prompt = torch.tensor([[1, 2, 3]])
    tokens = [
        dec.generate(prompt, 12, generator=torch.Generator().manual_seed(5)).tokens
        for dec in (from_keywords, from_object, both)
    ]
    assert tokens[0] == tokens[1] == tokens[2]
    assert get_decoder("specinfer", target=target, draft=draft, k_config=[2, 2]).params.k_config == (2, 2)


def test_unknown_keyword_or_other_settings_class_is_refused(models):
    target, draft = models
    with pytest.raises(TypeError) as failure:
        get_decoder("sps", target=target, draft=draft, beam_width=2)
    assert (
        str(failure.value)
        == "sps: unknown parameter(s) ['beam_width']; valid: ['gamma', 'stop_below', 'temperature', 'top_k', 'top_p']"
    )
    with pytest.raises(TypeError, match="mtad: params must be a MTADParams, got MMTADParams"):
        get_decoder("mtad", target=target, draft=draft, params=MMTADParams())
    with pytest.raises(TypeError, match="unknown parameter.*'tau'.*valid: .*'threshold'"):
        DECODERS["mtad"].settings(tau=0.3)


def test_check_method_builds_the_settings_without_models():
    checked = check_method("specinfer", {"k_config": [2, 2], "replacement": False})
    assert checked == SpecInferParams(k_config=(2, 2), replacement=False)
    assert list(dataclasses.asdict(checked)) == list(EXPECTED["specinfer"][1]) and checked.k_config == (2, 2)
    with pytest.raises(SettingError, match="method=mtad: threshold must be in"):
        check_method("mtad", {"threshold": 2.0})
    with pytest.raises(SettingError, match="method=sps: .*unknown parameter.*valid"):
        check_method("sps", {"beam_width": 2})
