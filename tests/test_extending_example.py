"""README.md's "Extending mtad" runs as written: a pair from local folders in a config folder outside the
repository (hydra.searchpath), an experiment on it with its table and figures, a full copy of the configs
(MTAD_CONF_DIR), and the task example run as a cell."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tiny_cells import run_tiny_cell

REPO = Path(__file__).resolve().parents[1]
USER_FOLDER = "EXT=~/mtad-ext"  # the example's one line that names the reader's own folder


def section() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Extending mtad") :].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), re.S)


def save_local_models(folder: Path) -> None:
    """The reader's two models, as `save_pretrained` writes them: tiny random Llamas with one tokenizer."""
    from mtad.models.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    for role, seed in (("target", 0), ("draft", 1)):
        tiny_model("llama", len(tokenizer), seed).save_pretrained(folder / role)
        tokenizer.save_pretrained(folder / role)


def metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


@pytest.mark.slow
def test_a_local_pair_an_experiment_on_it_and_its_reports_run_as_written(tmp_path):
    ext = tmp_path / "ext"
    save_local_models(ext / "models")
    script = "\n".join(blocks("bash"))
    assert script.startswith(USER_FOLDER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(USER_FOLDER, f"EXT={ext}", 1)],
        cwd=REPO,  # "from the checkout"
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    runs = ext / "runs"
    assert metrics(runs / "default" / "my_pair" / "chat" / "sps")["status"] == "complete"
    for method in ("sampling", "sps", "mtad"):
        assert metrics(runs / "mypair" / "my_pair" / "chat" / method)["examples"] == 4
    assert "cell 3 of 3 (mypair/my_pair/chat/mtad): 2 done" in proc.stdout + proc.stderr  # the progress line
    assert f"reading cells under {runs} (--results {ext})" in proc.stdout
    assert "my_pair" in (ext / "tables" / "table2_mypair.md").read_text()
    assert (ext / "figures" / "table2_speedup.png").is_file()
    assert metrics(runs / "default" / "tiny_llama" / "chat" / "sampling")["status"] == "complete"  # MTAD_CONF_DIR


def test_the_task_example_runs_as_a_cell(tmp_path, monkeypatch):
    from mtad import tasks

    (python,) = blocks("python")
    (task_yaml,) = blocks("yaml")
    namespace: dict = {}
    exec(compile(python, "README.md", "exec"), namespace)
    monkeypatch.setitem(tasks.TASKS, "echo", namespace["EchoTask"])  # "register it in TASKS"
    conf = tmp_path / "conf" / "task"
    conf.mkdir(parents=True)
    (conf / "echo.yaml").write_text(task_yaml)  # conf/task/echo.yaml, here in a config folder of one's own
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    plan = run_tiny_cell(tmp_path / "runs", "sps", task="echo", extra=(searchpath,))
    result = metrics(plan.cell.directory)
    assert result["status"] == "complete" and result["examples"] == 2
    assert result["scores"]["hit"] in (0.0, 0.5, 1.0)  # a random tiny model rarely repeats a word: scored all the same
