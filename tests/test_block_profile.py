"""`make profile`'s split of a block (mtad/bench/block_profile.py): the parts add up to the blocks'
wall time, the prompts' forwards are not a block's, and every method, group and thread count gets a row."""

import pytest
import torch

from mtad.bench.block_profile import (
    COLUMNS,
    profile_generation,
    profile_methods,
    read_profile,
    render_profile,
    write_profile,
)
from mtad.decoding import get_decoder
from mtad.decoding.registry import study_methods
from mtad.models.tiny import tiny_head, tiny_llama

PROMPT = torch.tensor([[5, 1, 9, 2, 7, 3, 3, 8]])


def test_a_generation_splits_into_its_blocks_parts():
    target = tiny_llama(0, 24)
    decoder = get_decoder("mmtad", target=target, draft=tiny_head(target, 1), decode_path="static", gamma=3)
    split, widths, blocks, new = profile_generation(decoder, PROMPT, 12, seed=0)
    assert set(split) == set(COLUMNS) and all(v >= 0 for v in split.values())
    assert blocks == decoder.target_lm.calls - 1 and new == 12  # the prefill is not a block
    assert max(widths) == 1 + 4 * 3  # the pending token and W * γ tree nodes
    assert split["target"] > 0 and split["draft"] > 0 and split["drafting"] > 0 and split["accept"] > 0


def test_every_method_group_and_thread_count_gets_a_row():
    target = tiny_llama(0, 24)
    methods = {"sampling": {}, "sps": {"gamma": 2}, "specinfer": {"k_config": (2, 1)}}
    prompts = {"short": [PROMPT], "long": [torch.cat([PROMPT] * 4, dim=1)]}
    rows = profile_methods(target, tiny_llama(1, 24), prompts, methods, (1,), 6, log=lambda *_: None)
    assert [(r["method"], r["prompts"]) for r in rows] == [(m, g) for g in prompts for m in methods]
    for r in rows:
        parts = sum(r["ms_per_block"][c] for c in COLUMNS)
        assert abs(parts - r["ms_per_block"]["total"]) < 1e-9 and 0 <= r["host_share"] < 1
    assert rows[0]["block_efficiency"] == 1.0 and rows[0]["ms_per_block"]["draft"] == 0.0
    setup = {"pair": "tiny", "prompts_per_group": 1, "max_new_tokens": 6, "target_dtype": "float32"}
    setup |= {"draft_dtype": "float32", "machine": "x", "wall_minutes": 0.1, "methods": methods}
    text = render_profile({"setup": setup, "rows": rows})
    assert text.count("| sps | 1 |") == 4  # both groups, in both tables and "host %" in text


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
    for extra, name in (([], "profile"), (["--adaptive"], "profile_adaptive")):
        proc = subprocess.run([sys.executable, str(script), *args, *extra], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        payload = read_profile(tmp_path, adaptive=bool(extra))
        assert {r["method"] for r in payload["rows"]} == set(study_methods())
        assert (payload["setup"]["methods"]["sps"]["stop_below"] > 0) == bool(extra)
        assert "| sps | 1 | long |" in (tmp_path / f"{name}.md").read_text()
    assert read_profile(tmp_path)["setup"]["methods"]["sps"]["stop_below"] == 0  # kept beside the adaptive one
