"""Several methods on the same prompts, alternating within each prompt, into ordinary cells.

``mtad-run`` runs one cell (one method) after another, so a change in machine load between
cells lands on one method only. For paired comparisons of speed this runner takes the prompts
one at a time and runs every method on it before the next prompt, rotating the order of the
methods from prompt to prompt; tasks are interleaved too (one prompt of each in turn), so a run
stopped early has a balanced share of every task.

Each (task, method) is the cell ``mtad-run experiment=<e> task=<t> method=<m>`` would write:
same directory, identity, per-sample seeds (so the same tokens), records and metrics; only the
order in which generations ran differs. The run resumes like ``mtad-run``: a rerun skips every
(prompt, method) already in its cell's ``samples.jsonl``. ``max_minutes`` stops starting new
prompts after that long; the cells are then ``incomplete`` and a rerun continues them.

    from mtad.interleaved import run_interleaved
    run_interleaved(["experiment=claims"], methods=["sampling", "sps", "mtad", "mmtad"], tasks=["chat", "cnndm"])
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from itertools import zip_longest

from omegaconf import DictConfig, OmegaConf

from mtad.runner import provenance  # first: the code state is read when the process loads its code
from mtad import configs
from mtad.runner.aggregate import cell_metrics
from mtad.runner.checks import build_task, check_method, task_settings
from mtad.runner.devices import load_pair_cached, model_devices, peak_memory, reset_peak_memory
from mtad.runner.layout import ENV, METRICS, SAMPLES, Cell, cell_directory, cell_identity, check_identity, read_json
from mtad.runner.loop import CellRunner
from mtad.runner.lock import cell_lock
from mtad.runner.records import append_record, read_finished, write_json

CONF_DIR = str(configs.conf_dir())  # $MTAD_CONF_DIR, the checkout's conf/, or the wheel's copy

log = logging.getLogger("mtad.interleaved")


def compose(overrides: list[str]) -> DictConfig:
    """The runner's config (conf/config.yaml) with Hydra overrides, as ``mtad-run`` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def cell_configs(overrides: list[str], methods: list[str], tasks: list[str]) -> dict[tuple[str, str], DictConfig]:
    """The config of every (task, method) cell, equal to composing ``overrides + [task=t, method=m]``
    for each; composed once per method and once per further task (a compose takes ~0.5 s), since
    the cells of one experiment differ only in their ``task`` and ``method`` nodes."""
    by_method = {m: compose([*overrides, f"task={tasks[0]}", f"method={m}"]) for m in methods}
    task_nodes = {
        t: (by_method[methods[0]] if t == tasks[0] else compose([*overrides, f"task={t}", f"method={methods[0]}"])).task
        for t in tasks
    }
    cfgs = {}
    for t in tasks:
        for m in methods:
            cfg = by_method[m].copy()
            cfg.task = task_nodes[t]
            cfgs[(t, m)] = cfg
    return cfgs


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def schedule(examples: dict[str, list[dict]]) -> list[tuple[str, dict]]:
    """(task, example) pairs, one example of each task in turn: [t1 e0, t2 e0, t1 e1, ...]."""
    rounds = zip_longest(*([(task, e) for e in exs] for task, exs in examples.items()))
    return [item for round_ in rounds for item in round_ if item is not None]


def rotated(methods: list[str], k: int) -> list[str]:
    """The method order for the k-th prompt: every method takes every position equally often."""
    k %= len(methods)
    return methods[k:] + methods[:k]


class _Cell:
    """One (task, method) cell: its config, directory, runner and finished records."""

    def __init__(self, cfg, task_name, method, task, pair, meter, energy_reason):
        from mtad.decoding import get_decoder

        self.cfg, self.method = cfg, method
        self.cell = Cell(
            cfg.experiment_name,
            cfg.pair.name,
            task_name,
            method,
            "",
            cell_directory(cfg.results_root, cfg.experiment_name, cfg.pair.name, task_name, method),
        )
        options, _ = task_settings(cfg, task_name)
        self.identity = cell_identity(cfg, self.cell, options)
        check_identity(self.cell.directory, self.identity)
        self.cell.directory.mkdir(parents=True, exist_ok=True)
        self.samples_path = self.cell.directory / SAMPLES
        self.records = read_finished(self.samples_path)
        self.done = {r["id"] for r in self.records}
        params = check_method(method, OmegaConf.to_container(cfg.method, resolve=True))
        decoder = get_decoder(method, target=pair.target, draft=pair.draft, decode_path=pair.decode_path, **params)
        self.runner = CellRunner(cfg, pair, task, decoder, meter)
        self.energy_reason = energy_reason
        self.wrote = False  # records appended by this process
        previous = read_json(self.cell.directory / ENV)
        self.git_runs = previous.get("git_runs") or ([previous["git"]] if previous.get("git") else [])

    def write_env(self, env: dict, wrote: bool, **extra) -> None:
        if wrote and provenance.PROCESS_GIT not in self.git_runs:
            self.git_runs = self.git_runs + [provenance.PROCESS_GIT]  # this process wrote records into the cell
        write_json(
            self.cell.directory / ENV,
            {
                **env,
                "seed": self.cfg.seed,
                "cell": self.identity,
                "energy_meter": self.cfg.energy.meter,
                "energy_missing_reason": self.energy_reason,
                "git_runs": self.git_runs,
                "config": OmegaConf.to_container(self.cfg, resolve=True),
                **extra,
            },
        )

    def write_metrics(self, task, example_ids: list[str], env: dict, devices) -> dict:
        metrics = {
            "cell": self.cell.name,
            "experiment": self.cell.experiment,
            "pair": self.cell.pair,
            "task": self.cell.task,
            "method": self.method,
            "overrides": "",
            **cell_metrics(task, self.records, example_ids),
            **peak_memory(devices),
            "machine": env["machine"],
            "dtype": env["dtype"],
            "seed": self.cfg.seed,
            "finished": _now(),
            "timing": "interleaved: every method on a prompt before the next prompt, order rotated",
        }
        write_json(self.cell.directory / METRICS, metrics)
        return metrics


def run_interleaved(
    overrides: list[str], methods: list[str], tasks: list[str], max_minutes: float | None = None, progress: bool = True
) -> dict:
    """Run ``methods`` x ``tasks`` of the experiment named in ``overrides``; returns a summary
    with the cells' metrics and whether the time limit stopped the run."""
    import torch

    if not methods or not tasks:
        raise ValueError("run_interleaved needs at least one method and one task")
    cfgs = cell_configs(overrides, methods, tasks)
    first = cfgs[(tasks[0], methods[0])]
    if first.threads:
        torch.set_num_threads(int(first.threads))
    task_objs, examples = {}, {}
    for t in tasks:  # validate every task and load its examples before the model
        options, limit = task_settings(cfgs[(t, methods[0])], t)
        task_objs[t] = build_task(t, first.data_root, options)
        examples[t] = task_objs[t].examples(limit=limit)
    held = ExitStack()  # one writer per cell: every cell of the run is held until it ends
    for (t, m), cfg in cfgs.items():
        directory = cell_directory(cfg.results_root, cfg.experiment_name, cfg.pair.name, t, m)
        held.enter_context(cell_lock(directory, f"{cfg.experiment_name}/{cfg.pair.name}/{t}/{m}"))
    with held:
        return _run_held(cfgs, methods, tasks, task_objs, examples, max_minutes, progress)


def _run_held(cfgs, methods, tasks, task_objs, examples, max_minutes, progress) -> dict:
    from tqdm import tqdm

    from mtad.metrics.energy import make_energy_meter

    first = cfgs[(tasks[0], methods[0])]
    pair = load_pair_cached(OmegaConf.to_container(first.pair, resolve=True))
    devices = model_devices(pair.target, pair.draft)
    meter, energy_reason = make_energy_meter(first.energy.meter, devices)
    for task in task_objs.values():
        task.bind_pair(pair)
    cells = {
        key: _Cell(cfg, key[0], key[1], task_objs[key[0]], pair, meter, energy_reason) for key, cfg in cfgs.items()
    }
    env = {
        **provenance.environment_record(devices=devices, models=(pair.target, pair.draft)),
        "pair_name": getattr(pair, "name", None),
        "started": _now(),
    }
    for cell in cells.values():
        cell.write_env(env, wrote=False)

    plan = schedule(examples)
    pending = [(t, e) for t, e in plan if any(str(e["id"]) not in cells[(t, m)].done for m in methods)]
    log.info(
        "interleaved %s: %d prompts x %d methods, %d prompts to run",
        first.experiment_name,
        len(plan),
        len(methods),
        len(pending),
    )
    if pending and first.warmup_tokens:
        for m in methods:  # untimed: first-call allocations and kernel selection, per decoder
            cells[(pending[0][0], m)].runner.warm_up(pending[0][1])
    reset_peak_memory(devices)
    start, stopped = time.perf_counter(), False
    for k, (t, example) in enumerate(
        tqdm(pending, disable=not progress, desc=first.experiment_name, dynamic_ncols=True)
    ):
        if max_minutes is not None and time.perf_counter() - start > 60 * max_minutes:
            stopped = True
            log.warning(
                "time limit of %s min reached after %d of %d prompts; rerun to continue", max_minutes, k, len(pending)
            )
            break
        for m in rotated(methods, k):
            cell = cells[(t, m)]
            if str(example["id"]) in cell.done:
                continue
            record = cell.runner.run_example(example)
            append_record(cell.samples_path, record)
            cell.wrote = True
            cell.records.append(record)
            cell.done.add(record["id"])
    metrics = {}
    for (t, m), cell in cells.items():
        ids = [str(e["id"]) for e in examples[t]]
        metrics[(t, m)] = cell.write_metrics(task_objs[t], ids, env, devices)
        cell.write_env(env, wrote=cell.wrote, finished=metrics[(t, m)]["finished"])
    return {"metrics": metrics, "stopped_by_time_limit": stopped, "minutes": (time.perf_counter() - start) / 60}
