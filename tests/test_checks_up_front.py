"""Everything a cell can get wrong before generation is one line, before anything loads, and
leaves no folder behind: limits beyond the examples, folders that cannot be written, pair settings
(dtype, decode path, device, draft file, hub models out of reach)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_run_failures import TINY, plan

from mtad.runner.checks import SettingError


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task=cnndm", "limit=100"], "limit=100 but task cnndm has 80 examples"),
        (["task=chat", "limit=300"], "limit=300 but task chat has 256 examples (a pool of 256"),
        (["task=chat", "task.pool=10", "limit=11"], "limit=11 but task chat has 10 examples"),
    ],
)
def test_a_limit_beyond_the_examples_is_an_error_naming_how_many_exist(tmp_path, overrides, message):
    with pytest.raises(SettingError, match=re.escape(message)):
        plan([*TINY, "method=sampling", *overrides], tmp_path)
    assert not (tmp_path / "runs").exists()


def test_a_limit_within_the_examples_and_no_limit_pass(tmp_path):
    assert plan([*TINY, "method=sampling", "task=chat", "task.pool=10", "limit=10"], tmp_path).limit == 10
    assert plan([*TINY, "method=sampling", "task=cnndm", "limit=80"], tmp_path).limit == 80


def test_a_results_root_below_a_file_says_not_a_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    from hydra.core.hydra_config import HydraConfig
    from test_configs import compose_cfg

    from mtad.run import plan_cell
    from mtad.runner.layout import resolve_cell

    cfg = compose_cfg([*TINY, "method=sampling", "task=chat", f"results_root={blocker}/runs"])
    with pytest.raises(SettingError, match=re.escape(f"{blocker} is not a directory")) as err:
        plan_cell(cfg, resolve_cell(cfg, HydraConfig.get()))
    assert "results_root" in str(err.value) and "\n" not in str(err.value)


def test_a_cache_below_a_file_names_mtad_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MTAD_CACHE", str(blocker / "cache"))
    with pytest.raises(SettingError, match=re.escape(f"{blocker} is not a directory")) as err:
        plan([*TINY, "method=sampling", "task=chat"], tmp_path)
    assert "MTAD_CACHE" in str(err.value)
    assert not (tmp_path / "runs").exists()


def unsearchable(monkeypatch, locked: Path) -> None:
    """Looking at anything inside ``locked`` is refused, as a mode-000 folder refuses another user
    (root, who runs the tests, ignores permissions: pathlib's stat is patched instead)."""
    stat = Path.stat

    def refused(self, *args, **kwargs):
        if str(self.absolute()).startswith(f"{locked}/"):
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", refused)


def test_a_results_root_inside_a_folder_this_user_cannot_search_is_one_line(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    unsearchable(monkeypatch, locked)
    from hydra.core.hydra_config import HydraConfig
    from test_configs import compose_cfg

    from mtad.run import plan_cell
    from mtad.runner.layout import resolve_cell

    cfg = compose_cfg([*TINY, "method=sampling", "task=chat", f"results_root={locked}/runs"])
    with pytest.raises(SettingError) as err:
        plan_cell(cfg, resolve_cell(cfg, HydraConfig.get()))
    message = str(err.value)
    assert message.startswith(f"cannot read {locked}: permission denied (needed for {locked}/runs/")
    assert message.endswith("point results_root to a folder this user can read and write") and "\n" not in message


def test_a_results_root_this_user_cannot_read_or_write_is_one_line(tmp_path, monkeypatch):
    import os

    from mtad.runner.checks import folder_problem

    runs = tmp_path / "runs"
    runs.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != runs and access(path, mode, **kw))
    assert (
        folder_problem(runs / "exp") == f"cannot read and write {runs}: permission denied (needed for {runs / 'exp'})"
    )
    assert folder_problem(tmp_path / "other") is None


UNSEARCHABLE = """
import os, pathlib
LOCKED = os.environ["MTAD_TEST_LOCKED"]
_stat = pathlib.Path.stat
def stat(self, *args, **kwargs):
    if str(self.absolute()).startswith(LOCKED + "/"):
        raise PermissionError(13, "Permission denied", str(self))
    return _stat(self, *args, **kwargs)
pathlib.Path.stat = stat
"""


def test_mtad_run_with_a_results_root_it_cannot_reach_says_so_in_one_line(tmp_path):
    from test_run import mtad_run

    locked = tmp_path / "locked"
    locked.mkdir()
    args = [*TINY, "method=sampling", "task=chat", "limit=1", f"results_root={locked}/runs"]
    proc = mtad_run(args, tmp_path, check=False, prefix=UNSEARCHABLE, env={"MTAD_TEST_LOCKED": str(locked)})
    assert proc.returncode == 1 and "Traceback" not in proc.log, proc.log[-3000:]
    (line,) = [line for line in proc.log.splitlines() if str(locked) in line]
    assert f"cannot read {locked}: permission denied" in line and "point results_root to a folder" in line


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs a /proc file system")
def test_a_folder_where_none_can_be_made_is_one_line():
    from mtad.runner.checks import folder_problem

    problem = folder_problem(Path("/proc/mtad-test/x"))
    assert problem and "/proc" in problem and "\n" not in problem
    assert folder_problem(Path("/tmp")) is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("pair.target_dtype=int3", "unknown dtype 'int3' for the target; valid:"),
        ("pair.draft_dtype=int3", "unknown dtype 'int3' for the draft; valid:"),
        ("pair.decode_path=foo", "decode_path must be one of"),
        (
            "pair.draft.file=/nonexistent.safetensors",
            "feature head file /nonexistent.safetensors not found; train it with `make draft DRAFT_PAIR=",
        ),
        ("pair.device=tpu:0", "pair.device='tpu:0'"),
    ],
)
def test_pair_settings_are_checked_before_anything_loads(tmp_path, override, message):
    with pytest.raises(SettingError, match=re.escape(message)):
        plan(["method=sps", "task=chat", override], tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch can use CUDA")
def test_cuda_on_a_torch_that_cannot_use_it_says_so(tmp_path):
    with pytest.raises(SettingError, match="sees no CUDA GPU; use pair.device=cpu"):
        plan(["method=sps", "task=chat", "pair.device=cuda"], tmp_path)


@pytest.mark.parametrize("pair, model_id", [("llama2_13b_7b", "meta-llama/Llama-2-13b-hf")])
def test_a_hub_model_out_of_reach_names_its_id_and_how_to_provide_it(tmp_path, monkeypatch, pair, model_id):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(SettingError) as err:
        plan([f"pair={pair}", "method=sps", "task=chat"], tmp_path)
    text = str(err.value)
    assert model_id in text and "local-dir" in text and "pair.target.id=DIR" in text and "\n" not in text
    assert not (tmp_path / "runs").exists()


def test_a_local_hub_folder_that_is_missing_is_named(tmp_path):
    with pytest.raises(SettingError, match=re.escape(f"pair.target.id={tmp_path}/absent: no such folder")):
        plan(["pair=llama2_13b_7b", f"pair.target.id={tmp_path}/absent", "method=sps", "task=chat"], tmp_path)
