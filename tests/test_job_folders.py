"""A multirun's job folders (conf/hydra/default.yaml, `hydra.sweep.subdir`) are named by the job's
number, task and method and the overrides that set its cell apart, by the same rule as the cells'
override folders (mtad.runner.layout), and are safe names on any filesystem."""

import re
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from mtad.configs import compose
from mtad.runner.layout import NEUTRAL_KEYS, override_dirname

# what a run names besides the cell: where files go, how many examples, how progress shows
NEUTRAL = ["results_root=/tmp/mine/runs", "limit=2", "progress=false", "logger=none", "energy=none"]


def job_folder(overrides: list[str], num: int = 0) -> Path:
    """The job folder (below the sweep folder) Hydra gives job ``num`` of a multirun with ``overrides``."""
    cfg = compose(overrides, hydra=True)
    cfg.hydra.job.num = num
    HydraConfig.instance().set_config(cfg)  # so ${hydra:...} interpolations resolve
    return Path(OmegaConf.to_container(cfg.hydra.sweep, resolve=True)["subdir"])


@pytest.mark.parametrize(
    "swept",
    [["method.gamma=3"], ["method.threshold=0.3", "method.beam_width=2"], ["seed=1", "task.max_new_tokens=16"]],
)
def test_a_swept_job_is_named_by_its_task_method_and_overrides(swept):
    folder = job_folder(["experiment=sweeps", "sweep=gamma", "method=mtad", *swept, *NEUTRAL], num=5)
    assert folder == Path("5_cnndm_mtad") / override_dirname(swept)  # the cell's own override folder
    assert "results_root" not in str(folder) and "limit" not in str(folder)


def test_a_job_without_overrides_keeps_its_plain_name():
    assert job_folder(["experiment=table2", "task=spider", "method=sampling", *NEUTRAL], num=0) == Path(
        "0_spider_sampling"
    )


def test_a_pair_given_on_the_command_line_names_the_job_too():
    assert job_folder(["pair=tiny_llama", "task=chat", "method=sps", "method.gamma=2"]) == Path(
        "0_chat_sps/method.gamma=2,pair=tiny_llama"
    )


def test_the_excluded_keys_are_the_layouts_neutral_keys():
    excluded = compose([], hydra=True).hydra.job.config.override_dirname.exclude_keys
    assert set(excluded) == NEUTRAL_KEYS - {"pair"}  # a pair names a cell folder level: kept in a job's name


def test_job_folder_names_are_filesystem_safe():
    folder = job_folder(["experiment=sweeps", "sweep=threshold", "method=mmtad", "method.threshold=0.7", *NEUTRAL])
    for part in folder.parts:
        assert re.fullmatch(r"[A-Za-z0-9_.,=+-]+", part) and len(part.encode()) <= 255 and part not in (".", ".."), part
