"""The progress line of a multirun: `cell k of n (<cell>): k-1 done, ETA ...` at each cell's start, the
grid's size counted from the multirun's own config, the ETA from this process's cells so far."""

import logging

import pytest
from hydra import initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from mtad import configs
from mtad.decoding.registry import study_methods
from mtad.runner import progress

NAME = "table2/smollm2_135m_head/cnndm/mtad"


def test_the_line_names_the_cell_its_place_and_the_time_left():
    assert progress.progress_line(1, 24, NAME, None) == f"cell 1 of 24 ({NAME}): 0 done, ETA unknown"
    # 20 cells left (this one included) at 33 s each
    assert progress.progress_line(5, 24, NAME, 33.0) == f"cell 5 of 24 ({NAME}): 4 done, ETA 11 min"
    assert progress.progress_line(24, 24, NAME, 40.0) == f"cell 24 of 24 ({NAME}): 23 done, ETA 40 s"
    assert progress.progress_line(2, 200, NAME, 60.0).endswith("ETA 3.3 h")
    assert progress.progress_line(3, None, NAME, 60.0) == f"cell 3 of ? ({NAME}): 2 done, ETA unknown"


def save_multirun(folder, overrides: list[str]):
    """The multirun.yaml Hydra's sweeper saves in the sweep folder (the part read: the command line)."""
    hydra = [o for o in overrides if o.startswith("hydra.")]  # Hydra keeps its own apart from the job's
    task = [o for o in overrides if not o.startswith("hydra.")]
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"hydra": hydra, "task": task}}}), folder / "multirun.yaml")
    return str(folder)


@pytest.mark.parametrize(
    "overrides, jobs",
    [
        (["experiment=table2"], 4 * len(study_methods())),  # 4 tasks x the study's methods
        (["experiment=table2", "method=mtad,sps"], 8),  # a command-line sweep replaces the grid's
        (["experiment=table2", "task=cnndm"], len(study_methods())),  # a command-line value takes the key out of it
        (["experiment=sweeps", "sweep=gamma"], 24),  # 3 methods x 8 values of gamma
    ],
)
def test_the_grid_size_is_counted_from_the_multiruns_config_inside_a_running_app(tmp_path, overrides, jobs):
    sweep_dir = save_multirun(tmp_path, overrides)
    with initialize_config_dir(config_dir=str(configs.setup()), version_base="1.3"):  # as inside a job
        assert progress.grid_size(sweep_dir) == jobs
    assert progress.grid_size(str(tmp_path / "nowhere")) is None  # no multirun.yaml: the size is unknown


def test_an_experiment_in_a_config_folder_of_ones_own_is_counted_too(tmp_path):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nexperiment_name: mine\nhydra:\n  mode: MULTIRUN\n"
        "  sweeper:\n    params:\n      method: sampling,sps\n      task: chat,cnndm,spider\n"
    )
    sweep_dir = save_multirun(tmp_path, [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "experiment=mine"])
    with initialize_config_dir(config_dir=str(configs.setup()), version_base="1.3"):
        assert progress.grid_size(sweep_dir) == 6


def set_job(sweep_dir: str, num: int, overrides=("experiment=table2",)) -> None:
    cfg = configs.compose(list(overrides), hydra=True)
    cfg.hydra.job.num, cfg.hydra.sweep.dir = num, sweep_dir
    HydraConfig.instance().set_config(cfg)


def test_each_cell_of_a_multirun_logs_its_line_once_at_its_start(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(progress, "_STARTS", [])
    sweep_dir = save_multirun(tmp_path, ["experiment=table2"])
    times = iter([100.0, 160.0, 200.0])  # the second cell starts 60 s after the first, the third 40 s later
    with caplog.at_level(logging.INFO, logger="mtad.run"):
        for num in range(3):
            set_job(sweep_dir, num)
            progress.announce_cell(f"table2/p/cnndm/m{num}", clock=lambda: next(times))
    n = 4 * len(study_methods())  # Table 2's grid: 4 tasks x the study's methods
    assert [r.getMessage() for r in caplog.records] == [
        f"cell 1 of {n} (table2/p/cnndm/m0): 0 done, ETA unknown",
        f"cell 2 of {n} (table2/p/cnndm/m1): 1 done, ETA {round(60 * (n - 1) / 60)} min",  # 60 s a cell
        f"cell 3 of {n} (table2/p/cnndm/m2): 2 done, ETA {round(50 * (n - 2) / 60)} min",  # 50 s a cell
    ]


def test_a_single_cell_logs_no_progress_line(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(progress, "_STARTS", [])
    set_job(save_multirun(tmp_path, ["task=chat"]), 0, overrides=("task=chat",))  # mode RUN: one cell
    with caplog.at_level(logging.INFO, logger="mtad.run"):
        progress.announce_cell("default/p/chat/sampling")
    assert caplog.records == []
