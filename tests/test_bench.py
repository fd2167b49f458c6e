"""The benchmark's pieces on tiny models: forward costs (a feature head over its target's cache),
the configs per draft kind, the SpS speed-up the costs predict."""

import pytest

from mtad.bench import default_configs, forward_ms, method_params, predicted_sps_speedup
from mtad.decoding import DECODERS, MMTADParams, SpecTrParams
from mtad.models.tiny import tiny_head, tiny_llama


@pytest.mark.parametrize("path", ["eager", "fast"])
def test_forward_costs_of_target_layer_draft_and_head(path):
    target = tiny_llama(0, vocab=16)
    for model in (target, tiny_llama(1, vocab=16), tiny_head(target, 1)):
        for width in (1, 4):
            assert forward_ms(model, path, width, context=20, reps=2, target=target) > 0


def test_assisted_generation_only_with_a_model_draft():
    labels = [c.label for c in default_configs(4)]
    assert "HF assisted" in labels and "mmtad fast" in labels
    assert "HF assisted" not in [c.label for c in default_configs(4, assisted=False)]


def test_benchmark_runs_each_method_with_its_settings_class():
    params = method_params(3)
    assert all(type(params[m]) is DECODERS[m].params_type for m in params)
    assert params["mmtad"] == MMTADParams(gamma=3) and params["spectr"] == SpecTrParams(gamma=3, num_drafts=2)
    assert {c.label: c.params for c in default_configs(3)}["HF assisted"].gamma == 3


def test_predicted_speedup_follows_block_efficiency_and_costs():
    assert predicted_sps_speedup(0.0, 4, 0.0, 10.0, 10.0) == pytest.approx(1.0)
    assert predicted_sps_speedup(0.8, 4, 1.0, 10.0, 15.0) == pytest.approx((1 - 0.8**5) / 0.2 * 10 / 19)
