"""The fast path's product kernel per forward width (mtad/decoding/kernels.py): chosen once per
machine for bf16 models on a CPU, applied per forward, and within bf16's rounding of oneDNN's."""

import json

import pytest
import torch

from mtad.decoding import get_decoder, kernels
from mtad.decoding.static_kv import kernel_record
from mtad.models.tiny import tiny_llama

PROMPT = torch.tensor([[5, 1, 9, 2, 7]])


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_chosen", {})
    return tmp_path


def bf16_llama():
    return tiny_llama(0, 24, sharpness=2.0).to(torch.bfloat16)


def test_each_width_takes_its_buckets_kernel_and_the_scope_restores_onednn():
    choice = kernels.KernelChoice(("native", "onednn", "native"), "test")
    assert [choice.kernel(w) for w in (1, 2, 4, 5, 17, 18, 500)] == ["native", "onednn", "onednn"] + ["native"] * 2 + [
        "onednn"
    ] * 2
    with choice.scope(1):
        assert not torch.backends.mkldnn.enabled
    assert torch.backends.mkldnn.enabled
    with choice.scope(3):
        assert torch.backends.mkldnn.enabled
    assert choice.as_dict()["by_width"] == {"1": "native", "2-4": "onednn", "5-17": "native", "wider": "onednn"}


def test_only_bf16_models_on_a_cpu_have_a_choice_and_it_is_calibrated_once_per_machine(fresh):
    assert kernels.choose(tiny_llama(0, 24)) is None  # float64: oneDNN throughout, as the references ran
    first = kernels.choose(bf16_llama())
    assert first.source == "calibrated" and set(first.by_bucket) <= set(kernels.available())
    stored = json.loads((fresh / "kernels.json").read_text())
    assert list(stored.values()) == [list(first.by_bucket)]
    kernels._chosen.clear()  # a new process reads the machine's calibration
    assert kernels.choose(bf16_llama()) == kernels.KernelChoice(first.by_bucket, "cached")


def test_the_environment_variable_overrides_and_a_wrong_value_lists_the_valid_ones(fresh, monkeypatch):
    monkeypatch.setenv("MTAD_KERNELS", "native")
    assert kernels.choose(bf16_llama()).by_bucket == ("native",) * len(kernels.BUCKETS)
    monkeypatch.setenv("MTAD_KERNELS", "fastest")
    with pytest.raises(ValueError, match="valid here: " + ", ".join(kernels.choices())):
        kernels.choose(bf16_llama())


def test_the_run_records_the_fast_paths_choice_and_none_on_the_eager_path(fresh, monkeypatch):
    monkeypatch.setenv("MTAD_KERNELS", "onednn")
    model = bf16_llama()
    found = kernel_record({"target": model, "draft": None}, "fast")
    assert found == {
        "target": {"by_width": dict.fromkeys(("1", "2-4", "5-17", "wider"), "onednn"), "source": "MTAD_KERNELS=onednn"}
    }
    assert kernel_record({"target": model}, "eager") is None


@pytest.mark.parametrize("method", ["sampling", "sps"])
def test_both_kernels_give_logits_within_bf16_rounding_on_the_fast_path(fresh, monkeypatch, method):
    model, draft = bf16_llama(), tiny_llama(1, 24, sharpness=2.0).to(torch.bfloat16)
    logits = {}
    for setting in kernels.available():
        monkeypatch.setenv("MTAD_KERNELS", setting)
        decoder = get_decoder(method, target=model, draft=draft, decode_path="static")
        decoder.generate(PROMPT, max_new_tokens=2, generator=torch.Generator().manual_seed(0))
        lm = decoder.target_lm
        assert lm.kernels.by_bucket == (setting,) * len(kernels.BUCKETS)
        lm.crop(PROMPT.shape[1])  # the same cached prefix whatever the kernel sampled: only the products differ
        logits[setting] = lm.extend(torch.tensor([3, 4, 5, 6])).float()  # a verification-like forward
    for setting in kernels.available():
        diff = (logits["onednn"] - logits[setting]).abs().max()
        assert diff <= 2**-7 * logits["onednn"].abs().max(), setting  # within bf16's rounding (8 significant bits)


def test_calibrate_times_the_kernels_anew_and_replaces_the_stored_choice(fresh, monkeypatch):
    model = bf16_llama()
    key = kernels._cache_key(model)
    stale = ["onednn"] * len(kernels.BUCKETS)
    (fresh / "kernels.json").write_text(json.dumps({key: stale, "another machine": ["native"]}))
    assert kernels.choose(model) == kernels.KernelChoice(tuple(stale), "cached")  # auto reads it
    kernels._chosen.clear()
    timed = {1: "native", 3: "zentorch" if kernels.zentorch_available() else "native", 9: "native"}
    monkeypatch.setattr(kernels, "fastest", lambda mats, width: timed[width])
    monkeypatch.setenv("MTAD_KERNELS", "calibrate")
    choice = kernels.choose(model)
    assert choice.source == "calibrated" and choice.by_bucket == tuple(timed[w] for w in kernels.TIMED_WIDTH.values())
    stored = json.loads((fresh / "kernels.json").read_text())
    assert stored == {key: list(choice.by_bucket), "another machine": ["native"]}
    assert kernels.choose(model) is choice  # once per process


def test_an_unreadable_calibration_file_is_calibrated_anew(fresh):
    (fresh / "kernels.json").write_text('{"half a file')
    assert kernels.choose(bf16_llama()).source == "calibrated"
    assert len(json.loads((fresh / "kernels.json").read_text())) == 1


def test_a_stored_choice_of_a_kernel_this_process_lacks_is_calibrated_anew(fresh, monkeypatch):
    model = bf16_llama()
    key = kernels._cache_key(model)
    (fresh / "kernels.json").write_text(json.dumps({key: ["gone"] * len(kernels.BUCKETS)}))
    choice = kernels.choose(model)
    assert choice.source == "calibrated" and set(choice.by_bucket) <= set(kernels.available())


@pytest.mark.skipif(not kernels.zentorch_available(), reason="zentorch not installed (pip install 'mtad[zen]')")
def test_zentorch_products_are_within_bf16_rounding_and_the_scope_restores_linear():
    import torch.nn.functional as F

    original = F.linear
    weight = torch.randn(96, 48, dtype=torch.bfloat16)
    x = torch.randn(2, 5, 48, dtype=torch.bfloat16)
    with kernels.products_under("zentorch"):
        assert F.linear is not original
        zen = F.linear(x, weight)
        as_float = F.linear(x.float(), weight.float())  # not bf16: the usual kernel
    assert F.linear is original
    reference = F.linear(x, weight)
    assert (zen.float() - reference.float()).abs().max() <= 2**-7 * reference.float().abs().max()
    assert torch.equal(as_float, F.linear(x.float(), weight.float()))


@pytest.mark.skipif(not kernels.zentorch_available(), reason="zentorch not installed (pip install 'mtad[zen]')")
def test_a_new_weight_is_never_multiplied_as_an_earlier_one_zendnn_cached():
    """ZenDNN finds its reordered copy of a weight by address; models built and freed one after the
    other (tests, a bench loading several targets) would reuse addresses and get stale products."""
    import torch.nn.functional as F

    x = torch.randn(1, 576, dtype=torch.bfloat16)
    for _ in range(12):
        weight = torch.randn(1536, 576, dtype=torch.bfloat16)
        with kernels.products_under("zentorch"):
            zen = F.linear(x, weight).float()
        reference = F.linear(x, weight).float()
        assert (zen - reference).abs().max() <= 2**-7 * reference.abs().max()
        del weight  # its address is free for the next one, but for the hold on it
    start = kernels._SEEN[next(reversed(kernels._SEEN))]
    view = start[:768]  # another shape at a held address takes oneDNN
    with kernels.products_under("zentorch"):
        assert torch.equal(F.linear(x, view), torch.nn.functional.linear(x, view.contiguous()))


def test_a_burst_of_other_work_during_calibration_does_not_pick_the_slower_kernel(monkeypatch):
    """oneDNN costs 10 ms and torch's own 12; four consecutive timings meet a 100 ms burst. Timed one
    kernel after the other, the burst would take most of oneDNN's repetitions and hand the bucket to
    the slower kernel; taking turns, each kernel meets it in two rounds of seven."""
    calls = []

    def timed(mats, inputs, kernel):
        calls.append(kernel)
        burst = 100.0 if 2 <= len(calls) - 1 <= 5 else 0.0
        return {"onednn": 10.0, "native": 12.0}[kernel] + burst

    monkeypatch.setattr(kernels, "available", lambda: ("onednn", "native"))
    monkeypatch.setattr(kernels, "_products_once", timed)
    assert kernels.fastest([torch.zeros(4, 8, dtype=torch.bfloat16)], 1) == "onednn"
    assert calls[:4] == ["onednn", "native", "onednn", "native"]


def test_rows_of_a_fused_matrix_are_not_whole_weights():
    fused = torch.randn(10, 4, dtype=torch.bfloat16)
    assert kernels._whole(fused) and kernels._whole(fused.clone()[:10])
    assert not kernels._whole(fused[:6]) and not kernels._whole(fused[6:])


@pytest.mark.skipif(not kernels.zentorch_available(), reason="zentorch not installed (pip install 'mtad[zen]')")
def test_a_modules_rows_seen_first_leave_the_fused_matrix_to_zendnn():
    """q_proj's rows of a fused q|k|v share its address: multiplied first (an eager or compiled
    path), they must not keep the fast path's fused product on oneDNN for the rest of the process."""
    import torch.nn.functional as F

    x = torch.randn(5, 576, dtype=torch.bfloat16)
    fused = torch.randn(960, 576, dtype=torch.bfloat16)
    rows = fused[:576]
    with kernels.products_under("zentorch"):
        by_rows = F.linear(x, rows)
        assert kernels._SEEN.get(fused.data_ptr()) is None  # the rows took oneDNN and hold nothing
        by_fused = F.linear(x, fused)
    assert kernels._SEEN[fused.data_ptr()] is fused
    assert torch.equal(by_rows, F.linear(x, rows.contiguous()))
    assert (by_fused[:, :576].float() - by_rows.float()).abs().max() <= 2**-7 * by_rows.float().abs().max()


def test_without_zentorch_the_first_calibration_says_once_what_is_missing(fresh, monkeypatch, caplog):
    import logging

    monkeypatch.setattr(kernels, "available", lambda: kernels.BUILT_IN)
    kernels.say_zentorch_missing.cache_clear()
    with caplog.at_level(logging.INFO, logger="mtad.decoding.kernels"):
        kernels.choose(bf16_llama())
        kernels._chosen.clear()
        monkeypatch.setenv("MTAD_KERNELS", "calibrate")
        kernels.choose(bf16_llama())
    said = [r.getMessage() for r in caplog.records if "zentorch" in r.getMessage()]
    assert len(said) == 1 and "pip install 'mtad[zen]'" in said[0]


@pytest.mark.parametrize(
    "system, machine, version, cuda, problem",
    [
        ("Linux", "x86_64", "2.13.0+cpu", None, None),
        ("Linux", "x86_64", "2.13.0", None, None),
        ("Linux", "aarch64", "2.13.0", None, "x86-64 Linux, not Linux on aarch64"),
        ("Darwin", "x86_64", "2.13.0", None, "x86-64 Linux, not Darwin on x86_64"),
        ("Linux", "x86_64", "2.13.0+cu130", "13.0", "CPU build, not its CUDA 13.0 build"),
        ("Linux", "x86_64", "2.14.1+cpu", None, "torch 2.13.0, not 2.14.1+cpu"),
    ],
)
@pytest.mark.parametrize("bf16", [True, False])
def test_make_install_adds_the_kernel_extra_only_where_it_runs(system, machine, version, cuda, problem, bf16):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "kernel_extra.py"
    spec = importlib.util.spec_from_file_location("kernel_extra", script)
    kernel_extra = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel_extra)
    flags = {"avx2", "avx512f", "avx512_bf16"} if bf16 else {"avx2"}
    found = kernel_extra.zen_problem(system, machine, version, cuda, flags)
    if problem is None and not bf16:  # float32 targets: the extra would not be used
        problem = "no native bf16 (avx512_bf16)"
    assert found is None if problem is None else problem in found
    assert isinstance(kernel_extra.cpu_flags(), set)
    recipe = (script.parents[1] / "Makefile").read_text()
    install = "extras=$$($(PY) scripts/kernel_extra.py) && $(PY) -m pip install"
    assert install in recipe and '-e ".[dev,notebooks$$extras]"' in recipe


@pytest.mark.slow
@pytest.mark.parametrize("kernel", kernels.available())
def test_a_lossless_method_on_a_bf16_target_stays_exact_under_each_kernel(fresh, monkeypatch, kernel):
    """SpS on a bf16 target whose decoding products (the fast path's step and verification widths) run
    in `kernel` draws the target's own distribution, enumerated with the same kernel: 1500 runs of 3
    tokens against a false alarm of 1e-3, the power of tests/test_decoding_exact.py's different-draft
    cases."""
    from mtad.metrics.exact_enumeration import empirical_counts, sequence_probs
    from mtad.stats.goodness_of_fit import chisquare_exactness

    monkeypatch.setenv("MTAD_KERNELS", kernel)
    target, draft = (tiny_llama(seed, 4, sharpness=3.0).to(torch.bfloat16) for seed in (0, 1))
    by_width = kernel_record({"target": target}, "fast")["target"]["by_width"]
    assert [by_width[w] for w in ("1", "2-4", "5-17")] == [kernel] * 3  # a step, a verification (prefills aside)
    prompt, setting = torch.tensor([[1, 3, 2]]), {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    counts = empirical_counts("sps", target, draft, {"gamma": 2, **setting}, prompt, 3, 1500, decode_path="static")
    with kernels.products_under(kernel):
        result = chisquare_exactness(counts, sequence_probs(target, prompt, 3, setting))
    assert result.impossible == 0
    print(f"\n[exactness] bf16/{kernel}/sps: TV={result.tv:.4f} chi2 p={result.pvalue:.3g} (N={result.runs})")
    assert result.pvalue > 1e-3, f"{kernel}: differs from the target (p={result.pvalue:.2e}, TV={result.tv:.3f})"
