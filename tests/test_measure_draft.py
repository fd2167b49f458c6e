"""The draft measurement on the tiny pair: every family and method, counts that add up, goals judged."""
from __future__ import annotations

import pytest
import torch

from mtad.models import load_pair
from mtad.models.distill.sources import FAMILIES
from mtad.models.measure import GOALS, METHODS, alpha_from_accept_lengths, goals_met, markdown, measure

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def result():
    return measure(load_pair("tiny_llama"), per_family=1, max_new=6, seed=0)


def test_every_family_and_method_is_measured(result):
    assert set(result["families"]) == set(FAMILIES)
    for fam in result["families"].values():
        assert set(fam["decoding"]) == set(METHODS)
        assert fam["decoding"]["sampling"]["block_efficiency"] == pytest.approx(1.0)
        for method in ("sps", "mtad", "mmtad"):
            row = fam["decoding"][method]
            assert 1.0 <= row["block_efficiency"] <= 5.0 and 0.0 <= row["alpha"] <= 1.0
        assert 0.0 <= fam["distribution"]["accept_paper"] <= 1.0 and fam["distribution"]["positions"] > 0
    assert result["cost"]["draft_step_ms"] > 0 and result["cost"]["target_step_ms"] > 0


def test_goals_follow_the_numbers(result):
    met = goals_met(result)
    chat_alpha = result["families"]["chat"]["decoding"]["sps"]["alpha"]
    assert met["alpha_chat"] == (chat_alpha >= GOALS["alpha_chat"])
    forged = {**result, "families": {f: {**r, "decoding": {**r["decoding"], "sps": {**r["decoding"]["sps"], "alpha": 0.99}}}
                                     for f, r in result["families"].items()}}
    assert goals_met(forged)["alpha_chat"] and goals_met(forged)["alpha_each_family"]
    text = markdown(result, ["# x"])
    assert "| chat | sps |" in text and ("| yes |" in text or "| no |" in text)


def test_alpha_inverts_the_mean_accepted_length():
    for alpha in (0.1, 0.4, 0.75):
        mean = sum(alpha ** i for i in range(1, 5))
        assert alpha_from_accept_lengths(mean) == pytest.approx(alpha, abs=1e-6)
    assert alpha_from_accept_lengths(0) == 0.0 and alpha_from_accept_lengths(4) == 1.0
