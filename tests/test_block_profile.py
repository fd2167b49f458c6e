"""`make profile`'s split of a block (mtad/bench/block_profile.py): the parts add up to the blocks'
wall time, the prompts' forwards are not a block's, and every method, group and thread count gets a row."""

import pytest
import torch

from mtad.bench.block_profile import (
    COLUMNS,
    read_profile,
    render_profile,
    write_profile,
)
from mtad.decoding import get_decoder
from mtad.decoding.registry import study_methods
from mtad.models.tiny import tiny_head, tiny_llama

PROMPT = torch.tensor([[5, 1, 9, 2, 7, 3, 3, 8]])


def test_a_generation_splits_into_its_blocks_parts():
    from mtad.decoding.phases import profiling
    from mtad.generation import timed_generate

    target = tiny_llama(0, 24)
    decoder = get_decoder("mmtad", target=target, draft=tiny_head(target, 1), decode_path="static", gamma=3)
    with profiling() as profile:
        out, _ = timed_generate(decoder, PROMPT, 12, torch.Generator().manual_seed(0))
    block = profile.block_record(out.stats.seconds)
    split, widths = block["seconds"], block["target_widths"]
    assert set(split) == set(COLUMNS) and all(v >= 0 for v in split.values())
    assert block["blocks"] == decoder.target_lm.calls - 1 and len(out.tokens) == 12  # the prefill is not a block
    assert max(int(w) for w in widths) == 1 + 4 * 3  # the pending token and W * γ tree nodes
    assert split["target"] > 0 and split["draft"] > 0 and split["drafting"] > 0 and split["accept"] > 0


@pytest.mark.slow
def test_every_method_group_and_thread_count_gets_a_row_read_from_its_cells(tmp_path):
    from mtad.experiments.block_profiles import run_profile
    from mtad.records import read_records

    payload = run_profile(
        "tiny_llama",
        prompts=1,
        max_new_tokens=6,
        threads=(1,),
        adaptive=False,
        results_root=str(tmp_path),
        progress=False,
    )
    rows = payload["rows"]
    assert sorted((r["method"], r["prompts"]) for r in rows) == sorted(
        (m, g) for g in ("short", "long") for m in study_methods()
    )
    for r in rows:
        parts = sum(r["ms_per_block"][c] for c in COLUMNS)
        assert abs(parts - r["ms_per_block"]["total"]) < 1e-9 and 0 <= r["host_share"] < 1
    sampling = next(r for r in rows if r["method"] == "sampling")
    assert sampling["block_efficiency"] == 1.0 and sampling["ms_per_block"]["draft"] == 0.0
    # each generation's record holds its split: the cells are what the rows read
    (cell,) = (tmp_path / "profile_threads1" / "tiny_llama" / "chat" / "sps").glob("**/samples.jsonl")
    (turn,) = read_records(cell)[0]["samples"][0]["turns"]
    assert set(turn["profile"]["seconds"]) == set(COLUMNS) and turn["profile"]["blocks"] >= 1
    text = render_profile(payload)
    assert text.count("| sps | 1 |") == 4  # both groups, in both tables
    assert "host %" in text and payload["setup"]["methods"]["sps"]["stop_below"] == 0


def test_the_profiles_are_sections_of_the_bench_file_beside_the_timings(tmp_path):
    from mtad.result_files import BENCH, read_file, write_section

    write_section(BENCH, tmp_path, "timings", {"rows": []})
    setup = {"pair": "tiny", "prompts_per_group": 1, "max_new_tokens": 6, "target_dtype": "float32"}
    setup |= {"draft_dtype": "float32", "machine": "x", "wall_minutes": 0.1, "methods": {}}
    assert read_profile(tmp_path) is None and read_profile(tmp_path, adaptive=True) is None
    fixed, adaptive = {"setup": setup, "rows": []}, {"setup": setup | {"pair": "other"}, "rows": []}
    assert write_profile(tmp_path, fixed, adaptive=False) == write_profile(tmp_path, adaptive, adaptive=True)
    assert read_profile(tmp_path) == fixed and read_profile(tmp_path, adaptive=True) == adaptive
    assert sorted(read_file(BENCH, tmp_path)) == ["profile", "profile_adaptive", "timings"]
    assert (tmp_path / "profile.md").is_file() and (tmp_path / "profile_adaptive.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "profile.md", "profile_adaptive.md"]


@pytest.mark.slow
def test_the_profile_command_writes_its_tables(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "profile_blocks.py"
    args = ["--pair", "tiny_llama", "--prompts", "1", "--max-new-tokens", "6", "--threads", "1", "--out", str(tmp_path)]
    args += ["--results-root", str(tmp_path / "runs")]
    for extra, name in (([], "profile"), (["--adaptive"], "profile_adaptive")):
        proc = subprocess.run([sys.executable, str(script), *args, *extra], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        payload = read_profile(tmp_path, adaptive=bool(extra))
        assert {r["method"] for r in payload["rows"]} == set(study_methods())
        assert (payload["setup"]["methods"]["sps"]["stop_below"] > 0) == bool(extra)
        assert "| sps | 1 | long |" in (tmp_path / f"{name}.md").read_text()
    assert read_profile(tmp_path)["setup"]["methods"]["sps"]["stop_below"] == 0  # kept beside the adaptive one
