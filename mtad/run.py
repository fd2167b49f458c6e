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
The process exits non-zero when a cell failed or stayed incomplete.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from mtad.runner import provenance  # first: the code state is read when the process loads its code
from mtad import configs
from mtad.runner.aggregate import cell_metrics, summary
from mtad.runner.checks import (
    SettingError,
    build_task,
    check_method,
    check_override_keys,
    check_run_settings,
    check_writable,
    explain_os_error,
    task_settings,
)
from mtad.runner.devices import load_pair_cached, model_devices, peak_memory, reset_peak_memory
from mtad.runner.layout import (
    ENV,
    ERROR,
    METRICS,
    SAMPLES,
    Cell,
    cell_identity,
    check_identity,
    is_complete,
    override_dirname,
    read_json,
    resolve_cell,
)
from mtad.runner.loop import CellRunner, needs_rescoring, rescore
from mtad.runner import records
from mtad.runner.lock import CellBusy, cell_lock
from mtad.runner.offline import settle_hub_access
from mtad.runner.records import derive_seed, read_finished, write_json
from mtad.tasks.humaneval.sandbox import SandboxUnavailable

log = logging.getLogger("mtad.run")

CONF_DIR = str(configs.conf_dir())  # $MTAD_CONF_DIR, the checkout's conf/, or the wheel's copy
MISSING_DATA_MODES = ("fail", "mark")
git_commit = provenance.git_commit  # the code state read at start-up

__all__ = [
    "Cell",
    "CellIncomplete",
    "derive_seed",
    "main",
    "override_dirname",
    "read_finished",
    "run_cell",
    "check_identity",
    "git_commit",
]


class CellIncomplete(RuntimeError):
    """The cell ran but some examples lack a score (metrics.json says why); exit non-zero."""


@dataclass
class Plan:
    """A cell's checked settings: everything decided before data or models are touched."""

    cell: Cell
    task: object
    limit: int | None
    options: dict
    method_params: dict
    identity: dict


def plan_cell(cfg: DictConfig, cell: Cell) -> Plan:
    """Check every setting of the cell; nothing is read or written yet."""
    check_run_settings(cfg)
    if cfg.missing_data not in MISSING_DATA_MODES:
        raise SettingError(f"missing_data must be one of {', '.join(MISSING_DATA_MODES)}, got {cfg.missing_data!r}")
    options, limit = task_settings(cfg, cell.task)
    method_params = check_method(cell.method, OmegaConf.to_container(cfg.method, resolve=True))
    task = build_task(cell.task, cfg.data_root, options)
    check_writable(cell.directory, "results_root")
    identity = cell_identity(cfg, cell, options)
    check_identity(cell.directory, identity)
    return Plan(cell, task, limit, options, method_params, identity)


def run_cell(cfg: DictConfig, plan: Plan, logger) -> dict:
    import torch
    from tqdm import tqdm

    from mtad.decoding import get_decoder
    from mtad.metrics.energy import make_energy_meter

    cell, task = plan.cell, plan.task
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    examples = task.examples(limit=plan.limit)
    example_ids = [str(e["id"]) for e in examples]
    samples_path = cell.directory / SAMPLES
    finished = read_finished(samples_path)
    done_ids = {r["id"] for r in finished}
    pending = [e for e in examples if str(e["id"]) not in done_ids]
    to_rescore = [r for r in needs_rescoring(task, finished) if r["id"] in set(example_ids)]
    log.info(
        "cell %s: %d examples, %d already done, %d to run%s",
        cell.name,
        len(examples),
        len(examples) - len(pending),
        len(pending),
        f", {len(to_rescore)} to score again" if to_rescore else "",
    )
    if not pending and not to_rescore and is_complete(cell.directory):
        metrics = read_json(cell.directory / METRICS)
        if metrics.get("examples_planned") == len(example_ids):
            log.info("cell %s is complete: nothing to do", cell.name)
            return metrics

    pair = load_pair_cached(OmegaConf.to_container(cfg.pair, resolve=True))
    task.bind_pair(pair)
    decoder = get_decoder(
        cell.method, target=pair.target, draft=pair.draft, decode_path=pair.decode_path, **plan.method_params
    )
    devices = model_devices(pair.target, pair.draft)
    meter, energy_reason = make_energy_meter(cfg.energy.meter, devices)
    if energy_reason:
        log.info("energy: %s", energy_reason)
    previous = read_json(cell.directory / ENV)
    git_runs = previous.get("git_runs") or ([previous["git"]] if previous.get("git") else [])
    if (pending or to_rescore) and provenance.PROCESS_GIT not in git_runs:
        git_runs = git_runs + [provenance.PROCESS_GIT]  # this process writes records into the cell
    env = {
        **provenance.environment_record(devices=devices, models=(pair.target, pair.draft)),
        "seed": cfg.seed,
        "pair_name": getattr(pair, "name", None),
        "cell": plan.identity,
        "energy_meter": cfg.energy.meter,
        "energy_missing_reason": energy_reason,
        "started": _now(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "git_runs": git_runs,
    }
    if not (pending or to_rescore) and previous.get("git"):
        env["git"] = previous["git"]  # nothing generated now: the records' code state stands
    cell.directory.mkdir(parents=True, exist_ok=True)
    write_json(cell.directory / ENV, env)

    if to_rescore:
        rescored = rescore(task, {str(e["id"]): e for e in examples}, to_rescore)
        records.rewrite_records(samples_path, finished)
        log.info("cell %s: %d of %d unscored answer(s) scored now", cell.name, rescored, len(to_rescore))
    runner = CellRunner(cfg, pair, task, decoder, meter)
    if pending and cfg.warmup_tokens:
        runner.warm_up(pending[0])  # untimed: first-call allocations and kernel selection
    reset_peak_memory(devices)
    for example in tqdm(pending, desc=cell.name, disable=not cfg.progress, dynamic_ncols=True):
        record = runner.run_example(example)
        records.append_record(samples_path, record)
        finished.append(record)
        logger.log_example(
            example_ids.index(record["id"]),
            {
                "scores": record["samples"][0]["scores"],
                "new_tokens": record["new_tokens"],
                "decode_seconds": record["decode_seconds"],
            },
        )

    metrics = {
        "cell": cell.name,
        "experiment": cell.experiment,
        "pair": cell.pair,
        "task": cell.task,
        "method": cell.method,
        "overrides": cell.overrides,
        **cell_metrics(task, finished, example_ids),
        **peak_memory(devices),
        "machine": env["machine"],
        "dtype": env["dtype"],
        "seed": cfg.seed,
        "finished": _now(),
    }
    write_json(cell.directory / METRICS, metrics)
    (cell.directory / ERROR).unlink(missing_ok=True)  # an earlier failure is now resolved
    write_json(cell.directory / ENV, {**env, "finished": metrics["finished"]})
    logger.log_metrics(metrics)
    log.info("cell %s: %s", cell.name, summary(metrics))
    if metrics["status"] != "complete" and metrics["examples_unscored"]:
        raise CellIncomplete(f"cell {cell.name} is incomplete: {metrics['incomplete_reason']}")
    return metrics


def mark_missing(cell: Cell, exc: Exception) -> dict:
    """``missing_data=mark``: record that the cell's data is absent (why, and the command that
    gets it) instead of failing; a complete cell is left as it is."""
    metrics = {
        "cell": cell.name,
        "experiment": cell.experiment,
        "pair": cell.pair,
        "task": cell.task,
        "method": cell.method,
        "overrides": cell.overrides,
        "status": "missing",
        "missing_reason": str(exc),
        "finished": _now(),
    }
    if is_complete(cell.directory):
        log.warning("cell %s: data missing (%s); its complete results are left as they are", cell.name, exc)
        return read_json(cell.directory / METRICS)
    log.warning("cell %s: marked missing: %s", cell.name, exc)
    cell.directory.mkdir(parents=True, exist_ok=True)
    write_json(cell.directory / METRICS, metrics)
    (cell.directory / ERROR).unlink(missing_ok=True)
    return metrics


def record_failure(cell: Cell) -> None:
    """error.txt into the cell that failed, never into a complete one (its results stand)."""
    if is_complete(cell.directory):
        log.error("cell %s failed; its earlier complete results are left as they are", cell.name)
        return
    try:
        cell.directory.mkdir(parents=True, exist_ok=True)
        (cell.directory / ERROR).write_text(f"{_now()}\n{traceback.format_exc()}")
        log.error("cell %s failed (traceback in %s)", cell.name, cell.directory / ERROR)
    except OSError as exc:
        log.error("cell %s failed; could not write %s (%s)", cell.name, cell.directory / ERROR, exc.strerror)


def folder_settings(cfg: DictConfig) -> dict[str, Path]:
    """The settings that choose where files go, for one-line permission errors."""
    from mtad import data
    from mtad.models.gguf_cache import cache_root

    folders = {
        "results_root": Path(cfg.results_root),
        "MTAD_CACHE": cache_root(),
        "data_root (or MTAD_DATA)": data.data_root(cfg.data_root),
    }
    try:
        folders["hydra.run.dir"] = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:
        pass
    return folders


def run_with_logger(cfg: DictConfig) -> dict:
    """The task_wrapper pattern: the logger always finishes; a failure is recorded, then raised.

    In a multirun Hydra records the exception for this job and goes on with the other cells.
    """
    from mtad.data import DataMissingError

    cell = resolve_cell(cfg, HydraConfig.get())
    plan = plan_cell(cfg, cell)  # bad settings stop here: nothing loaded, nothing written
    logger = hydra.utils.instantiate(
        cfg.logger,
        name=cell.name,
        run_config=OmegaConf.to_container(cfg, resolve=True),
        _recursive_=False,
        _convert_="all",
    )  # the config is data, not objects
    failed = True
    try:
        with cell_lock(cell.directory, cell.name):  # one writer per cell
            metrics = run_cell(cfg, plan, logger)
        failed = False
        return metrics
    except CellBusy:
        raise  # another run writes this cell: nothing here is failed
    except CellIncomplete:
        raise  # metrics.json holds the reason; the cell is not failed, it is to be finished
    except SandboxUnavailable as exc:
        record_failure(cell)
        raise SettingError(str(exc)) from None
    except DataMissingError as exc:
        if cfg.missing_data == "mark":
            failed = False
            return mark_missing(cell, exc)
        record_failure(cell)
        raise SettingError(str(exc)) from None
    except OSError as exc:
        record_failure(cell)
        explained = explain_os_error(exc, folder_settings(cfg))
        if explained is None:
            raise
        raise explained from None
    except Exception:
        record_failure(cell)
        raise
    finally:
        logger.finish(failed=failed)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def main() -> None:
    """``mtad-run``: the command-line overrides' keys are checked first (Hydra's own message for an
    unknown key does not list the valid ones), then Hydra runs the cell(s)."""
    problem = check_override_keys(sys.argv[1:])
    if problem:
        sys.exit(f"mtad-run: {problem}")
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    settle_hub_access()
    hydra_main()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    start = time.perf_counter()
    try:
        run_with_logger(cfg)
    except (SettingError, CellIncomplete) as exc:
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.RUN:  # one line, no traceback; a multirun records it and goes on
            log.error("%s", exc)
            sys.exit(1)
        raise
    log.info("done in %.1f s", time.perf_counter() - start)


if __name__ == "__main__":
    main()
