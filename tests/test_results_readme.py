"""results/README.md is the rendering of the committed results (`make results-readme`)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from mtad.bench.render import read_timings
from mtad.result_files import BENCH, read_section, write_section

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from results_readme import page  # noqa: E402 (the script's page, as `make results-readme` writes it)


def test_the_committed_page_is_the_rendering_of_the_committed_results():
    committed = (ROOT / "results" / "README.md").read_text()
    assert committed == page(ROOT / "results"), "results/README.md is stale: run make results-readme"


def test_the_page_follows_a_changed_result(tmp_path):
    results = tmp_path / "results"
    for sub in ("bench", "draft", "tables"):
        shutil.copytree(ROOT / "results" / sub, results / sub)
    before = page(results)
    bench = read_timings(results / "bench")
    sampling = next(r for r in bench["rows"] if r["label"] == "sampling fast")
    sampling["tokens_per_s"] = 123.456
    write_section(BENCH, results / "bench", "timings", bench)
    after = page(results)
    assert "| sampling | 123.5 |" in after and "| sampling | 123.5 |" not in before
    assert "Not committed: `" in after  # claims, runs and verify were left out of the copy: said, not skipped


def test_the_speed_section_names_variant_rows_and_llama_cpp(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "bench", results / "bench")
    bench = read_timings(results / "bench")
    mmtad = next(r for r in bench["rows"] if r["label"] == "mmtad fast")
    params = {**mmtad["params"], "node_budget": 7}
    bench["rows"].append({**mmtad, "label": "mmtad budget fast", "variant": "budget", "params": params})
    bench["llama_cpp"] = {"threads": 2, "sampled_tokens_per_s": 61.3, "greedy_tokens_per_s": 70.0}
    write_section(BENCH, results / "bench", "timings", bench)
    text = page(results)
    assert "| mmtad (node budget 7) |" in text
    assert "llama.cpp on the same GGUF, 2 threads: sampled 61.3, greedy 70.0 tok/s." in text


def test_the_sweeps_section_names_the_code_and_dtypes_its_cells_ran():
    from mtad.report.cells import load_cells
    from mtad.report.results_readme import sweeps_section

    cells = load_cells(ROOT / "results" / "runs")
    sweeps = cells[cells["experiment"] == "sweeps"]
    commits = {c[:10] for c in sweeps["git_commit"].dropna()}
    section = sweeps_section(ROOT / "results")
    headers = [line for line in section if line.startswith("**gamma** (pair")]
    assert len(headers) == 1 and commits
    assert any(f"commit {c}" in headers[0] for c in commits), headers
    # the cells' own dtypes (the sweeps' experiment pins them), not the regeneration's pin
    assert f"target {'/'.join(sorted(set(sweeps['target_dtype'].dropna())))}, draft " in headers[0]
    assert not any("nan" in line for line in section)  # sampling drafts nothing: no acceptance is written


def test_each_section_names_the_stamp_of_the_step_that_wrote_it(tmp_path):
    """The `make results` step that wrote a section is named at its head: machine, pinned dtype, commit."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "bench", results / "bench")
    assert "Written by `make results`" not in page(results)  # no stamp: nothing said
    (results / ".stamps").mkdir()
    stamp = {"step": "bench", "machine": "Fixture CPU (2 CPUs, avx2)", "target_dtype": "bfloat16", "code": "c0de51a7e"}
    stamp |= {"commit": "abcdef0123", "finished": "2026-01-02T03:04:05+00:00"}
    (results / ".stamps" / "bench").write_text(json.dumps(stamp))
    speed = page(results).split("## Speed\n")[1].split("\n## ")[0]
    assert speed.startswith(
        "\nWritten by `make results`, step `bench` on Fixture CPU (2 CPUs, avx2), target bfloat16, commit abcdef01 "
        "(code state c0de51a7), finished 2026-01-02.\n\nFrom [`bench/bench.md`]"
    )


def test_the_bench_sections_read_their_own_section_of_the_bench_file(tmp_path):
    """Speed and the reduced targets each show their own section of bench.json, and say when it is absent."""
    results = tmp_path / "results"
    committed = ROOT / "results" / "bench"

    def section(title: str) -> str:
        return page(results).split(f"## {title}\n")[1].split("\n## ")[0]

    absent = "Not committed: `{}` (`{}` writes it)."
    assert absent.format(results / "bench" / "bench.json", "make bench") in section("Speed")
    assert absent.format(results / "bench" / "bench.json", "make q4-tv") in section("Reduced targets")
    write_section(BENCH, results / "bench", "target_distance", read_section(BENCH, committed, "target_distance"))
    assert absent.format(results / "bench" / "bench.json", "make bench") in section("Speed")
    assert section("Reduced targets").startswith("\nFrom [`bench/q4_tv.md`]")
    write_section(BENCH, results / "bench", "timings", read_timings(committed))
    assert section("Speed").startswith("\nFrom [`bench/bench.md`]")
