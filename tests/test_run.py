"""mtad-run end to end on the tiny random pair: one cell, resume after a kill, multiruns, errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtad.records import derive_seed, read_records
from mtad.runner.layout import override_dirname

REPO = Path(__file__).resolve().parents[1]
TASK_ARGS = ["task=cnndm", "task.max_new_tokens=12", "task.article_token_budget=48"]


def mtad_run(args, tmp_path, check=True, prefix=None, timeout=300, env=None):
    """Run ``python -m mtad.run`` (or ``python -c prefix`` + main) from this checkout with test
    paths; returns the process, with ``log``: its stdout and stderr together."""
    base = [
        f"results_root={tmp_path / 'runs'}",
        f"hydra.run.dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        "progress=false",
        "warmup_tokens=2",
        "threads=1",
    ]
    base = [b for b in base if b.split("=")[0] not in {a.split("=")[0] for a in args}]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }  # this checkout's mtad, not an installed one
    if prefix is None:
        command = [sys.executable, "-m", "mtad.run"]
    else:
        command = [sys.executable, "-c", prefix + "\nimport sys; from mtad.run import main; main()"]
    proc = subprocess.run(
        command + list(args) + base, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    proc.log = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"mtad-run failed ({proc.returncode}):\n{proc.log[-4000:]}")
    return proc


def test_console_script_is_the_runner():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["mtad-run"] == "mtad.run:main"


def cell_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("samples.jsonl"))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def data_args(suite_data):
    return [f"data_root={suite_data}"]


@pytest.mark.slow
def test_one_cell_writes_samples_metrics_env(tmp_path, data_args):
    mtad_run(["pair=tiny_llama", "method=mtad", "limit=2", "logger=wandb", *TASK_ARGS, *data_args], tmp_path)
    (cell,) = cell_dirs(tmp_path / "runs")
    assert cell.relative_to(tmp_path / "runs").parts[:4] == ("default", "tiny_llama", "cnndm", "mtad")
    records = lines(cell / "samples.jsonl")
    from mtad.tasks import get_task  # the first two examples, in file order

    assert [r["id"] for r in records] == [
        e["id"] for e in get_task("cnndm", data_root=data_args[0].split("=", 1)[1]).examples(limit=2)
    ]
    turn = records[0]["samples"][0]["turns"][0]
    assert 1 <= len(turn["token_ids"]) <= 12 and turn["stats"]["new_tokens"] == len(turn["token_ids"])
    assert {"rouge1", "rougeL"} <= set(records[0]["samples"][0]["scores"])
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["status"] == "complete" and metrics["examples"] == 2
    assert metrics["new_tokens"] == sum(len(s["turns"][0]["token_ids"]) for r in records for s in r["samples"])
    assert metrics["tokens_per_s"] > 0 and metrics["perplexity"] > 1
    assert metrics["block_efficiency"] == pytest.approx(metrics["new_tokens"] / metrics["target_calls"])
    assert metrics["acceptance_rate"] is not None and 0 <= metrics["acceptance_rate"] <= 1
    assert metrics["energy_j_per_token"] is None or metrics["energy_j_per_token"] > 0
    if metrics["energy_j_per_token"] is None:
        assert metrics["energy_missing_reason"]
    assert "rougeL" in metrics["scores"] and metrics["peak_memory_mb"] > 0
    env = json.loads((cell / "env.json").read_text())
    assert env["seed"] == 0 and env["dtype"] and env["torch_threads"] >= 1 and "torch" in env["versions"]
    from mtad.provenance import read_git_state

    assert env["git"] == read_git_state() and env["git_runs"] == [env["git"]]  # commit, dirty, diff hash
    assert env["cell"]["method"] == {
        "name": "mtad",
        "gamma": 4,
        "beam_width": 4,
        "threshold": 0.5,
        "replacement": True,
        "beam_weighting": "proportional",
        "stop_below": 0.0,
        "temperature": 1.0,
        "top_k": 10,
        "top_p": 0.9,
    }
    assert env["cell"]["stop_rule"] == "eos"
    assert list((tmp_path / "out" / "wandb").glob("offline-run-*/run-*.wandb"))  # logger=wandb, offline


KILL_AFTER_TWO = """
import os, signal, mtad.records as r, mtad.provenance as provenance
provenance._process_state = {"commit": "a" * 40, "dirty": False, "diff_sha256": None}  # an earlier commit
_append = r.append_record
def append_then_die(path, record, _n=[0]):
    _append(path, record)
    _n[0] += 1
    if _n[0] == 2:
        with open(path, 'a') as f:
            f.write('{"id": "torn')   # a write cut short by the kill
        os.kill(os.getpid(), signal.SIGKILL)
r.append_record = append_then_die
"""


@pytest.mark.slow
def test_resume_after_kill_loses_and_duplicates_nothing(tmp_path, data_args):
    args = ["pair=tiny_llama", "method=sps", "limit=4", "logger=none", *TASK_ARGS, *data_args]
    killed = mtad_run(args, tmp_path / "a", check=False, prefix=KILL_AFTER_TWO)
    assert killed.returncode == -9
    (cell,) = cell_dirs(tmp_path / "a" / "runs")
    assert not (cell / "metrics.json").exists()
    assert len(read_records(cell / "samples.jsonl", repair=True)) == 2  # the torn line is cut off
    mtad_run(args, tmp_path / "a")  # resume
    resumed = lines(cell / "samples.jsonl")
    mtad_run(args, tmp_path / "b")  # uninterrupted reference
    (reference_cell,) = cell_dirs(tmp_path / "b" / "runs")
    reference = lines(reference_cell / "samples.jsonl")
    assert [r["id"] for r in resumed] == [r["id"] for r in reference] and len(reference) == 4
    assert len({r["id"] for r in resumed}) == 4
    # per-example seeds: the resumed outputs are the uninterrupted run's, token for token
    assert [r["samples"][0]["turns"][0]["token_ids"] for r in resumed] == [
        r["samples"][0]["turns"][0]["token_ids"] for r in reference
    ]
    assert json.loads((cell / "metrics.json").read_text())["examples"] == 4
    # two code states wrote this cell's records: both are recorded, and a table refuses them
    from mtad.provenance import capture, provenance_key
    from mtad.report.cells import load_cells

    env = json.loads((cell / "env.json").read_text())
    assert env["git_runs"] == [{"commit": "a" * 40, "dirty": False, "diff_sha256": None}, env["git"]]
    (row,) = load_cells(tmp_path / "a" / "runs").to_dict("records")
    assert row["provenance"] == f"{'a' * 40} + {provenance_key(capture())}"


@pytest.mark.slow
def test_multirun_of_two_cells_and_its_table(tmp_path, data_args):
    mtad_run(
        ["-m", "pair=tiny_llama", "method=sampling,sps", "limit=1", "logger=none", *TASK_ARGS, *data_args], tmp_path
    )
    cells = cell_dirs(tmp_path / "runs")
    assert [c.relative_to(tmp_path / "runs").parts[3] for c in cells] == ["sampling", "sps"]
    assert all((c / "metrics.json").exists() and (c / "env.json").exists() for c in cells)

    # the table is built from these cells alone: speed-ups are ratios of their tokens/s
    from mtad.report.tables import build_table2

    md, csv = build_table2(
        tmp_path / "runs", tmp_path / "tables", experiment="default", overrides=None, allow_mixed_provenance=True
    )  # this checkout may hold uncommitted changes
    import pandas as pd

    table = pd.read_csv(csv).set_index("method")
    speed = {c.parts[-2]: json.loads((c / "metrics.json").read_text())["tokens_per_s"] for c in cells}
    assert table.loc["sps", "speedup_vs_sampling"] == pytest.approx(speed["sps"] / speed["sampling"])
    assert table.loc["sampling", "speedup_vs_sps"] == pytest.approx(speed["sampling"] / speed["sps"])
    header = md.read_text()
    assert "machine: " in header and "pair: tiny_llama" in header and "seed: 0" in header
    assert "cnndm: 1 examples, 1 samples, 1 generations of ≤12 new tokens" in header


def test_speedups_only_against_the_same_task_pair_and_machine():
    import pandas as pd

    from mtad.report.tables import add_speedups

    cells = pd.DataFrame(
        [
            {
                "experiment": "e",
                "pair": "p",
                "task": "t",
                "machine": "m1",
                "overrides": "",
                "method": m,
                "tokens_per_s": v,
            }
            for m, v in (("sampling", 10.0), ("sps", 20.0), ("mtad", 30.0))
        ]
        + [
            {
                "experiment": "e",
                "pair": "p",
                "task": "t",
                "machine": "m2",
                "overrides": "",
                "method": "mtad",
                "tokens_per_s": 99.0,
            }
        ]
    )
    out = add_speedups(cells)
    assert list(out["speedup_vs_sampling"][:3]) == [1.0, 2.0, 3.0]
    assert list(out["speedup_vs_sps"][:3]) == [0.5, 1.0, 1.5]
    assert out["speedup_vs_sampling"].isna().iloc[3]  # no baseline on machine m2: no number


@pytest.mark.slow
def test_failed_cell_does_not_stop_the_multirun(tmp_path):
    data_root = tmp_path / "data"  # CNN/DM from the package only: the spider cell fails on its missing questions
    data_root.mkdir()
    proc = mtad_run(
        [
            "-m",
            "pair=tiny_llama",
            "method=sps",
            "task=cnndm,spider",
            "limit=1",
            "logger=wandb",
            "task.max_new_tokens=12",
            f"data_root={data_root}",
        ],
        tmp_path,
        check=False,
    )
    assert proc.returncode != 0 and "spider data not found" in proc.log
    base = tmp_path / "runs" / "default" / "tiny_llama"
    assert not (base / "spider").exists()  # it failed before generating: no folder
    assert list((base / "cnndm" / "sps").rglob("metrics.json"))
    assert len(list((tmp_path / "multirun").rglob("offline-run-*/run-*.wandb"))) == 2  # both runs closed


@pytest.mark.slow
@pytest.mark.parametrize(
    "override, message",
    [
        ("method=nonexistent", "unknown method 'nonexistent'; valid: "),
        (
            "method.gamm=3",
            "method.gamm: not a setting of method 'sps'; valid: gamma, stop_below, temperature, top_k, top_p",
        ),
    ],
)
def test_bad_override_names_the_valid_choices(tmp_path, override, message):
    proc = mtad_run(["pair=tiny_llama", "method=sps", override], tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.log
    if override.startswith("method="):
        assert "mtad" in proc.log and "sampling" in proc.log  # the valid options are listed


def test_judge_connection_settings_are_not_part_of_a_cells_identity(tmp_path):
    import json

    from omegaconf import OmegaConf
    from test_configs import compose_cfg

    from mtad.runner.layout import ENV, CellAddress, cell_identity, check_identity

    cell = CellAddress("e", "tiny_llama", "mtbench", "sampling", "", tmp_path)

    def identity(*overrides):
        cfg = compose_cfg(["pair=tiny_llama", "task=mtbench", *overrides])
        return cell_identity(cfg, cell, OmegaConf.to_container(cfg.task, resolve=True))

    slow, fast = identity("task.judge.timeout_s=300", "task.judge.retries=5"), identity("task.judge.timeout_s=5")
    assert slow == fast and "timeout_s" not in json.dumps(slow)
    assert identity("task.judge.temperature=0.5") != fast  # how it grades is
    (tmp_path / ENV).write_text(
        json.dumps({"cell": {**slow, "task": {**slow["task"], "judge": {**slow["task"]["judge"], "timeout_s": 120.0}}}})
    )  # recorded with its connection settings
    check_identity(tmp_path, fast)


def test_override_dirname_and_seeds():
    assert (
        override_dirname(
            [
                "method=mtad",
                "method.gamma=3",
                "seed=1",
                "limit=5",
                "logger=wandb",
                "hydra.run.dir=x",
                "per_task.cnndm.limit=2",
                "task.limit=3",
            ]
        )
        == "method.gamma=3,seed=1"
    )
    assert override_dirname(["hydra/launcher=joblib", "energy=none"]) == ""
    # how a judge is reached names no directory; which judge grades does
    assert (
        override_dirname(
            [
                "task.judge.timeout_s=5",
                "task.judge.base_url=http://h:1/v1",
                "task.judge.retries=1",
                "per_task.mtbench.judge.api_key_env=K",
                "task.judge.model=m",
            ]
        )
        == "task.judge.model=m"
    )
    assert derive_seed(0, "a", 0) == derive_seed(0, "a", 0)
    assert len({derive_seed(0, "a", 0), derive_seed(0, "a", 1), derive_seed(0, "b", 0), derive_seed(1, "a", 0)}) == 4


def test_changed_config_in_the_same_directory_is_refused(tmp_path):
    from mtad.runner.layout import check_identity

    (tmp_path / "env.json").write_text(json.dumps({"cell": {"method": {"name": "sps", "gamma": 4}, "seed": 0}}))
    check_identity(tmp_path, {"method": {"name": "sps", "gamma": 4}, "seed": 0})
    with pytest.raises(ValueError, match=r"method.gamma: 4 -> 5"):
        check_identity(tmp_path, {"method": {"name": "sps", "gamma": 5}, "seed": 0})


def test_speed_aggregates_are_ratios_of_totals():
    from mtad.metrics.speed import aggregate_energy, aggregate_speed

    stats = [
        {
            "new_tokens": 10,
            "target_calls": 5,
            "draft_calls": 20,
            "drafted": 16,
            "accepted": 6,
            "accept_lengths": [2, 1, 3, 0],
            "tree_nodes": 0,
            "seconds": 1.0,
        },
        {
            "new_tokens": 2,
            "target_calls": 2,
            "draft_calls": 8,
            "drafted": 8,
            "accepted": 0,
            "accept_lengths": [0, 0],
            "tree_nodes": 0,
            "seconds": 3.0,
        },
    ]
    speed = aggregate_speed(stats)
    assert speed["tokens_per_s"] == 12 / 4.0 and speed["block_efficiency"] == 12 / 7
    assert speed["acceptance_rate"] == 6 / 24 and speed["mean_accept_length"] == 1.0
    assert aggregate_speed([{"new_tokens": 3, "target_calls": 3, "seconds": 1.0}])["acceptance_rate"] is None
    energy = aggregate_energy([{"meter": "nvml", "joules": 6.0}, {"meter": "nvml", "joules": 3.0}], new_tokens=12)
    assert energy["energy_j_per_token"] == 0.75 and energy["energy_missing_reason"] is None
    missing = aggregate_energy([{"meter": "nvml", "joules": 6.0}, {"meter": "none", "joules": None, "reason": "x"}], 12)
    assert missing["energy_j_per_token"] is None and missing["energy_missing_reason"] == "x"


def test_speedups_on_a_filtered_frame_align_by_position():
    import pandas as pd

    from mtad.report.tables import add_speedups

    rows = [
        dict(experiment=e, pair="p", task="t", machine="m", overrides="", method=m, tokens_per_s=v)
        for e in ("a", "b")
        for m, v in (("sampling", 10.0), ("sps", 5.0), ("mtad", 20.0))
    ]
    cells = pd.DataFrame(rows).iloc[3:]  # experiment b only, index 3..5
    out = add_speedups(cells)
    assert out.set_index("method")["speedup_vs_sampling"].to_dict() == {"sampling": 1.0, "sps": 0.5, "mtad": 2.0}


@pytest.mark.slow
def test_every_method_runs_with_a_feature_head(tmp_path, data_args):
    """The head draft kind through mtad-run: a tiny target whose draft reads its hidden states."""
    methods = ["sampling", "sps", "spectr", "specinfer", "mtad", "mmtad"]
    mtad_run(
        ["-m", "pair=tiny_llama_head", f"method={','.join(methods)}", "limit=1", "logger=none", *TASK_ARGS, *data_args],
        tmp_path,
    )
    cells = cell_dirs(tmp_path / "runs")
    assert sorted(c.relative_to(tmp_path / "runs").parts[3] for c in cells) == sorted(methods)
    for cell in cells:
        metrics = json.loads((cell / "metrics.json").read_text())
        assert metrics["new_tokens"] > 0 and metrics["block_efficiency"] >= 1.0, cell
        assert (metrics["draft_calls"] > 0) == (metrics["method"] != "sampling"), cell


def test_an_unreachable_hub_is_probed_once_and_the_process_runs_offline(monkeypatch, caplog):
    import socket

    from mtad.runner import offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def unreachable(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    with caplog.at_level("WARNING"):
        assert offline.settle_hub_access() is False
    assert os.environ["HF_HUB_OFFLINE"] == "1" and caplog.text.count("hub is unreachable") == 1
    caplog.clear()
    assert offline.settle_hub_access() is False and "unreachable" not in caplog.text  # decided: said once
    monkeypatch.delenv("HF_HUB_OFFLINE")


@pytest.mark.slow
def test_a_resume_under_other_conditions_is_recorded_per_run_and_marked_mixed(tmp_path, data_args):
    args = ["pair=tiny_llama", "method=sampling", "logger=none", *TASK_ARGS, *data_args]
    mtad_run([*args, "limit=1", "threads=2"], tmp_path)
    (cell,) = cell_dirs(tmp_path / "runs")
    assert json.loads((cell / "metrics.json").read_text())["conditions"] == "uniform"
    mtad_run([*args, "limit=2", "threads=1"], tmp_path)  # extends the same cell with one thread
    env = json.loads((cell / "env.json").read_text())
    assert [r["torch_threads"] for r in env["runs"]] == [2, 1]
    assert [r["run"] for r in lines(cell / "samples.jsonl")] == [0, 1]
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["conditions"] == "mixed"
    by_run = metrics["tokens_per_s_by_run"]
    assert [by_run[i]["torch_threads"] for i in ("0", "1")] == [2, 1] and all(
        r["examples"] == 1 for r in by_run.values()
    )


def test_help_opens_with_usage_and_examples_and_lists_only_the_groups_a_user_sets(capsys, monkeypatch):
    import sys

    from mtad import run

    monkeypatch.setattr(sys, "argv", ["mtad-run", "--help"])
    run.main()
    text = capsys.readouterr().out
    assert text.startswith("usage: mtad-run") and text.count("  mtad-run ") == 3
    assert (
        "method: blockverify, hf_assisted, hf_generate, mmtad, mtad, sampling, specinfer, spectr, sps" in text
        and "sweep: " in text
    )
    for internal in ("method_defaults", "task_defaults", "mtjd_exact", "powered by Hydra", "hub is unreachable"):
        assert internal not in text


def test_runs_on_one_cpu_name_with_other_instruction_sets_are_mixed_conditions():
    """Two hosts can both read "AMD EPYC (2 CPUs)"; their kernels (and speed) differ with the ISA."""
    from mtad.runner.cell import conditions_summary, run_conditions

    env = {"machine": "AMD EPYC (2 CPUs)", "dtype": "float32", "torch_threads": 1}
    runs = [run_conditions(env | {"cpu_isa": isa}) for isa in (["avx2", "avx512_bf16"], ["avx2"])]
    turn = {"stats": {"new_tokens": 4, "seconds": 1.0, "target_calls": 2}}
    records = [{"id": str(i), "run": i, "samples": [{"turns": [turn]}]} for i in (0, 1)]
    assert conditions_summary(records, ["0", "1"], runs)["conditions"] == "mixed"
    assert conditions_summary(records, ["0", "1"], [runs[0], runs[0]]) == {"conditions": "uniform"}
