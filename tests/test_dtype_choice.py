"""`target_dtype: auto` on a CPU: measured once per machine (float32 against bf16, a step plus a
verification), kept, recorded in the pair's config and every cell's env.json; or pinned by
MTAD_TARGET_DTYPE (what `make results` sets for every step), measuring nothing."""

import json

import pytest
import torch

from mtad.models import dtype_choice, load_pair, pair_config
from mtad.models.pairs import auto_meaning
from mtad.provenance import machine_label
from tests.test_run import cell_dirs, mtad_run

AUTO = {"target_dtype": "auto", "draft_dtype": "auto"}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path))
    monkeypatch.delenv("MTAD_KERNELS", raising=False)
    monkeypatch.delenv("MTAD_TARGET_DTYPE", raising=False)
    return tmp_path


def fake_costs(cheaper: str, calls: list):
    """A `time_dtypes` whose `cheaper` dtype costs half the other's, counting its calls."""

    def timed(models, decode_path):
        calls.append(sorted(models))
        return {d: {1: 10.0 if d == cheaper else 20.0, 5: 12.0 if d == cheaper else 24.0} for d in models}

    return timed


def test_a_cpu_target_stays_auto_until_measured_and_a_draft_follows_its_target(fresh):
    cfg = pair_config("tiny_llama", **AUTO)
    assert (cfg["target_dtype"], cfg["draft_dtype"]) == ("auto", "auto") and "dtype_choice" not in cfg
    assert pair_config("tiny_llama", target_dtype="float64", draft_dtype="auto")["draft_dtype"] == "float64"
    assert pair_config("tiny_llama", target_dtype="q4_1_bf16", draft_dtype="auto")["draft_dtype"] == "bfloat16"
    with pytest.raises(ValueError, match="valid: .*auto"):
        pair_config("tiny_llama", target_dtype="fp8")


@pytest.mark.parametrize("cheaper", ["bfloat16", "float32"])
def test_the_first_load_keeps_the_cheaper_dtype_and_later_loads_read_it(fresh, monkeypatch, cheaper):
    calls = []
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs(cheaper, calls))
    pair = load_pair("tiny_llama", **AUTO)
    assert str(pair.target.dtype) == f"torch.{cheaper}" and pair.draft.dtype == pair.target.dtype
    assert pair.config["dtype_choice"]["source"] == "measured" and pair.config["target_dtype"] == cheaper
    assert calls == [["bfloat16", "float32"]]
    stored = json.loads((fresh / "dtypes.json").read_text())
    assert [r["target_dtype"] for r in stored.values()] == [cheaper]

    again = load_pair("tiny_llama", **AUTO)  # a later process on this machine: no timing
    assert again.config["dtype_choice"]["source"] == "stored" and str(again.target.dtype) == f"torch.{cheaper}"
    assert pair_config("tiny_llama", **AUTO)["target_dtype"] == cheaper and len(calls) == 1


def test_calibrate_times_anew_and_another_thread_count_is_another_machine(fresh, monkeypatch):
    calls = []
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs("float32", calls))
    load_pair("tiny_llama", **AUTO)
    monkeypatch.setenv("MTAD_KERNELS", "calibrate")
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs("bfloat16", calls))
    assert load_pair("tiny_llama", **AUTO).config["target_dtype"] == "bfloat16" and len(calls) == 2
    monkeypatch.delenv("MTAD_KERNELS")
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        assert pair_config("tiny_llama", **AUTO)["target_dtype"] == "auto"
    finally:
        torch.set_num_threads(before)
    assert pair_config("tiny_llama", **AUTO)["target_dtype"] == "bfloat16"


def test_a_stored_record_that_names_no_candidate_is_measured_again(fresh):
    key = dtype_choice.cache_key(pair_config("tiny_llama")["target"], "fast")
    (fresh / "dtypes.json").write_text(json.dumps({key: {"target_dtype": "int3"}}))
    assert pair_config("tiny_llama", **AUTO)["target_dtype"] == "auto"
    (fresh / "dtypes.json").write_text('{"half a file')
    assert pair_config("tiny_llama", **AUTO)["target_dtype"] == "auto"


def test_a_pinned_dtype_is_what_auto_means_on_any_machine_and_a_named_dtype_keeps_its_own(fresh, monkeypatch):
    calls = []
    monkeypatch.setattr(dtype_choice, "time_dtypes", fake_costs("float32", calls))
    load_pair("tiny_llama", **AUTO)  # this machine's measurement: float32
    monkeypatch.setenv("MTAD_TARGET_DTYPE", "bfloat16")
    cfg = pair_config("tiny_llama", **AUTO)
    assert (cfg["target_dtype"], cfg["draft_dtype"]) == ("bfloat16", "bfloat16") and auto_meaning(cfg) == "bfloat16"
    assert cfg["dtype_choice"] == {"target_dtype": "bfloat16", "source": "pinned", "by": "MTAD_TARGET_DTYPE"}
    pair = load_pair("tiny_llama", **AUTO)
    assert str(pair.target.dtype) == "torch.bfloat16" and pair.draft.dtype == torch.bfloat16 and len(calls) == 1
    record = {
        "cpu": "Fixture CPU",
        "cpu_count": 2,
        "cpu_isa": [],
        "gpus": [],
        "dtype_choice": pair.config["dtype_choice"],
    }
    assert machine_label(record, "bfloat16").endswith("target bfloat16 (auto: pinned)")
    named = pair_config("tiny_llama", target_dtype="float64", draft_dtype="auto")
    assert (named["target_dtype"], named["draft_dtype"]) == ("float64", "float64") and "dtype_choice" not in named
    assert pair_config("tiny_llama", target_dtype="q4_1", draft_dtype="auto")["target_dtype"] == "q4_1"


def test_a_pin_that_is_no_dtype_is_refused_with_the_valid_ones(fresh, monkeypatch):
    monkeypatch.setenv("MTAD_TARGET_DTYPE", "fp8")
    with pytest.raises(ValueError, match=r"^MTAD_TARGET_DTYPE='fp8' is not a target dtype; valid: float32, .*bfloat16"):
        pair_config("tiny_llama", **AUTO)
    monkeypatch.setenv("MTAD_TARGET_DTYPE", "q4_1")  # `auto` means a dense dtype, never a 4-bit target
    with pytest.raises(ValueError, match="valid: float32"):
        pair_config("tiny_llama", **AUTO)
    monkeypatch.setenv("MTAD_TARGET_DTYPE", "")  # empty: not pinned
    assert pair_config("tiny_llama", **AUTO)["target_dtype"] == "auto"


def test_the_timing_runs_both_widths_of_both_dtypes_on_the_fast_path(fresh):
    model = load_pair("tiny_llama").target
    ms = dtype_choice.time_dtypes({"float32": model, "bfloat16": model.to(torch.bfloat16)}, "fast")
    assert set(ms) == {"float32", "bfloat16"}
    assert all(set(by_width) == {1, 5} and min(by_width.values()) > 0 for by_width in ms.values())


@pytest.mark.slow
def test_every_cell_records_how_auto_chose_the_target_dtype(fresh, tmp_path, suite_data):
    args = ["pair=tiny_llama", "pair.target_dtype=auto", "pair.draft_dtype=auto", "method=sps", "limit=1"]
    args += ["task=cnndm", "task.max_new_tokens=6", "task.article_token_budget=32", f"data_root={suite_data}"]
    mtad_run(args, tmp_path, env={"MTAD_CACHE": str(fresh)})
    (cell,) = cell_dirs(tmp_path / "runs")
    env = json.loads((cell / "env.json").read_text())
    choice = env["dtype_choice"]
    assert choice["source"] == "measured" and choice["target_dtype"] in dtype_choice.CANDIDATES
    assert set(choice["ms"]) == set(dtype_choice.CANDIDATES) and env["dtype"] == choice["target_dtype"]
