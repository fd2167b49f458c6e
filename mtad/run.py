"""``mtad-run`` (also ``python -m mtad.run``): one (pair, method, task) cell -> results.

    mtad-run pair=smollm2_135m method=mtad task=cnndm limit=4
    mtad-run experiment=table2            # the whole grid, as a Hydra multirun

A cell writes ``<results_root>/<experiment>/<pair>/<task>/<method>[/<overrides>]/``:

- ``samples.jsonl``: one line per example, appended (and fsynced) as soon as it finishes:
  id, per sample and turn the text, completion, token ids, decoder stats, energy, target
  log-probability and scores. A rerun skips the ids already there, so an
  interrupted cell resumes without duplicates or losses; answers a task could not score
  (an MT-Bench judge that failed) are scored again from the recorded text, not regenerated.
- ``metrics.json``: status (``complete``, ``incomplete`` with its reason, or ``missing``
  when the task's data is absent and ``missing_data=mark``), task scores, perplexity,
  speed/acceptance aggregates, energy per token, peak memory, recomputed from every line of
  ``samples.jsonl`` at the end of each run.
- ``env.json``: machine, threads, dtype, device, versions, seed, config, and the code state
  (commit, dirty flag, hash of the uncommitted diff) read once when the process started;
  ``git_runs`` lists every code state that wrote records into the cell.

``<overrides>`` holds the command-line overrides that change what is generated (e.g.
``method.gamma=3``), so a changed config lands in a new directory; changing ``limit`` does
not (it extends the cell). A cell directory whose recorded config differs from the current
one (an edited experiment file) is refused with the differences listed.

Settings (limit, method parameters, task options, the judge, a writable results_root) are
checked before any data or model is loaded and before the cell directory exists. A failed
run writes ``error.txt`` into its cell unless that cell is complete (its results stand).
The process exits non-zero when a cell failed or stayed incomplete. Ctrl-C stops it with one line,
the examples its cells keep, and status 130; the same command resumes it.
"""

from __future__ import annotations

import logging
import sys
import time

from omegaconf import DictConfig, OmegaConf

from mtad import configs, provenance
from mtad.runner.cell import (
    CellIncomplete,
    CellRecords,
    CellSettings,
    failures_recorded,
    incomplete,
    missing_or_fail,
    plan_cell,
)
from mtad.runner.checks import SettingError, check_group_options, check_override_keys
from mtad.runner.interrupt import INTERRUPTED, interrupted_line
from mtad.runner.layout import resolve_cell
from mtad.runner.lock import cell_lock
from mtad.runner.offline import settle_hub_access
from mtad.runner.session import PairSession

log = logging.getLogger("mtad.run")
STARTED: list = []  # the folders of the cells this process has begun: what Ctrl-C reports as kept


def run_cell(cfg: DictConfig, plan: CellSettings, logger) -> dict:
    """Generate, score and record the examples of one cell that are not done yet (the cell is held):
    a session of one cell (``mtad.runner.session``)."""
    from tqdm import tqdm

    run = CellRecords(plan, logger=logger)
    log.info("%s", run.describe())
    finished = run.finished_metrics()
    if finished is not None:
        log.info("cell %s is complete: nothing to do", plan.cell.name)
        return finished
    session = PairSession(cfg, {plan.cell.method: run})
    session.open()
    session.warm_up(run.pending[0] if run.pending else None, [plan.cell.method])
    for example in tqdm(list(run.pending), desc=plan.cell.name, disable=not cfg.progress, dynamic_ncols=True):
        session.run(plan.cell.method, example)
    (metrics,) = session.close().values()
    error = incomplete(metrics)
    if error is not None:
        raise error
    return metrics


def run_with_logger(cfg: DictConfig) -> dict:
    """The task_wrapper pattern: the logger always finishes; a failure is recorded, then raised.

    In a multirun Hydra records the exception for this job and goes on with the other cells.
    """
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from mtad.data import DataMissingError

    cell = resolve_cell(cfg, HydraConfig.get())
    plan = plan_cell(cfg, cell)  # bad settings stop here: nothing loaded, nothing written
    STARTED.append(cell.directory)
    logger = hydra.utils.instantiate(
        cfg.logger,
        name=cell.name,
        run_config=OmegaConf.to_container(cfg, resolve=True),
        _recursive_=False,
        _convert_="all",
    )  # the config is data, not objects
    failed = True
    try:
        with failures_recorded(cfg, [cell]), cell_lock(cell.directory, cell.name):  # one writer per cell
            try:
                metrics = run_cell(cfg, plan, logger)
            except DataMissingError as exc:
                (metrics,) = missing_or_fail(cfg, [cell], exc)
        failed = False
        return metrics
    finally:
        logger.finish(failed=failed)


# Hydra's flags that print something instead of running: no cell, so no hub probe and no plan
INFO_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def usage() -> str:
    """``mtad-run --help``: how to call it, examples, the config groups a user picks from (their
    options read from conf/) and the top-level settings with their defaults."""
    conf = configs.setup()
    groups = sorted(p.name for p in conf.iterdir() if p.is_dir() and p.name != "hydra")
    top = OmegaConf.load(conf / "config.yaml")
    lines = [
        "usage: mtad-run [-m] [group=option ...] [key=value ...]",
        "",
        "Runs one (pair, method, task) cell into <results_root>/<experiment_name>/<pair>/<task>/<method>/",
        "[<overrides>]/ (samples.jsonl, metrics.json, env.json); -m, or an experiment that declares a grid,",
        "runs every cell of it. An interrupted run resumes where it stopped.",
        "",
        "examples:",
        "  mtad-run method=mtad task=cnndm limit=4              # one cell, 4 articles",
        "  mtad-run experiment=table2                           # the Table 2 grid",
        "  mtad-run -m experiment=sweeps sweep=gamma method=mtad  # a sweep, one method",
        "",
        "config groups (group=option):",
        *(f"  {g}: {', '.join(sorted(p.stem for p in (conf / g).glob('*.yaml')))}" for g in groups),
        "",
        "settings (key=value; defaults from conf/config.yaml):",
        *(f"  {k}={OmegaConf.to_container(top)[k]}" for k in top if k != "defaults"),
        "",
        "A group's keys: method.<key>=..., task.<key>=..., pair.<key>=... (mtad/decoding/README.md, conf/).",
        "Hydra's own options: mtad-run --hydra-help",
    ]
    return "\n".join(lines)


def main() -> None:
    """``mtad-run``; Ctrl-C ends it with one line (the examples its cells keep) and status 130."""
    try:
        run_command(sys.argv[1:])
    except KeyboardInterrupt:  # caught above Hydra, whose launcher and error report would print a traceback
        print(interrupted_line("mtad-run", STARTED), file=sys.stderr)
        sys.exit(INTERRUPTED)


def run_command(argv: list[str]) -> None:
    """The command line's group options and override keys are checked first (Hydra's own messages
    span many lines and list no near names), then every job of a multirun is planned (a bad value
    stops it before its first cell), then Hydra runs the cell(s): the grid, then each launch of the
    cells the experiment declares beside it (``mtad.runner.multirun.beside_launches``). The process
    exits with the worst status of them."""
    from hydra.errors import HydraException

    from mtad.runner.multirun import beside_launches, first_bad_job, jobs_to_check, needs_hub, runs_several

    if "--help" in argv or "-h" in argv:
        print(usage())
        return
    problem = check_group_options(argv) or check_override_keys(argv)
    if problem:
        sys.exit(f"mtad-run: {problem}")
    provenance.capture()  # the code state this process starts from, before any cell runs
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    launches = []
    if not any(a.split("=")[0] in INFO_FLAGS for a in argv):
        overrides = [a for a in argv if not a.startswith("-")]
        try:
            jobs = jobs_to_check(overrides)  # the grid composed once, for the probe and the plan
            first = configs.compose(jobs[0], hydra=True)
            settle_hub_access(quiet=not needs_hub(first))
            several = runs_several(argv, first)
            problem = first_bad_job(overrides, jobs) if several else None
            launches = beside_launches(overrides) if several else []
        except HydraException:  # overrides Hydra cannot compose: it says why in one line below
            problem = None
        if problem:
            sys.exit(f"mtad-run: nothing ran; {problem}")
    status = launch_all(configs.setup(), argv, launches)
    if status:
        sys.exit(status)


def launch_all(conf, argv: list[str], beside: list[list[str]]) -> int:
    """The command's Hydra run, then one per launch ``beside`` its grid (the command's flags kept),
    the progress line counting across them; the worst exit status of them."""
    from mtad.runner.grid import grid_jobs
    from mtad.runner.progress import command_cells

    flags = [a for a in argv if a.startswith("-")]
    commands = [argv, *(flags + overrides for overrides in beside)]
    sizes = [len(grid_jobs([a for a in c if not a.startswith("-")])) for c in commands] if beside else []
    status = 0
    for i, command in enumerate(commands):
        if sizes:
            command_cells(sum(sizes), sum(sizes[:i]))
        status = max(status, launch(conf, command))
    return status


def launch(conf, argv: list[str]) -> int:
    """One Hydra run of ``argv`` (a multirun, or one cell) from the config folder ``conf``; the exit
    status it ended with (Hydra exits 1 after a multirun in which a cell failed)."""
    import hydra

    saved, sys.argv = sys.argv, [sys.argv[0], *argv]  # Hydra reads its command line there
    try:
        hydra.main(version_base="1.3", config_path=str(conf), config_name="config")(run_job)()
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a message Python would print on its way out
            print(exc.code, file=sys.stderr)
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.argv = saved
    return 0


def run_job(cfg: DictConfig) -> None:
    """One Hydra job: one cell."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    start = time.perf_counter()
    try:
        run_with_logger(cfg)
    except (SettingError, CellIncomplete) as exc:
        if HydraConfig.get().mode == RunMode.RUN:  # one line, no traceback; a multirun records it and goes on
            log.error("%s", exc)
            sys.exit(1)
        raise
    log.info("done in %.1f s", time.perf_counter() - start)


if __name__ == "__main__":
    main()
