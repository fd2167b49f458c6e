"""The benchmark's pieces on tiny models: forward costs (a feature head over its target's cache),
the configs per draft kind, the SpS speed-up the costs predict; a forward's matrix products alone
(against the products a forward runs), the curve and sampling with a q4_1 target, the optional
llama.cpp reference, and the report and goals on synthetic numbers."""

import json
import operator
import os
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mtad.bench import (
    LLAMA_CPP_MISSING,
    calibration,
    curve_model,
    default_configs,
    goals,
    int8_products,
    linear_only_ms,
    llama_cpp_reference,
    matrix_products,
    method_params,
    predicted_sps_speedup,
    products_ms,
    summarise,
    verification_curve,
    write_report,
)
from mtad.bench import timings as bench_timings
from mtad.bench.block_profile import HOST
from mtad.bench.llama_cpp import in_child_process
from mtad.bench.render import _calibration_line, read_timings
from mtad.bench.timings import budget_configs, run, tree_nodes
from mtad.decode_stats import DecodeStats
from mtad.decoding import DECODERS, MMTADParams, SpecTrParams
from mtad.decoding.kv import CachedModel
from mtad.decoding.static_kv import cached_model
from mtad.generation import forward_ms
from mtad.metrics.cost_model import GenerationCost
from mtad.models.quantized import quantize, quantize_q4_1
from mtad.models.tiny import tiny_head, tiny_llama
from mtad.result_files import BENCH, read_section, write_section


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
    assert params["mmtad"] == MMTADParams(gamma=3) and params["spectr"] == SpecTrParams(
        gamma=3
    )  # the configs' defaults
    assert {c.label: c.params for c in default_configs(3)}["HF assisted"].gamma == 3


def test_predicted_speedup_follows_block_efficiency_and_costs():
    assert predicted_sps_speedup(0.0, 4, 0.0, 10.0, 10.0) == pytest.approx(1.0)
    assert predicted_sps_speedup(0.8, 4, 1.0, 10.0, 15.0) == pytest.approx((1 - 0.8**5) / 0.2 * 10 / 19)


# ---------------------------------------------------------------- a forward's matrix products alone

PRODUCT_OPS = ("aten.linear", "aten.mm", "aten.addmm", "aten._weight_int4pack_mm_for_cpu", "aten._weight_int8pack_mm")


class ProductRecorder(TorchDispatchMode):
    """Counts every matrix-product op by (op, rows, weight shape); rows = the input's leading dims."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket) in PRODUCT_OPS:
            x, w = args[0], args[1]
            self.ops[(str(func.overloadpacket), x.numel() // x.shape[-1], tuple(w.shape))] += 1
        return func(*args, **(kwargs or {}))


def dense_target():
    return tiny_llama(0, vocab=32).float()


def q4_target():
    return quantize_q4_1(tiny_llama(0, vocab=32))


def int8_target():
    return quantize(tiny_llama(0, vocab=32), "int8")


def products_of_one_forward(model, path: str, width: int) -> Counter:
    with torch.inference_mode():
        lm = cached_model(model, None, path, 64) if path != "eager" else CachedModel(model)
        lm.prefill(torch.arange(10) % 32)
        with ProductRecorder() as rec:
            lm.extend(torch.arange(width))
    return rec.ops


@pytest.mark.parametrize("make", [dense_target, q4_target, int8_target])
@pytest.mark.parametrize("path", ["eager", "fast"])
def test_linear_only_times_exactly_the_products_a_forward_runs(make, path):
    model = make()
    forward = products_of_one_forward(model, path, 3)
    with torch.inference_mode(), ProductRecorder() as rec:
        for p in matrix_products(model, path):
            p.run(torch.randn(3, p.in_features))
    assert rec.ops == forward
    fused = {p.name.split(".")[-1] for p in matrix_products(model, path)} >= {"qkv", "gate_up"}
    assert fused == (path == "fast" and make is dense_target)  # quantized layers run their modules
    if make is int8_target:  # every product, the head's included, one call of the int8 kernel
        assert {op for op, _, _ in forward} == {"aten._weight_int8pack_mm"} and sum(forward.values()) == 7 * 2 + 1
    assert all(linear_only_ms(model, w, reps=2, path=path) > 0 for w in (1, 5))


def test_int8_products_requantize_each_dense_product_per_row():
    products = matrix_products(dense_target(), "fast")
    int8 = int8_products(products)
    assert len(int8) == len(products) and int8_products(matrix_products(q4_target(), "fast")) == []
    x = torch.randn(5, products[0].in_features)
    with ProductRecorder() as rec:
        y = int8[0].run(x)
    assert list(rec.ops) == [("aten._weight_int8pack_mm", 5, tuple(products[0].weight.shape))]
    assert torch.allclose(y, products[0].run(x), atol=0.05 * y.abs().max().item())
    assert products_ms(int8, 5, torch.float32, torch.device("cpu"), reps=2) > 0


def test_verification_curve_with_a_q4_1_target():
    target = dense_target()
    draft = tiny_head(target, 1).float()
    with pytest.raises(ValueError, match="q4_1"):
        curve_model("q4_1", [target])
    settings = dict(threads=(1,), widths=(1, 5), context=8, reps=1, log=lambda _: None, targets=(q4_target(),))
    curve = verification_curve(target, draft, ("float32", "q4_1"), **settings)
    rows = {(c["model"], c["dtype"], c["path"]): c for c in curve["curves"]}
    assert ("draft", "q4_1", "fast") not in rows and ("draft", "float32", "fast") in rows  # drafts stay dense
    for dtype in ("float32", "q4_1"):
        for path in ("eager", "fast"):
            assert set(rows["target", dtype, path]["linear_ms"]) == {1, 5}
    assert [c["path"] for c in curve["int8_products"]] == ["fast"]
    cal = calibration(curve, 4)["target_verify"]
    assert cal["dtype"] == "float32"  # the dense pick; q4_1 only where it is faster still
    assert cal.get("fastest", {"dtype": "q4_1"})["dtype"] == "q4_1"


def test_verification_curve_times_int8_targets_to_the_widths_their_kernels_allow():
    """int8 and int8_bf16 are curve dtypes like q4_1: float32 activations (the kernel's generic
    loop) stop at 9 tokens, bf16 ones run to 17; each beside its products and the bandwidth floor."""
    target = dense_target()
    draft = tiny_head(target, 1).float()
    int8_bf16 = quantize(tiny_llama(0, vocab=32), "int8_bf16")
    settings = dict(threads=(1,), widths=(1, 9, 17), context=8, reps=1, log=lambda _: None)
    curve = verification_curve(target, draft, ("int8", "int8_bf16"), targets=(int8_target(), int8_bf16), **settings)
    rows = {(c["model"], c["dtype"], c["path"]): c for c in curve["curves"]}
    assert set(rows["target", "int8", "fast"]["ms"]) == {1, 9} and set(rows["target", "int8", "fast"]["linear_ms"]) == {
        1,
        9,
    }
    assert set(rows["target", "int8_bf16", "fast"]["ms"]) == {1, 9, 17}
    assert 0 < rows["target", "int8_bf16", "fast"]["floor_ms"] < rows["target", "int8", "fast"]["floor_ms"]
    assert ("draft", "int8", "fast") not in rows  # drafts stay dense


def test_calibration_picks_a_dense_dtype_and_names_a_faster_4_bit_target():
    def row(dtype, ms1, ms5):
        return {"model": "target", "dtype": dtype, "path": "fast", "threads": 2, "ms": {1: ms1, 5: ms5}}

    curve = {"curves": [row("float32", 60, 90), row("bfloat16", 35, 41), row("q4_1_bf16", 19, 42)]}
    curve["curves"].append({"model": "draft", "dtype": "bfloat16", "path": "fast", "threads": 2, "ms": {1: 2.0}})
    cal = calibration(curve, 4)
    assert cal["target_step"]["dtype"] == "bfloat16" and cal["target_step"]["fastest"]["dtype"] == "q4_1_bf16"
    assert cal["target_verify"] == {"dtype": "bfloat16", "threads": 2, "ms": 41, "width": 5}  # no faster one
    line = _calibration_line(cal, "bfloat16")
    assert "q4_1_bf16, 2 threads, 19.0 ms is faster still" in line and "the calibration agrees" in line
    assert "differs" in _calibration_line(cal, "float32")
    # the tree budget reads the chosen target's own curve: 5 tokens at 41/35 = 1.17x a step fit 1.3x
    assert cal["node_budget"]["nodes"] == 4 and "`method.node_budget=4`" in line


def test_the_node_budget_is_the_widest_verification_within_the_tolerance_less_its_fresh_token():
    from mtad.bench.calibrate import node_budget

    ms = {1: 10.0, 2: 11.0, 3: 12.0, 5: 12.9, 9: 13.1, 17: 20.0}
    assert node_budget(ms) == 4  # 5 tokens at 1.29x; 9 at 1.31x is over
    assert node_budget(ms, tolerance=2.0) == 16
    assert node_budget({1: 10.0, 2: 14.0}) == 0  # not even one drafted node fits


def test_a_row_counts_every_repetition_and_times_the_median_one():
    (config,) = [c for c in default_configs(2, assisted=False) if c.label == "sps fast"]
    # three repetitions of the same config: different speeds, different acceptance
    reps = [
        [DecodeStats(new_tokens=40, seconds=s, target_seconds=0.8 * s, target_calls=n, accepted=40 - n, drafted=80)]
        for s, n in ((1.0, 20), (2.0, 25), (4.0, 10))
    ]
    (row,) = summarise([config], {config.label: reps})
    assert row["tokens_per_s"] == 20.0 and row["ms_per_token"] == 50.0  # the median repetition's time
    assert row["block_efficiency"] == pytest.approx(120 / 55) and row["counts"]["target_calls"] == 55
    assert row["acceptance_rate"] == pytest.approx((120 - 55) / 240)


def test_sampling_row_with_another_target():
    target, q4 = dense_target(), q4_target()
    configs = [c for c in default_configs(3, assisted=False, target_dtypes=("q4_1",)) if c.label.startswith("sampling")]
    assert [c.target_dtype for c in configs] == [None, None, "q4_1"]
    prompt = torch.tensor([[5, 1, 9, 2]])
    rows = summarise(
        configs, {c.label: [[run(c, target, None, prompt, 4, seed=0, targets={"q4_1": q4})]] for c in configs}
    )
    q4_row = {r["label"]: r for r in rows}["sampling fast q4_1"]
    assert q4_row["target_dtype"] == "q4_1" and q4_row["tokens_per_s"] > 0 and "vs_eager" not in q4_row
    # each generation's record: its counts and the split of its time the cost model is fitted to
    (gen,) = q4_row["generations"]
    assert (gen["rep"], gen["prompt"], gen["prompt_tokens"], gen["target_calls"]) == (0, 0, 4, 4)
    assert 0 < gen["target_prefill_seconds"] < gen["target_seconds"] <= gen["seconds"] and gen["draft_seconds"] == 0
    assert q4_row["counts"]["prompt_tokens"] == 4 and q4_row["counts"]["generations"] == 1


def test_a_drafting_generation_splits_both_prefills_from_the_decode_forwards():
    target, draft = dense_target(), tiny_llama(1, vocab=32).float()
    configs = [c for c in default_configs(2, assisted=False) if c.label == "sps fast"]
    stats = run(configs[0], target, draft, torch.tensor([[5, 1, 9, 2, 7]]), 6, seed=0)
    assert stats.prompt_tokens == 5 and stats.draft_calls > 0
    # the prefill holds one forward of each model; the rest of their time is the decode forwards'
    assert 0 < stats.target_prefill_seconds < stats.target_seconds
    assert 0 < stats.draft_prefill_seconds < stats.draft_seconds
    cost = GenerationCost.of("sps", stats.as_dict())
    assert cost.prefill_seconds + cost.target_seconds + cost.draft_seconds == pytest.approx(
        stats.target_seconds + stats.draft_seconds
    )
    assert 0 < cost.draft_seconds < stats.draft_seconds and 0 < cost.target_seconds < stats.target_seconds
    assert cost.host_seconds == pytest.approx(stats.host_seconds) and cost.counts.prompt_tokens == 5


# ---------------------------------------------------------------- llama.cpp (optional)


class FakeLlama:
    """llama-cpp-python's Llama as far as the reference uses it: generate (endless), eval, reset, n_tokens."""

    def __init__(self, model_path, n_threads, n_threads_batch, n_ctx, logits_all=False, verbose=True):
        self.n_tokens, self.evals, self.n_ctx = 0, [], n_ctx

    def n_vocab(self):
        return 32

    def reset(self):
        self.n_tokens = 0

    def eval(self, tokens):
        assert self.n_tokens + len(tokens) <= self.n_ctx
        self.evals.append((self.n_tokens, len(tokens)))
        self.n_tokens += len(tokens)

    def generate(self, tokens, top_k, top_p, min_p, temp, repeat_penalty):
        assert self.n_tokens == 0 and min_p == 0.0 and repeat_penalty == 1.0
        while True:
            time.sleep(1e-4)
            yield 1


def test_llama_cpp_reference_is_none_without_llama_cpp_and_measures_with_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    assert llama_cpp_reference("x.gguf", 1, [[1, 2]], 4) is None
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama, __version__="0.fake"))
    out = llama_cpp_reference("x.gguf", 2, [[1, 2, 3], [4]], 4, reps=1, context=6)
    assert out["threads"] == 2 and out["greedy_tokens_per_s"] > 0 and out["sampled_tokens_per_s"] > 0
    assert set(out["eval_ms"]) == {1, 5, 9, 17}  # the widths the curve sets beside its products
    broken = types.SimpleNamespace(Llama=lambda *a, **k: 1 / 0)
    monkeypatch.setitem(sys.modules, "llama_cpp", broken)
    assert "ZeroDivisionError" in llama_cpp_reference("x.gguf", 1, [[1]], 2)["error"]


def test_a_reference_that_crashes_its_process_becomes_an_error_row():
    assert in_child_process(operator.add, 2, 3) == 5
    assert in_child_process(os.abort) == {"error": "its process died (signal SIGABRT)"}


# ---------------------------------------------------------------- report and goals on synthetic numbers


def synthetic_payload(fwd_over_mm: float = 1.1, hf_tps: float = 10.0, llama=None, target_dtype="float32"):
    """A bench payload whose measured numbers are chosen: forward = fwd_over_mm x its products
    (products 10 ms at 1 token, 12 at 5, 14 at 9), sampling 20 tok/s (q4_1: 25, q4_1_bf16: 28), HF
    generate `hf_tps` on the pair's target, and on the float32 one (when the pair's is another) 8."""
    pair_dtype = target_dtype.removeprefix("torch.")
    configs = default_configs(4, assisted=False, target_dtypes=("q4_1", "q4_1_bf16"), pair_dtype=pair_dtype)
    tps = {"sampling eager": 15.0, "sampling fast": 20.0, "sampling fast q4_1": 25.0, "sampling fast q4_1_bf16": 28.0}
    tps.update({"HF generate": hf_tps, "HF generate float32": 8.0})
    configs = [c for c in configs if c.label in tps]
    seconds = {label: 100 / rate for label, rate in tps.items()}  # one repetition of one 100-token generation
    one = {
        label: DecodeStats(new_tokens=100, target_calls=100, seconds=s, target_seconds=s / 2)
        for label, s in seconds.items()
    }
    results = {c.label: [[one[c.label]]] for c in configs}
    linear = {1: 10.0, 5: 12.0, 9: 14.0}
    forward = {w: fwd_over_mm * v for w, v in linear.items()}
    curves = [
        {"model": "target", "dtype": d, "path": p, "threads": 2, "ms": forward, "linear_ms": dict(linear)}
        for d in ("float32", "bfloat16", "q4_1")
        for p in ("eager", "fast")
    ]
    curves.append({"model": "draft", "dtype": "float32", "path": "fast", "threads": 2, "ms": {1: 1.0, 4: 2.0}})
    for c in curves:
        c["floor_ms"] = 5.0
    env = {"platform": "test", "threads": 2, "device": "cpu", "cpu_capability": "AVX2", "amx": False, "torch": "x"}
    env.update(transformers="y", target_dtype=target_dtype, draft_dtype="float32")
    curve = {"context": 200, "copy_bandwidth_gb_s": 10.0, "curves": curves}
    curve["int8_products"] = [{"path": "fast", "threads": 2, "linear_ms": {1: 3.0, 5: 4.0, 9: 5.0}}]
    payload = {
        "setup": {"pair": "p", "prompts": 1, "max_new_tokens": 100, "reps": 1, "gamma": 4, "default_path": "static"},
        "environment": env,
        "rows": summarise(configs, results),
        "warm_up": {},
        "curve": curve,
        "llama_cpp": llama,
    }
    payload["calibration"] = calibration(curve, 4)
    return payload


def test_a_rerun_reads_the_stored_curve_back_and_keeps_its_calibration(tmp_path, monkeypatch):
    measured = []

    def timed(target, draft, dtypes, threads, reps, log, targets):
        measured.append(reps)
        return synthetic_payload()["curve"]

    monkeypatch.setattr(bench_timings, "verification_curve", timed)
    pair, stored = types.SimpleNamespace(target=None, draft=None), tmp_path / "bench" / "p" / "curve.json"
    first = bench_timings.curve_and_calibration(pair, ("float32", "q4_1"), 3, {}, 4, stored, log=lambda _: None)
    again = bench_timings.curve_and_calibration(pair, ("float32", "q4_1"), 3, {}, 4, stored, log=lambda _: None)
    assert measured == [3] and stored.exists()  # the rerun timed nothing
    assert again == first and again[1]["target_step"]["ms"] == first[1]["target_step"]["ms"]
    bench_timings.curve_and_calibration(pair, ("float32", "q4_1"), 5, {}, 4, stored, log=lambda _: None)
    assert measured == [3, 5]  # other repetitions: another curve, timed anew
    record = json.loads(stored.read_text())
    record["machine"] = "another machine"
    stored.write_text(json.dumps(record))
    bench_timings.curve_and_calibration(pair, ("float32", "q4_1"), 5, {}, 4, stored, log=lambda _: None)
    assert measured == [3, 5, 5]  # timed on another machine: timed here anew


LLAMA = {"threads": 2, "version": "0.3", "greedy_tokens_per_s": 30.0, "sampled_tokens_per_s": 20.0}
LLAMA["eval_ms"] = {1: 5.0, 5: 6.0, 9: 7.0}


def report(tmp_path, payload) -> str:
    write_report(tmp_path, payload)
    assert read_timings(tmp_path)["rows"]
    return (tmp_path / "bench.md").read_text()


def test_report_renders_with_and_without_llama_cpp_and_a_q4_1_row(tmp_path):
    text = report(tmp_path, synthetic_payload())
    assert f"llama.cpp: not measured ({LLAMA_CPP_MISSING})." in text
    assert "| ours, fast path, target q4_1 | 25.00 | 2.50 |" in text
    assert "Whole forward vs its matrix products" in text
    assert "| q4_1 | fast | 2 | 11.0 | 10.00 | 1.10 |" in text and "| int8 per row | fast | 2 |  | 3.00 |  |" in text
    assert "Calibration (fast path" in text and "## Goals" in text
    text = report(tmp_path, synthetic_payload(llama=LLAMA))
    assert (
        "llama.cpp: not measured" not in text and "| llama.cpp sampled, q4_1 GGUF, 2 threads | 20.00 | 2.00 |" in text
    )
    assert "eval of n tokens on a 200-token cache (every row's logits): 1: 5.0, 5: 6.0, 9: 7.0 ms" in text
    text = report(tmp_path, synthetic_payload(llama={"error": "OSError: no file"}))
    assert "llama.cpp: not measured (error: OSError: no file)." in text


def met(payload) -> dict:
    out = {}
    for g in goals(payload):
        out.setdefault(g["key"], []).append(g["met"])
    return out


def test_goals_met_and_not_on_synthetic_numbers():
    assert met(synthetic_payload(llama=LLAMA)) == {
        "a": [True, True, True],  # forward 1.1x its products, every dtype
        "b": [True],  # products at 5 tokens 1.2x those at 1
        "c": [True],  # 20 / 10 tok/s
        "d": [True, True],  # q4_1 25 and q4_1_bf16 28 / llama.cpp 20 tok/s
        "e": [None],  # not the default path here
        "f": [None],  # no counts in these rows: the cost model is not held against them
        "g": [None],  # no speculative rows
        "h": [None],  # nor adaptive ones
        "i": [False],  # half of sampling's time is outside its forwards
        "j": [True],  # sampling fast q4_1_bf16 28 / llama.cpp 20 tok/s
        "k": [False],  # products at 1 row 10 ms, 2x the 5 ms floor (17 rows not timed alone)
        "l": [True],  # step 1.1x its products, 5 tokens 1.2x the step
    }
    failing = synthetic_payload(fwd_over_mm=1.3, hf_tps=15.0, llama=dict(LLAMA, sampled_tokens_per_s=30.0))
    assert met(failing) == {
        "a": [False] * 3,
        "b": [True],
        "c": [False],
        "d": [False, False],
        "e": [None],
        "f": [None],
    } | {
        "g": [None],
        "h": [None],
        "i": [False],
        "j": [False],  # 28 / 30 tok/s
        "k": [False],
        "l": [True],  # 1.3x its products: within the step's 1.4x
    }
    assert met(synthetic_payload())["d"] == [None, None]  # no llama.cpp: not measurable
    compiled = synthetic_payload()
    compiled["setup"]["default_path"] = "compiled"
    compiled["warm_up"] = {"sampling compiled": {"first_call_s": 75.0, "compile_s": 70.0}}
    assert met(compiled)["e"] == [False]
    slow_growth = synthetic_payload()
    for c in slow_growth["curve"]["curves"]:
        c.get("linear_ms", {})[5] = 20.0
    assert met(slow_growth)["b"] == [False]


def test_the_step_goals_read_the_target_dtype_curve_against_its_floor_and_products():
    at_floor = synthetic_payload()
    for c in at_floor["curve"]["curves"]:
        c["floor_ms"] = 9.0  # 10 ms products: 1.11x the floor
        c.get("linear_ms", {})[17] = 15.0  # 1.5x 1 row
    k = [g for g in goals(at_floor) if g["key"] == "k"]
    assert [g["met"] for g in k] == [True] and "1 row 1.11x the floor" in k[0]["measured"]
    for c in at_floor["curve"]["curves"]:
        c.get("linear_ms", {})[17] = 17.0  # 1.7x
    assert met(at_floor)["k"] == [False]
    unmeasured_wide = synthetic_payload()
    for c in unmeasured_wide["curve"]["curves"]:
        c["floor_ms"] = 9.0
    (k,) = [g for g in goals(unmeasured_wide) if g["key"] == "k"]
    assert k["met"] is None and "17 rows not timed alone (widest: 9 rows, 1.40x 1 row)" in k["measured"]
    assert met(synthetic_payload(fwd_over_mm=1.5))["l"] == [False]  # the step 1.5x its products
    wide_verify = synthetic_payload()
    for c in wide_verify["curve"]["curves"]:
        c["ms"] = {**c["ms"], 5: 1.35 * c["ms"][1]}
    (l_goal,) = [g for g in goals(wide_verify) if g["key"] == "l"]
    assert l_goal["met"] is False and "5 tokens 1.35x the step" in l_goal["measured"]


def test_a_bf16_pair_is_measured_against_hf_on_the_float32_target(tmp_path):
    # HF generate on the pair's bf16 target runs at 12 tok/s, on the float32 target at 8: goal (c)
    # compares sampling (20) with the float32 one, 2.5x, and the 12 tok/s row alone would not meet it
    payload = synthetic_payload(hf_tps=12.0, target_dtype="bfloat16")
    (c,) = [g for g in goals(payload) if g["key"] == "c"]
    assert c["met"] and c["measured"].startswith("2.50x") and "on the float32 target" in c["goal"]
    rows = {r["label"]: r for r in payload["rows"]}
    assert rows["HF generate float32"]["target_dtype"] == "float32"
    assert rows["sampling fast"]["vs_hf"]["HF generate float32"] == 2.5
    assert "HF generate float32" not in {c.label for c in default_configs(4, pair_dtype="float32")}
    text = report(tmp_path, payload)
    assert "| HF eager generate(), target float32 | 8.00 |" in text and "ours, fast path, target float32" not in text


def test_the_reduced_targets_distance_is_a_section_of_the_bench_file_beside_the_timings(tmp_path):
    from mtad.bench.target_distance import q4_tv_markdown, readme_distance_lines, write_q4_tv

    committed = read_section(BENCH, Path(__file__).resolve().parents[1] / "results" / "bench", "target_distance")
    write_section(BENCH, tmp_path, "timings", {"rows": []})
    assert readme_distance_lines(tmp_path) is None
    assert write_q4_tv(committed, tmp_path) == tmp_path / "bench.json"
    stored = read_section(BENCH, tmp_path, "target_distance")
    assert stored["q4_1"] == committed["q4_1"] and read_timings(tmp_path) == {"rows": []}
    assert (tmp_path / "q4_tv.md").read_text() == q4_tv_markdown(stored)
    lines = readme_distance_lines(tmp_path)
    assert lines[0].startswith("From [`bench/q4_tv.md`]") and any(line.startswith("| q4_1 |") for line in lines)


def test_render_rebuilds_the_report_and_calibration_from_a_stored_payload(tmp_path):
    write_report(tmp_path / "measured", synthetic_payload(llama=LLAMA))
    stored = read_timings(tmp_path / "measured")
    stored["calibration"] = None  # derived again from the stored curve
    write_section(BENCH, tmp_path / "stored", "timings", stored)
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"
    args = [sys.executable, str(script), "--render", str(tmp_path / "stored"), "--out", str(tmp_path / "out")]
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "out" / "bench.md").read_text() == (tmp_path / "measured" / "bench.md").read_text()


def bench_script():
    """scripts/bench.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_script", Path(__file__).resolve().parents[1] / "scripts" / "bench.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def bench_settings(*argv: str) -> dict:
    """`measure_pair`'s settings as the bench's command line `argv` gives them."""
    script = bench_script()
    return script.measure_settings(script.parser().parse_args(list(argv)))


def test_the_bench_thread_count_is_one_constant_the_script_curve_and_readme_read():
    """`BENCH_THREADS` is the bench's one thread default: `--threads`, the curve's counts beside one
    thread, and the setting the bench README states."""
    import inspect

    from mtad.bench.curves import BENCH_THREADS

    root = Path(__file__).resolve().parents[1]
    assert bench_script().parser().get_default("threads") == BENCH_THREADS
    assert inspect.signature(verification_curve).parameters["threads"].default == (1, BENCH_THREADS)
    readme = (root / "mtad" / "bench" / "README.md").read_text()
    assert f"`BENCH_THREADS` = {BENCH_THREADS} torch threads" in " ".join(readme.split())


def test_a_forward_cost_row_that_contradicts_itself_is_named():
    from mtad.bench.curves import contradictions

    assert contradictions({1: 10.0, 2: 12.0, 5: 13.0}, {1: 8.0, 5: 11.0}) == []
    found = contradictions({1: 1013.1, 2: 90.3, 5: 69.5}, {1: 1084.6})
    assert found == [
        "products 1084.6 ms > forward 1013.1 ms at 1 tokens",
        "2 tokens 90.3 ms < 1 tokens 1013.1 ms",
        "5 tokens 69.5 ms < 2 tokens 90.3 ms",
    ]


def test_the_thread_setter_applies_and_restores():
    import torch

    from mtad.devices import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with torch_threads(0) as n:  # 0 / None: left as it is
        assert n == before


def test_each_drafting_method_has_an_adaptive_row_beside_its_fixed_self(tmp_path):
    configs = {c.label: c for c in default_configs(4, assisted=False)}
    for method in ("sps", "spectr", "specinfer", "mtad", "mmtad"):
        adaptive = configs[f"{method} adaptive fast"]
        assert adaptive.variant == "adaptive" and adaptive.params.stop_below > 0
        assert configs[f"{method} fast"].params.stop_below == 0
    chosen = [configs["sps fast"], configs["sps adaptive fast"]]
    fast, adaptive = (
        [[DecodeStats(new_tokens=40, seconds=s, target_seconds=s / 2, target_calls=25, drafted=d, draft_calls=d)]]
        for s, d in ((2.0, 100), (1.6, 50))
    )
    rows = summarise(chosen, {"sps fast": fast, "sps adaptive fast": adaptive})
    by_label = {r["label"]: r for r in rows}
    assert (
        by_label["sps adaptive fast"]["vs_fixed"] == pytest.approx(1.25)
        and "vs_eager" not in by_label["sps adaptive fast"]
    )
    payload = synthetic_payload()
    payload["rows"] += [r for r in rows if r["variant"] == "adaptive"]
    text = report(tmp_path, payload)
    assert "Adaptive drafting" in text and "| sps | stop_below 0.3 |" in text and "| 1.25 |" in text


def test_the_report_names_the_product_kernel_of_each_width_when_the_run_recorded_it(tmp_path):
    payload = synthetic_payload()
    assert "Product kernel per forward width" not in report(tmp_path, payload)
    choice = {"by_width": {"1": "zentorch", "2-4": "onednn", "5-17": "onednn", "wider": "onednn"}, "source": "cached"}
    payload["environment"]["kernels"] = {"target": choice, "draft": None}
    text = report(tmp_path, payload)
    assert "target: 1 zentorch, 2-4 onednn, 5-17 onednn, wider onednn (cached)." in text and "draft:" not in text


def test_the_tree_methods_run_at_the_calibrated_node_budget_only_where_it_cuts_their_tree():
    params = method_params(4)
    assert tree_nodes(params["specinfer"]) == 4 + 4 * 2 + 4 * 2 * 2 and tree_nodes(params["mmtad"]) == 4 * 4
    assert budget_configs(4, 28) == []  # holds both whole trees: the rows would be their fixed selves
    assert [c.method for c in budget_configs(4, 16)] == ["specinfer"]  # MMTAD's 16 nodes fit
    assert [(c.label, c.params.node_budget) for c in budget_configs(4, 9)] == [
        ("specinfer budget fast", 9),
        ("mmtad budget fast", 9),
    ]
    assert [c.method for c in budget_configs(4, 3)] == ["mmtad"]  # below SpecInfer's first level of 4
    # the synthetic curve: 1.3 x the 11 ms step holds the 5-token forward (13.2 ms), not the 9-token one
    assert synthetic_payload()["calibration"]["node_budget"]["nodes"] == 4


def method_rows(speeds: dict[str, float], other: float = 0.02, variant: str = "") -> list[dict]:
    """`summarise`'s rows of our configs at chosen tokens/s (one 100-token generation each), `other`
    of each one's time outside both forwards."""
    configs = {c.label: c for c in default_configs(4, assisted=False)}
    configs |= {c.label: c for c in budget_configs(4, 9)}
    chosen = [configs[label] for label in speeds]
    results = {}
    for label, rate in speeds.items():
        s = 100 / rate
        stats = DecodeStats(new_tokens=100, target_calls=50, seconds=s, target_seconds=s * (0.9 - other))
        stats.draft_seconds, stats.drafted, stats.draft_calls = s * 0.1, 80, 80
        results[label] = [[stats]]
    return summarise(chosen, results)


FIXED = {"sampling eager": 10.0, "sampling fast": 20.0, "sps eager": 12.0, "sps fast": 27.0}
FIXED |= {"mtad eager": 11.0, "mtad fast": 26.8, "mmtad eager": 12.0, "mmtad fast": 28.0}


def test_the_method_adaptive_and_host_goals_read_the_rows_and_the_long_prompts(tmp_path):
    payload = synthetic_payload()
    adaptive = {"sps adaptive fast": 31.0, "mtad adaptive fast": 30.0, "mmtad budget fast": 25.0}
    payload["rows"] = method_rows(FIXED | adaptive)
    found = {g["key"]: g for g in goals(payload)}
    assert found["g"]["met"] and found["g"]["measured"] == "sps 1.35x, mtad 1.34x; order holds"
    assert found["h"]["met"] is False and "mmtad budget fast 0.89x" in found["h"]["measured"]
    assert "sps adaptive 1.55x sampling, mtad adaptive 1.50x sampling" in found["h"]["measured"]
    fast_enough = method_rows(FIXED | adaptive | {"mmtad budget fast": 28.0})
    assert next(g for g in goals({**payload, "rows": fast_enough}) if g["key"] == "h")["met"]
    slow_mtad = method_rows(FIXED | adaptive | {"mmtad budget fast": 28.0, "mtad adaptive fast": 29.0})
    assert next(g for g in goals({**payload, "rows": slow_mtad}) if g["key"] == "h")["met"] is False
    assert found["i"]["met"] is None and "long prompts not measured" in found["i"]["measured"]
    slow = method_rows(FIXED | {"mmtad fast": 22.0})  # mmtad below mtad on the fast path
    assert not next(g for g in goals({**payload, "rows": slow}) if g["key"] == "g")["met"]
    payload["long"] = {"prompts": 2, "mean_prompt_tokens": 612.0, "threads": 1}
    payload["long"]["rows"] = method_rows({"sampling fast": 15.0, "sps fast": 14.0}, other=0.05)
    host = next(g for g in goals(payload) if g["key"] == "i")
    assert host["met"] is False and "long: worst sps fast 5.0%" in host["measured"]
    text = report(tmp_path, payload)
    assert "Long prompts: the fast-path rows on 2 CNN/DailyMail articles" in text and "(mean 612 tokens)" in text
    assert "| sps | 14.00 | 0.93 |" in text and "| mmtad | node_budget 9 | 25.00 | 0.89 |" in text


def profile_row(method: str, prompts: str, tokens_per_block: float, ms: dict[str, float]) -> dict:
    """A `make profile` row: `ms` the block's target, draft and host phases (the rest zero)."""
    split = dict.fromkeys(("target", "draft", *HOST), 0.0) | ms
    split["total"] = sum(split.values())
    return {
        "method": method,
        "threads": 2,
        "prompts": prompts,
        "block_efficiency": tokens_per_block,
        "ms_per_block": split,
        "ms_per_token": split["total"] / tokens_per_block,
    }


def test_unmet_goals_are_named_with_the_profile_split_against_the_block_each_goal_allows(tmp_path):
    payload = synthetic_payload()
    payload["environment"]["machine"] = "Test CPU (2 CPUs)"
    payload["rows"] = method_rows(FIXED | {"mmtad fast": 22.0})  # goal (g) broken: mmtad below mtad
    text = report(tmp_path, payload)
    assert "## What is left" in text and "No block profile of this machine at 2 threads" in text
    rows = [
        profile_row("sampling", "short", 1.0, {"target": 20.0, "process": 0.5}),
        # 2 tokens per block at 20.5 ms per sampled token allow 41 / 1.3 = 31.5 ms (mmtad's goal is
        # mtad's); the block costs 40
        profile_row("mmtad", "short", 2.0, {"target": 30.0, "draft": 6.0, "process": 3.0, "drafting": 1.0}),
    ]
    setup = {"machine": "Test CPU (2 CPUs), avx2"}
    write_section(BENCH, tmp_path, "profile", {"setup": setup, "rows": rows})
    text = report(tmp_path, payload)
    assert "Goals not met: (g), (k)." in text  # (k): the synthetic products are 2x their floor
    split = "| 40.0 | 30.0 | 6.0 | 4.0 (process 3.0, drafting 1.0) |"
    assert f"| mmtad | short | 2.00 {split} 1.3x | 31.5 | +8.5 |" in text
    setup["machine"] = "Other CPU (2 CPUs)"  # a profile of another machine names nothing here
    write_section(BENCH, tmp_path, "profile", {"setup": setup, "rows": rows})
    assert "No block profile of this machine" in report(tmp_path, payload)


def test_rows_are_found_by_what_they_measured_not_by_their_labels():
    """Labels are for people: renamed, every goal, the calibration and the modelled rows read the same."""
    import json
    from pathlib import Path

    from mtad.bench.calibrate import predictions
    from mtad.bench.goal_checks import goals
    from mtad.bench.modelled import modelled_rows
    from mtad.bench.rows import find_row

    payload = read_timings(Path(__file__).resolve().parents[1] / "results" / "bench")
    renamed = json.loads(json.dumps(payload))
    for i, row in enumerate(renamed["rows"]):
        row["label"] = f"<row{i}>"
    assert find_row(payload["rows"], "sps", variant="adaptive")["label"] == "sps adaptive fast"
    # a row on another target is told apart by its dtype alone (the reference's own target has none)
    assert find_row(payload["rows"], "sampling", "fast", target_dtype="q4_1")["label"] == "sampling fast q4_1"
    assert find_row(payload["rows"], "sampling")["label"] == "sampling fast"
    assert find_row(payload["rows"], "sps", "compiled", variant="adaptive") is None

    def named_back(text: str) -> str:  # a goal's text names its worst row by its label
        for i in reversed(range(len(payload["rows"]))):
            text = text.replace(f"<row{i}>", payload["rows"][i]["label"])
        return text

    ours = [(g["key"], named_back(g["measured"]), g["met"]) for g in goals(renamed)]
    assert ours == [(g["key"], g["measured"], g["met"]) for g in goals(payload)]
    gamma, dtype = payload["setup"]["gamma"], payload["environment"]["target_dtype"].removeprefix("torch.")
    assert predictions(renamed, gamma, dtype) == predictions(payload, gamma, dtype) is not None
    strip = [{k: v for k, v in r.items() if k != "label"} for r in modelled_rows(payload)]
    assert [{k: v for k, v in r.items() if k != "label"} for r in modelled_rows(renamed)] == strip


def test_measure_pair_runs_under_the_thread_count_it_records(monkeypatch):
    import contextlib

    from mtad.experiments import bench_cells as M

    seen = []

    @contextlib.contextmanager
    def threads_recorded(n):
        seen.append(("threads", n))
        try:
            yield
        finally:
            seen.append(("restored", n))

    class Loaded(Exception):
        pass

    def load_pair(*args, **kwargs):
        seen.append("load")
        raise Loaded

    monkeypatch.setattr(M, "torch_threads", threads_recorded)
    monkeypatch.setattr(M, "load_pair_cached", load_pair)
    with pytest.raises(Loaded):
        M.measure_pair("smollm2_135m_head", **bench_settings("--threads", "3"))
    assert seen == [("threads", 3), "load", ("restored", 3)]  # the whole run, the pair's loading included
