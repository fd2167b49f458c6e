"""The cost model: counts x a device profile -> modelled seconds and speed-ups."""

import pytest

from mtad.bench.modelled import AGREEMENT, modelled_rows
from mtad.metrics.cost_model import (
    ACCELERATORS,
    MODELS,
    PAIR_SIZES,
    Counts,
    DeviceProfile,
    accelerator_profile,
    curve,
    from_bench,
    modelled_seconds,
    modelled_speedup,
    roofline_ms,
)


@pytest.mark.parametrize("alpha, gamma, c", [(0.6, 4, 0.05), (0.8, 3, 0.2), (0.3, 5, 0.0)])
def test_a_chain_on_a_flat_device_is_leviathans_formula(alpha, gamma, c):
    expected_tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)  # E[tokens per target call]
    calls = 10_000
    counts = Counts(round(expected_tokens * calls), calls, gamma * calls, gamma * calls)
    flat = DeviceProfile("flat", lambda w: 10.0, lambda r: 10.0 * c)
    assert modelled_speedup(counts, flat) == pytest.approx(expected_tokens / (gamma * c + 1), rel=1e-4)


def test_seconds_add_target_calls_at_their_width_host_work_and_draft_steps():
    profile = DeviceProfile("linear", lambda w: 2.0 * w, lambda r: 0.5 * r, host_ms=1.0)
    tree = Counts(new_tokens=30, target_calls=10, draft_calls=40, drafted=40, tree_nodes=160, draft_rows=4)
    # 10 calls x (T(1 + 16) + 1) + 40 x D(4) = 10 x 35 + 40 x 2 = 430 ms
    assert modelled_seconds(tree, profile) == pytest.approx(0.430)
    chain = Counts.of({"new_tokens": 30, "target_calls": 10, "draft_calls": 40, "drafted": 40}, beam_width=4)
    assert (chain.verified_per_call, chain.draft_rows) == (4.0, 4.0)


def test_a_large_target_is_memory_bound_until_hundreds_of_tokens():
    device, size = ACCELERATORS["h100"], MODELS["Llama-2-70B"]
    one, seventeen, many = (roofline_ms(size, device, w, 512) for w in (1, 17, 4096))
    assert seventeen == one and many > 5 * one
    assert one == pytest.approx(0.01 * 80 + 1e3 * (69e9 * 2 + size.kv_bytes_per_token * 512) / 3.35e12)


def test_every_pair_with_sizes_has_a_profile_and_unknown_names_list_the_known_ones():
    for pair in PAIR_SIZES:
        profile = accelerator_profile(pair)
        assert profile.target_ms(1) > profile.draft_ms(1) > 0 and profile.sources["device"]
    with pytest.raises(KeyError, match="known: .*smollm2_135m_head"):
        accelerator_profile("no_such_pair")
    with pytest.raises(KeyError, match="known: h200, h100, a100"):
        accelerator_profile("smollm2_135m_head", "tpu")


def test_a_measured_curve_interpolates_and_extends_along_its_last_slope():
    at = curve({"1": 10.0, "5": 14.0, "9": 22.0})
    assert (at(1), at(3), at(9), at(17)) == (10.0, 12.0, 22.0, 38.0)


def _payload(sps_tokens_per_s: float) -> dict:
    """A bench run: sampling (one 10 ms call per token + 1 ms outside) and SpS (γ = 4, 2 tokens per call)."""
    counts = {"new_tokens": 40, "target_calls": 20, "draft_calls": 80, "drafted": 80, "accepted": 20, "tree_nodes": 0}
    curves = [
        {"model": "target", "dtype": "bfloat16", "path": "fast", "threads": 1, "ms": {"1": 10.0, "5": 12.0}},
        {"model": "draft", "dtype": "bfloat16", "path": "fast", "threads": 1, "ms": {"1": 0.5, "4": 0.6}},
        {"model": "target", "dtype": "bfloat16", "path": "fast", "threads": 2, "ms": {"1": 6.0, "5": 9.0}},
        {"model": "draft", "dtype": "bfloat16", "path": "fast", "threads": 2, "ms": {"1": 0.3, "4": 0.4}},
    ]
    sampling = {"new_tokens": 40, "target_calls": 40, "draft_calls": 0, "drafted": 0, "accepted": 0, "tree_nodes": 0}
    rows = [
        {"label": "sampling fast", "impl": "ours", "method": "sampling", "path": "fast", "params": {},
         "tokens_per_s": 1000 / 11, "other_frac": 1 / 11, "ms_per_token": 11.0, "counts": sampling},
        {"label": "sps fast", "impl": "ours", "method": "sps", "path": "fast", "params": {"gamma": 4},
         "tokens_per_s": sps_tokens_per_s, "speedup_vs_sampling": sps_tokens_per_s * 11 / 1000, "counts": counts},
    ]  # fmt: skip
    return {
        "setup": {"pair": "smollm2_135m_head", "threads": 1},
        "environment": {"target_dtype": "torch.bfloat16", "threads": 1, "machine": "test"},
        "curve": {"context": 200, "curves": curves},
        "rows": rows,
    }


def test_the_bench_holds_the_model_against_its_own_measurements():
    # at the run's 1 thread: 20 x (T(5) 12 + host 1) + 80 x D(1) 0.5 = 300 ms for 40 tokens; sampling 40 x 11 ms
    (row,) = modelled_rows(_payload(sps_tokens_per_s=1000 * 40 / 300))
    assert row["modelled"] == pytest.approx(440 / 300) and row["agrees"]
    assert row["modelled_on_accelerator"] > 1 and row["accelerator"] == "NVIDIA H100 SXM"
    (slower,) = modelled_rows(_payload(sps_tokens_per_s=1000 * 40 / 300 / (1 + 2 * AGREEMENT)))
    assert not slower["agrees"]


def test_a_curve_the_bench_lacks_is_named_with_those_it_has():
    with pytest.raises(KeyError, match="no target or draft curve at float32"):
        from_bench(_payload(100.0), "float32", "fast")
