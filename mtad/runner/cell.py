"""One cell's lifecycle, the same for both schedulers: ``mtad.run`` (one cell per job) and
``mtad.experiments.interleaved`` (several cells, methods alternating within each prompt).

    plan = plan_cell(cfg, cell)        # every setting checked: nothing read, nothing written
    run = CellRecords(plan)                # resume state: finished records, pending examples, answers to score again
    run.finished_metrics()             # metrics.json when the cell is complete and nothing is left to do
    run.start(environment)             # env.json: machine, versions, code state, the cell's identity and config
    run.rescore()                      # answers the task could not score before, scored from their text
    run.record(record)                 # one finished example, appended (fsynced) to samples.jsonl
    metrics = run.close(devices)       # metrics.json from every record; env.json's finish; error.txt gone

A failure is written to the cell (``record_failure``: error.txt, never into a complete cell), a
cell whose data is absent is marked ``missing`` or fails (``missing_or_fail``, by ``missing_data``),
and errors a setting explains become one line (``failures_recorded``).
"""

from __future__ import annotations

import json
import logging
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mtad import provenance
from mtad.data import cache_root
from mtad.devices import peak_memory
from mtad.records import append_record, read_json, read_records, rewrite_records, write_json
from mtad.runner.aggregate import cell_metrics, summary
from mtad.runner.checks import (
    SettingError,
    build_task,
    check_method,
    check_pair,
    check_run_settings,
    check_task_limit,
    check_writable,
    explain_os_error,
    task_settings,
)
from mtad.runner.layout import ENV, ERROR, METRICS, SAMPLES, CellAddress, cell_identity, check_identity, is_complete
from mtad.runner.lock import CellBusy
from mtad.runner.loop import needs_rescoring, rescore
from mtad.runner.progress import announce_cell

log = logging.getLogger("mtad.run")

MISSING_DATA_MODES = ("fail", "mark")


class CellIncomplete(RuntimeError):
    """The cell ran but some examples lack a score (metrics.json says why); exit non-zero."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class CellSettings:
    """A cell's checked settings: everything decided before data or models are touched."""

    cfg: DictConfig
    cell: CellAddress
    task: object
    limit: int | None
    method_settings: object  # the method's frozen settings (mtad/decoding/params.py), built once
    identity: dict

    @property
    def method_params(self) -> dict:
        """The method's settings as a dict in field order (what the records state)."""
        return asdict(self.method_settings)


def plan_cell(cfg: DictConfig, cell: CellAddress) -> CellSettings:
    """Check every setting of the cell; nothing is read or written yet."""
    check_run_settings(cfg)
    if cfg.missing_data not in MISSING_DATA_MODES:
        raise SettingError(f"missing_data must be one of {', '.join(MISSING_DATA_MODES)}, got {cfg.missing_data!r}")
    options, limit = task_settings(cfg, cell.task, cell.command_line)
    method_settings = check_method(cell.method, OmegaConf.to_container(cfg.method, resolve=True))
    check_pair(OmegaConf.to_container(cfg.pair, resolve=True), cell.method)
    task = build_task(cell.task, cfg.data_root, options)
    check_task_limit(task, cell.task, limit)
    check_writable(cell.directory, "results_root")
    check_writable(cache_root(), "MTAD_CACHE (the cache of converted models and wheels)")
    identity = cell_identity(cfg, cell, options)
    check_identity(cell.directory, identity)
    return CellSettings(cfg, cell, task, limit, method_settings, identity)


class CellRecords:
    """The records of one cell as a run resumes it, and the files it writes.

    ``examples`` are the task's examples up to the plan's limit (read here unless given); a
    ``logger`` (conf/logger) receives every finished example and the cell's metrics.
    """

    def __init__(self, plan: CellSettings, examples: list[dict] | None = None, logger=None):
        from mtad.tracking import NullLogger

        announce_cell(plan.cell.name)  # in a multirun: cell k of n, the cells done, the ETA
        self.plan, self.cell, self.task, self.cfg = plan, plan.cell, plan.task, plan.cfg
        self.logger = logger or NullLogger()
        self.examples = plan.task.examples(limit=plan.limit) if examples is None else examples
        self.example_ids = [str(e["id"]) for e in self.examples]
        self.samples_path = self.cell.directory / SAMPLES
        self.records = read_records(self.samples_path, repair=True)
        self.done = {r["id"] for r in self.records}
        self.pending = [e for e in self.examples if str(e["id"]) not in self.done]
        planned = set(self.example_ids)
        self.to_rescore = [r for r in needs_rescoring(self.task, self.records) if r["id"] in planned]
        self.previous_env = read_json(self.cell.directory / ENV)
        self.environment: dict = {}  # what the scheduler knows of the run (start)
        self.wrote = False  # records written by this process
        self.runs: list[dict] = list(self.previous_env.get("runs") or [])  # every run's conditions
        self.run_index: int | None = None  # this process's run, once it starts writing

    @property
    def has_work(self) -> bool:
        return bool(self.pending or self.to_rescore)

    def describe(self) -> str:
        again = f", {len(self.to_rescore)} to score again" if self.to_rescore else ""
        done, pending = len(self.examples) - len(self.pending), len(self.pending)
        return f"cell {self.cell.name}: {len(self.examples)} examples, {done} already done, {pending} to run{again}"

    def finished_metrics(self) -> dict | None:
        """metrics.json when the cell is complete for this limit and nothing is left to do."""
        if self.has_work or not is_complete(self.cell.directory):
            return None
        metrics = read_json(self.cell.directory / METRICS)
        return metrics if metrics.get("examples_planned") == len(self.example_ids) else None

    # -- env.json -----------------------------------------------------------------------
    def _env(self, environment: dict, writing: bool) -> dict:
        """The environment with this cell's settings; ``git_runs`` lists every code state that
        wrote records into the cell (this process's when it writes)."""
        previous = self.previous_env
        git_runs = previous.get("git_runs") or ([previous["git"]] if previous.get("git") else [])
        state = provenance.git_commit()
        if writing and state not in git_runs:
            git_runs = git_runs + [state]
        env = {
            **environment,
            "seed": self.cfg.seed,
            "cell": self.plan.identity,
            "energy_meter": self.cfg.energy.meter,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "git_runs": git_runs,
            "runs": self.runs,
        }
        if not writing and previous.get("git"):
            env["git"] = previous["git"]  # nothing generated now: the records' code state stands
        return env

    def start(self, environment: dict) -> None:
        """Write env.json before the first record (``environment``: provenance.environment_record()
        plus what the scheduler knows: pair name, energy, start time). A process that will write
        records appends its conditions to ``runs``; each record names its run."""
        self.cell.directory.mkdir(parents=True, exist_ok=True)
        self.environment = environment
        self.runs = list(self.previous_env.get("runs") or [])
        if self.has_work:
            self.runs.append({**run_conditions(environment), "started": environment.get("started") or now()})
            self.run_index = len(self.runs) - 1
        write_json(self.cell.directory / ENV, self._env(environment, writing=self.has_work))

    # -- records ------------------------------------------------------------------------
    def rescore(self) -> None:
        """Score again, from the recorded answers, every sample the task could not score before."""
        if not self.to_rescore:
            return
        fixed = rescore(self.task, {str(e["id"]): e for e in self.examples}, self.to_rescore)
        rewrite_records(self.samples_path, self.records)
        self.wrote = True
        log.info("cell %s: %d of %d unscored answer(s) scored now", self.cell.name, fixed, len(self.to_rescore))
        self.to_rescore = []

    def record(self, record: dict) -> None:
        """One finished example: appended and fsynced, so an interrupted cell loses nothing."""
        record = {**record, "run": self.run_index}
        append_record(self.samples_path, record)
        self.records.append(record)
        self.done.add(record["id"])
        self.wrote = True
        self.logger.log_example(self.example_ids.index(record["id"]), example_row(record))

    def close(self, devices, **extra) -> dict:
        """metrics.json from every record of the planned examples; env.json gets the finish time."""
        cell = self.cell
        metrics = {
            **named(cell),
            **cell_metrics(self.task, self.records, self.example_ids),
            **conditions_summary(self.records, self.example_ids, self.runs),
            **peak_memory(devices),
            "machine": self.environment["machine"],
            "dtype": self.environment["dtype"],
            "seed": self.cfg.seed,
            "finished": now(),
            **extra,
        }
        write_json(cell.directory / METRICS, metrics)
        (cell.directory / ERROR).unlink(missing_ok=True)  # an earlier failure is now resolved
        env = self._env(self.environment, writing=self.wrote)  # git_runs: what this process did write
        write_json(cell.directory / ENV, {**env, "finished": metrics["finished"]})
        self.logger.log_metrics(metrics)
        log.info("cell %s: %s", cell.name, summary(metrics))
        return metrics


# what a tracker plots per example beside its scores: its decoding's totals over every sample and turn
EXAMPLE_SPEED = ("new_tokens", "decode_seconds", "tokens_per_s", "block_efficiency", "acceptance_rate")


def example_row(record: dict) -> dict:
    """One finished example as the tracker logs it (``log_example``): the first sample's scores and,
    from the decoder stats of every sample and turn, tokens/s, block efficiency and acceptance
    (None where they do not apply, e.g. acceptance of plain sampling: the tracker leaves it out)."""
    from mtad.metrics.speed import aggregate_speed

    speed = aggregate_speed(turn["stats"] for sample in record["samples"] for turn in sample["turns"])
    return {"scores": record["samples"][0]["scores"], **{key: speed[key] for key in EXAMPLE_SPEED}}


CONDITION_KEYS = ("machine", "cpu_isa", "dtype", "torch_threads", "commit")


def run_conditions(environment: dict) -> dict:
    """What a run's speed depends on: machine, its instruction sets (two CPUs of one model name can
    differ in them, and so in kernels and rounding), dtype, torch threads and the code state."""
    return {
        "machine": environment.get("machine"),
        "cpu_isa": environment.get("cpu_isa"),
        "dtype": environment.get("dtype"),
        "torch_threads": environment.get("torch_threads"),
        "commit": provenance.git_commit(),
    }


def conditions_summary(records: list[dict], example_ids: list[str], runs: list[dict]) -> dict:
    """Whether the cell's records ran under one set of conditions; when they mix (a resume with other
    threads, dtype, machine or code), tokens/s per run beside the cell's blended figure."""
    from mtad.metrics.speed import aggregate_speed

    planned = set(example_ids)
    by_run: dict[int, list[dict]] = {}
    for r in records:
        if r["id"] in planned:
            by_run.setdefault(r.get("run", -1), []).append(r)
    conditions = {
        json.dumps({k: (runs[i] if 0 <= i < len(runs) else {}).get(k) for k in CONDITION_KEYS}, sort_keys=True)
        for i in by_run
    }
    if len(conditions) <= 1:
        return {"conditions": "uniform"}
    per_run = {}
    for i, rs in sorted(by_run.items()):
        speed = aggregate_speed(t["stats"] for r in rs for s in r["samples"] for t in s["turns"])
        per_run[str(i)] = {
            **({k: runs[i].get(k) for k in CONDITION_KEYS} if 0 <= i < len(runs) else {"unrecorded": True}),
            "examples": len(rs),
            "tokens_per_s": speed["tokens_per_s"],
        }
    return {"conditions": "mixed", "tokens_per_s_by_run": per_run}


def named(cell: CellAddress) -> dict:
    """The cell's name and identity parts, the head of its metrics.json."""
    parts = {"experiment": cell.experiment, "pair": cell.pair, "task": cell.task, "method": cell.method}
    return {"cell": cell.name, **parts, "overrides": cell.overrides}


def incomplete(metrics: dict) -> CellIncomplete | None:
    """The error for a cell that ran but left examples unscored (None when it did not)."""
    if metrics["status"] != "complete" and metrics["examples_unscored"]:
        return CellIncomplete(f"cell {metrics['cell']} is incomplete: {metrics['incomplete_reason']}")
    return None


# -- failures -------------------------------------------------------------------------------
def mark_missing(cell: CellAddress, exc: Exception) -> dict:
    """``missing_data=mark``: record that the cell's data is absent (why, and the command that
    gets it) instead of failing; a complete cell is left as it is."""
    if is_complete(cell.directory):
        log.warning("cell %s: data missing (%s); its complete results are left as they are", cell.name, exc)
        return read_json(cell.directory / METRICS)
    metrics = {
        **named(cell),
        "status": "missing",
        "missing_reason": str(exc),
        "finished": now(),
    }
    log.warning("cell %s: marked missing: %s", cell.name, exc)
    cell.directory.mkdir(parents=True, exist_ok=True)
    write_json(cell.directory / METRICS, metrics)
    (cell.directory / ERROR).unlink(missing_ok=True)
    return metrics


def record_failure(cell: CellAddress) -> None:
    """error.txt (the traceback being handled) into the cell that failed, never into a complete one;
    a cell that failed before it wrote a record (models or data refused) leaves no folder."""
    if is_complete(cell.directory):
        log.error("cell %s failed; its earlier complete results are left as they are", cell.name)
        return
    if not written(cell):
        remove_unwritten(cell)
        return
    try:
        cell.directory.mkdir(parents=True, exist_ok=True)
        (cell.directory / ERROR).write_text(f"{now()}\n{traceback.format_exc()}")
        log.error("cell %s failed (traceback in %s)", cell.name, cell.directory / ERROR)
    except OSError as exc:
        log.error("cell %s failed; could not write %s (%s)", cell.name, cell.directory / ERROR, exc.strerror)


def written(cell: CellAddress) -> bool:
    """Whether the cell's folder holds any record (of this run or an earlier one)."""
    return any((cell.directory / name).exists() for name in (SAMPLES, ENV, METRICS, ERROR))


def remove_unwritten(cell: CellAddress) -> None:
    """The folder of a cell that holds nothing but its lock, and its parents that hold nothing else."""
    from mtad.runner.lock import HOLDER, LOCK

    for name in (LOCK, HOLDER):
        (cell.directory / name).unlink(missing_ok=True)
    folder = cell.directory
    for _ in range(len(Path(cell.overrides).parts) + 4):  # overrides, method, task, pair, experiment
        try:
            folder.rmdir()
        except OSError:  # not empty (another cell), or gone
            break
        folder = folder.parent


def missing_or_fail(cfg: DictConfig, cells: list[CellAddress], exc: Exception) -> list[dict]:
    """Data of ``cells`` is absent: marked missing (``missing_data=mark``; their metrics), else
    recorded as failed and raised as one line."""
    if cfg.missing_data == "mark":
        return [mark_missing(cell, exc) for cell in cells]
    for cell in cells:
        record_failure(cell)
    raise SettingError(str(exc)) from None


def folder_settings(cfg: DictConfig) -> dict[str, Path]:
    """The settings that choose where files go, for one-line permission errors."""
    from hydra.core.hydra_config import HydraConfig

    from mtad import data

    folders = {
        "results_root": Path(cfg.results_root),
        "MTAD_CACHE": data.cache_root(),
        "data_root (or MTAD_DATA)": data.data_root(cfg.data_root),
    }
    try:
        folders["hydra.run.dir"] = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:
        pass
    return folders


@contextmanager
def failures_recorded(cfg: DictConfig, cells: list[CellAddress]):
    """A failure inside is written to each of ``cells`` (``record_failure``) and raised; one that a
    setting explains (an unusable sandbox, an unwritable folder) is raised as a one-line
    SettingError. Another run holding a cell, or a cell left incomplete, is no failure."""
    from mtad.tasks.humaneval.sandbox import SandboxUnavailable

    try:
        yield
    except (CellBusy, CellIncomplete):  # another run's cell, or a cell with its records: nothing to undo
        raise
    except SettingError:  # refused once read (a model file, the data): no folder of a cell that wrote nothing
        for cell in cells:
            if not written(cell):
                remove_unwritten(cell)
        raise
    except SandboxUnavailable as exc:
        for cell in cells:
            record_failure(cell)
        raise SettingError(str(exc)) from None
    except OSError as exc:
        for cell in cells:
            record_failure(cell)
        explained = explain_os_error(exc, folder_settings(cfg))
        if explained is None:
            raise
        raise explained from None
    except Exception:
        for cell in cells:
            record_failure(cell)
        raise
