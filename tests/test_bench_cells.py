"""The bench's timed generations are cells: each row the cell `mtad-run experiment=bench` writes with
the row's settings as overrides, read back as the row's repetitions; a rerun resumes them."""

import pytest

from mtad.bench.timings import Config, default_configs
from mtad.decode_stats import DecodeStats
from mtad.decoding import SpSParams
from mtad.experiments.bench_cells import cell_overrides, measure_pair, repetitions
from mtad.records import read_records

ROWS = "sampling,sps fast,sps eager,HF assisted"  # `only`: a row of each kind of cell (no compilation)


def by_label(configs):
    return {c.label: c for c in configs}


def test_a_row_is_its_method_with_the_settings_path_and_target_it_differs_in():
    configs = by_label(default_configs(3, target_dtypes=("q4_1",)))
    assert cell_overrides(configs["sps fast"], "fast") == ("method.gamma=3",)
    assert cell_overrides(configs["sps eager"], "fast") == ("method.gamma=3", "pair.decode_path=eager")
    assert cell_overrides(configs["sps adaptive fast"], "fast") == ("method.gamma=3", "method.stop_below=0.3")
    assert cell_overrides(configs["specinfer eager"], "fast") == ("pair.decode_path=eager",)  # no γ of its own
    assert (configs["HF generate static+compile"].decoder, configs["HF assisted"].decoder) == (
        "hf_generate",
        "hf_assisted",
    )
    assert cell_overrides(configs["HF generate static+compile"], "fast") == ("method.static_compile=true",)
    assert cell_overrides(configs["HF assisted"], "fast") == ("method.gamma=3",)
    assert cell_overrides(configs["sampling fast q4_1"], "fast") == ()  # the target is its session's
    assert cell_overrides(Config("x", "ours", "sps", SpSParams(gamma=4), "fast"), "eager") == ("pair.decode_path=fast",)


def test_repetitions_are_each_samples_generations_in_the_tasks_order():
    def record(i, seconds):
        stats = [DecodeStats(new_tokens=4, seconds=s).as_dict() for s in seconds]
        return {"id": str(i), "samples": [{"turns": [{"stats": st}]} for st in stats]}

    records = [record(1, (3.0, 4.0)), record(0, (1.0, 2.0))]  # a resumed cell: the order it ran
    reps = repetitions(records, [{"id": 0}, {"id": 1}])
    assert [[g.seconds for g in rep] for rep in reps] == [[1.0, 3.0], [2.0, 4.0]]


@pytest.mark.slow
def test_the_bench_runs_its_rows_as_cells_and_a_rerun_resumes_them(tmp_path):
    settings = dict(
        prompts=2,
        max_new_tokens=4,
        reps=2,
        gamma=3,
        threads=1,
        target_dtype=None,
        draft_dtype=None,
        only=ROWS,
        compiled=False,
        curve_dtypes=(),
        curve_reps=1,
        sampling_targets=("q4_1",),
        llama_cpp=False,
        long_prompts=0,
        notes=[],
        results_root=str(tmp_path),
        progress=False,
        log=lambda *_: None,
    )
    payload = measure_pair("tiny_llama", **settings)
    rows = {r["label"]: r for r in payload["rows"]}
    assert set(rows) == {
        "HF assisted",
        "sampling eager",
        "sampling fast",
        "sps eager",
        "sps fast",
        "sampling fast q4_1",
    }
    cells = {p.parent.relative_to(tmp_path / "bench" / "tiny_llama" / "chat") for p in tmp_path.rglob("samples.jsonl")}
    assert {str(c).split("/")[0] for c in cells} == {"sampling", "sps", "hf_assisted"}
    assert any("pair.target_dtype=q4_1" in str(c) for c in cells) and any(
        "pair.decode_path=eager" in str(c) for c in cells
    )
    for row in rows.values():
        assert len(row["tokens_per_s_reps"]) == 2  # a repetition per sample
    # the row's generations are its cell's records, sample by sample
    (sps_cell,) = [c for c in cells if str(c).startswith("sps/") and "eager" not in str(c)]
    records = read_records(tmp_path / "bench" / "tiny_llama" / "chat" / sps_cell / "samples.jsonl")
    recorded = sorted(t["stats"]["seconds"] for r in records for s in r["samples"] for t in s["turns"])
    assert sorted(g["seconds"] for g in rows["sps fast"]["generations"]) == pytest.approx(recorded)
    assert payload["setup"]["reps"] == 2 and payload["setup"]["max_new_tokens"] == 4
    # a rerun generates nothing: every row read back from the same cells
    files = {p: p.read_bytes() for p in tmp_path.rglob("samples.jsonl")}
    again = {r["label"]: r for r in measure_pair("tiny_llama", **settings)["rows"]}
    assert {p: p.read_bytes() for p in tmp_path.rglob("samples.jsonl")} == files
    assert again["sps fast"]["tokens_per_s_reps"] == rows["sps fast"]["tokens_per_s_reps"]
