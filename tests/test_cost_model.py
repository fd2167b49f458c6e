"""The cost model: counts x a device profile -> modelled seconds and speed-ups."""

import pytest

from mtad.bench.modelled import AGREEMENT, generation_costs, modelled_rows
from mtad.metrics.cost_model import (
    ACCELERATORS,
    MODELS,
    PAIR_SIZES,
    Counts,
    DeviceProfile,
    accelerator_profile,
    curve,
    fit_profile,
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
    tree = Counts(new_tokens=30, target_calls=10, draft_calls=40, drafted=40, tree_nodes=160, draft_rows_per_call=4)
    # 10 calls x (T(1 + 16) + 1) + 40 x D(4) = 10 x 35 + 40 x 2 = 430 ms
    assert modelled_seconds(tree, profile) == pytest.approx(0.430)
    beam = Counts.of({"new_tokens": 30, "target_calls": 10, "draft_calls": 40, "drafted": 40, "draft_rows": 160})
    assert (beam.verified_per_call, beam.draft_rows_per_call) == (4.0, 4.0)
    # two prompts of 50 tokens on average, each prefilled at F(P) = 0.5 ms per token: + 50 ms, sampling's too
    prefilled = DeviceProfile("linear", lambda w: 2.0 * w, lambda r: 0.5 * r, 1.0, {}, lambda p: 0.5 * p)
    with_prompts = Counts(30, 10, 40, 40, 160, 4, prompt_tokens=100, generations=2)
    assert modelled_seconds(with_prompts, prefilled) == pytest.approx(0.480)
    assert modelled_speedup(with_prompts, prefilled) == pytest.approx((30 * 3 + 50) / 480)


def test_draft_rows_per_call_are_the_rows_the_draft_forwards_read():
    # SpecInfer's (4, 2, 2) tree: 3 draft forwards of 1, 4 and 8 rows score 28 nodes
    record = {"new_tokens": 4, "target_calls": 1, "draft_calls": 3, "drafted": 3, "tree_nodes": 28, "draft_rows": 13}
    assert Counts.of(record).draft_rows_per_call == pytest.approx(13 / 3)
    # a beam's rows as read (more than its width where a block's first forward catches up)
    beam = {"new_tokens": 8, "target_calls": 2, "draft_calls": 8, "drafted": 8, "draft_rows": 36}
    assert Counts.of(beam).draft_rows_per_call == 4.5
    # sampling: no draft calls, so 1 row per call, times 0 calls
    assert Counts.of({"new_tokens": 8, "target_calls": 8, "draft_rows": float("nan")}).draft_rows_per_call == 1.0


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


COST = {"a": 10.0, "b": 2.0, "c": 0.5, "d": 0.25, "prefill": 1.0, "host": {"sampling": 1.0, "sps": 3.0, "mtad": 6.0}}


def _generation(method: str, rep: int, prompt: int, calls: int, prompt_tokens: int, slower: float = 1.0) -> dict:
    """A generation timed on a machine whose costs are `COST` exactly (ms), except that its target forwards
    take `slower` times theirs: 40 tokens, γ = 4 per call for SpS, 2 for MTAD's beam of 4. The prefill is
    the target's, part of its target seconds, as a `DecodeStats` record holds it."""
    gamma, beam = {"sampling": (0, 1), "sps": (4, 1), "mtad": (2, 4)}[method]
    drafts = gamma * calls
    target = slower * calls * (COST["a"] + COST["b"] * (1 + gamma))
    draft = drafts * (COST["c"] + COST["d"] * beam)
    prefill, host = COST["prefill"] * prompt_tokens, COST["host"][method] * calls
    return {
        "rep": rep, "prompt": prompt, "new_tokens": 40, "target_calls": calls, "draft_calls": drafts,
        "drafted": drafts, "accepted": 0, "tree_nodes": 0, "draft_rows": drafts * beam,
        "prompt_tokens": prompt_tokens, "generations": 1, "seconds": (target + draft + prefill + host) / 1e3,
        "target_seconds": (target + prefill) / 1e3, "target_prefill_seconds": prefill / 1e3,
        "draft_seconds": draft / 1e3, "draft_prefill_seconds": 0.0,
    }  # fmt: skip


def _row(method: str, calls_by_prompt: tuple[int, ...], slower: float = 1.0) -> dict:
    """A bench row of 3 repetitions over prompts of 30 and 50 tokens; `slower` scales its target forwards."""
    beam = 4 if method == "mtad" else 1
    gens = [
        _generation(method, rep, i, calls + (rep if method != "sampling" else 0), (30, 50)[i], slower)
        for rep in range(3)
        for i, calls in enumerate(calls_by_prompt)
    ]
    tps = [40 * len(calls_by_prompt) / sum(g["seconds"] for g in gens if g["rep"] == r) for r in range(3)]
    return {
        "label": f"{method} fast", "impl": "ours", "method": method, "path": "fast",
        "params": {"beam_width": beam} if beam > 1 else {}, "tokens_per_s": sorted(tps)[1], "generations": gens,
        "tokens_per_s_reps": tps,
        "counts": {k: sum(g[k] for g in gens) for k in gens[0] if k not in ("rep", "prompt")},
        "other_frac": 0.05, "ms_per_token": 20.0,
    }  # fmt: skip


def _payload(slower_sps: float = 1.0) -> dict:
    """A bench run on a machine of costs `COST`: sampling, SpS and MTAD (beam of 4) on two prompts."""
    rows = [_row("sampling", (40, 40)), _row("sps", (20, 16), slower_sps), _row("mtad", (18, 22))]
    for r in rows:
        r["speedup_vs_sampling"] = r["tokens_per_s"] / rows[0]["tokens_per_s"]
    return {
        "setup": {"pair": "smollm2_135m_head", "threads": 1},
        "environment": {"target_dtype": "bfloat16", "threads": 1, "machine": "test"},
        "curve": None,
        "rows": rows,
    }


def test_a_profile_fitted_to_exact_costs_recovers_them():
    every = [c for r in _payload()["rows"] for _, _, c in generation_costs(r)]
    fit = fit_profile(every)
    assert fit.target == pytest.approx((COST["a"], COST["b"])) and fit.draft == pytest.approx((COST["c"], COST["d"]))
    assert fit.prefill_per_token_ms == pytest.approx(COST["prefill"]) and fit.host_ms == pytest.approx(COST["host"])
    with pytest.raises(KeyError, match="fitted: sampling, sps, mtad"):
        fit.profile("mmtad")


def test_the_bench_holds_the_model_against_its_own_measurements():
    rows = {r["method"]: r for r in modelled_rows(_payload())}
    assert set(rows) == {"sps", "mtad"} and all(r["agrees"] for r in rows.values())
    assert rows["sps"]["modelled"] == pytest.approx(rows["sps"]["measured_pooled"])
    assert rows["sps"]["measured_pooled"] == pytest.approx(rows["sps"]["measured"], rel=0.05)
    assert rows["sps"]["measured_range"][0] <= rows["sps"]["measured"] <= rows["sps"]["measured_range"][1]
    assert rows["sps"]["modelled_on_accelerator"] > 1 and rows["sps"]["accelerator"] == "NVIDIA H100 SXM"
    # SpS's target forwards slower than a line through the three methods' widths (1, 3, 5) allows: the
    # shared fit cannot follow every method, and the test flags the machine as not the model's shape
    slower = modelled_rows(_payload(slower_sps=1 + 4 * AGREEMENT))
    assert not all(r["agrees"] for r in slower)


def test_a_measured_host_term_replaces_the_fitted_one_and_the_baselines_stand_beside_it():
    from mtad.bench.block_profile import HOST
    from mtad.bench.goal_checks import _cost_model_goal
    from mtad.bench.modelled import attach_host_profile

    zero = dict.fromkeys(HOST[:-1], 0.0)  # every host phase but the Python between them

    def profile(machine: str, host: dict) -> dict:
        rows = [
            {
                "method": m,
                "threads": 1,
                "prompts": "short",
                "ms_per_block": {"target": 9.0, "draft": 1.0, "python": h} | zero,
            }
            for m, h in host.items()
        ]
        return {"setup": {"machine": f"{machine}, avx2", "decode_path": "fast"}, "rows": rows}

    # the machine's true host work, measured: the model is exact; one host term for all is not
    exact = attach_host_profile(_payload(), profile("test", COST["host"]))
    rows = {r["method"]: r for r in modelled_rows(exact)}
    assert all(r["host_term"] == "measured" and r["agrees"] for r in rows.values())
    assert rows["mtad"]["modelled"] == pytest.approx(rows["mtad"]["measured_pooled"])
    assert not rows["mtad"]["baselines_agree"]["shared host"] and rows["mtad"]["modelled_by_host"]["shared"]
    goal = _cost_model_goal(exact)
    assert (
        goal["met"]
        and "fast: measured by `make profile`" in goal["measured"]
        and "shared host: 0 agree" in goal["measured"]
    )
    # a host term measured wrong (SpS's tenfold) is not fitted away: the test fails
    wrong = attach_host_profile(_payload(), profile("test", COST["host"] | {"sps": 30.0}))
    assert not {r["method"]: r for r in modelled_rows(wrong)}["sps"]["agrees"] and not _cost_model_goal(wrong)["met"]
    # a profile of another machine is not read: the host term is fitted
    other = attach_host_profile(_payload(), profile("elsewhere", COST["host"]))
    assert "host_ms" not in other and all(r["host_term"] == "fitted" for r in modelled_rows(other))


def test_one_prompt_leaves_nothing_to_hold_out():
    payload = _payload()
    for r in payload["rows"]:
        r["generations"] = [g for g in r["generations"] if g["prompt"] == 0]
    assert all(r["modelled"] is None and r["agrees"] is None for r in modelled_rows(payload))


def _curve_payload() -> dict:
    curves = [
        {"model": "target", "dtype": "bfloat16", "path": "fast", "threads": 1, "ms": {"1": 10.0, "5": 12.0}},
        {"model": "draft", "dtype": "bfloat16", "path": "fast", "threads": 1, "ms": {"1": 0.5, "4": 0.6}},
    ]
    return {**_payload(), "curve": {"context": 200, "curves": curves}}


def test_the_isolated_forwards_model_the_same_counts_beside_the_fit():
    # sps over 3 repetitions of 2 prompts: 114 calls at T(5) 12 ms + host 1 ms, 456 draft steps of 0.5 ms;
    # sampling: 240 calls at T(1) 10 ms + host 1 ms
    (sps, _) = modelled_rows(_curve_payload())
    assert sps["modelled_isolated"] == pytest.approx((240 * 11) / (114 * 13 + 456 * 0.5))


def test_a_curve_the_bench_lacks_is_named_with_those_it_has():
    with pytest.raises(KeyError, match="no target or draft curve at float32"):
        from_bench(_curve_payload(), "float32", "fast")


def test_one_mtad_cell_gives_the_same_counts_to_table2_the_claims_and_the_bench():
    from mtad.metrics.cost_model import Counts
    from mtad.report.tables import _counts

    totals = {"new_tokens": 60, "target_calls": 30, "draft_calls": 120, "drafted": 120, "draft_rows": 480}
    table2 = _counts({**totals, "param.gamma": 4, "param.beam_width": 4})  # a cell row: settings beside counts
    # the claims report (per-example sums) and the bench (a row's counts) read the totals alone
    assert table2 == Counts.of(totals) and table2.draft_rows_per_call == 4.0
