"""Several methods on the same prompts, alternating within each prompt, into ordinary cells.

``mtad-run`` runs one cell (one method) after another, so a change in machine load between
cells lands on one method only. For paired comparisons of speed this runner takes the prompts
one at a time and runs every method on it before the next prompt, rotating the order of the
methods from prompt to prompt; tasks are interleaved too (one prompt of each in turn), so a run
stopped early has a balanced share of every task.

Each (task, method) is the cell ``mtad-run experiment=<e> task=<t> method=<m>`` would write:
same directory, identity, per-sample seeds (so the same tokens), records and metrics; only the
order in which generations ran differs. A variant, a method with overrides of its own (e.g.
``method.stop_below=0.03`` or the run-level ``stop_rule=block``, which each cell's own config
carries), takes its turn beside the methods, into the cell ``mtad-run`` writes with those overrides
added (``<method>/<overrides>``, its key in the run). The run resumes like ``mtad-run``: a rerun
skips every (prompt, method) already in its cell's ``samples.jsonl`` and scores again the answers
a task could not score before. ``max_minutes`` stops starting new prompts after that long; the
cells are then ``incomplete`` and a rerun continues them. Each cell's lifecycle (resume, records, metrics,
env.json, error.txt, ``missing_data``) is ``mtad.runner.cell``'s and the resources every cell
shares (pair, decoders, devices, energy, warm-up) one ``mtad.runner.session.PairSession``'s, as
for ``mtad-run``, whose single cell is this with one method and one task; no tracker
run is opened (one per cell cannot be open at once), so ``logger`` is ignored here.

    from mtad.experiments.interleaved import run_interleaved
    run_interleaved(["experiment=claims"], methods=["sampling", "sps", "mtad", "mmtad"], tasks=["chat", "cnndm"],
                    variants=[("mtad", ("method.stop_below=0.03",))])
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from itertools import zip_longest

from omegaconf import DictConfig

from mtad.configs import compose
from mtad.runner.cell import CellRecords, CellSettings, failures_recorded, missing_or_fail, plan_cell
from mtad.runner.layout import CellAddress, cell_directory, override_dirname
from mtad.runner.lock import cell_lock
from mtad.runner.session import PairSession

log = logging.getLogger("mtad.interleaved")

TIMING = "interleaved: every method on a prompt before the next prompt, order rotated"


Variant = tuple[str, tuple[str, ...]]  # a method and the overrides of its own cells


def columns(methods: list[str], variants: list[Variant] = ()) -> dict[str, Variant]:
    """Every method and variant that takes a turn on a prompt, by its key in the run: a method by its
    name, a variant by ``<method>/<overrides>`` (its cells' directory below the task)."""
    found = {m: (m, ()) for m in methods}
    for method, extra in variants:
        if any(o.lstrip("+~").startswith(("task", "per_task", "method=")) for o in extra):
            raise ValueError(f"variant of {method}: {list(extra)}: a variant sets the method or the run, not the task")
        if not override_dirname(list(extra)):
            raise ValueError(f"variant of {method}: {list(extra)} generate what {method} does (no cell of its own)")
        found[f"{method}/{override_dirname(list(extra))}"] = (method, tuple(extra))
    return found


def given_task_settings(tasks, **given) -> list[str]:
    """The overrides of the task settings a command was given (None: the experiment's), each task's:
    ``per_task.<task>.<key>=<value>``."""
    return [f"per_task.{t}.{k}={v}" for t in tasks for k, v in given.items() if v is not None]


def cell_configs(
    overrides: list[str], methods: list[str], tasks: list[str], variants: list[Variant] = ()
) -> dict[tuple[str, str], DictConfig]:
    """The config of every (task, key) cell (``columns``), equal to composing ``overrides + the
    variant's + [task=t, method=m]`` for each; composed once per method or variant and once per
    further task (a compose takes ~0.5 s), since the cells of one experiment differ only in their
    ``task`` node and what the method or variant sets (never the task: ``columns``)."""
    keys = columns(methods, variants)
    first = next(iter(keys))
    by_key = {k: compose([*overrides, *extra, f"task={tasks[0]}", f"method={m}"]) for k, (m, extra) in keys.items()}
    task_nodes = {
        t: (by_key[first] if t == tasks[0] else compose([*overrides, f"task={t}", f"method={methods[0]}"])).task
        for t in tasks
    }
    cfgs = {}
    for t in tasks:
        for k in keys:
            cfg = by_key[k].copy()
            cfg.task = task_nodes[t]
            cfgs[(t, k)] = cfg
    return cfgs


def schedule(examples: dict[str, list[dict]]) -> list[tuple[str, dict]]:
    """(task, example) pairs, one example of each task in turn: [t1 e0, t2 e0, t1 e1, ...]."""
    rounds = zip_longest(*([(task, e) for e in exs] for task, exs in examples.items()))
    return [item for round_ in rounds for item in round_ if item is not None]


def rotated(methods: list[str], k: int) -> list[str]:
    """The method order for the k-th prompt: every method takes every position equally often."""
    k %= len(methods)
    return methods[k:] + methods[:k]


def plan_cells(
    overrides: list[str], methods: list[str], tasks: list[str], variants: list[Variant] = ()
) -> dict[tuple[str, str], CellSettings]:
    """Every (task, key) cell's checked settings, in the directory ``mtad-run`` would use for its
    method and overrides (a variant's added to the run's)."""
    keys = columns(methods, variants)
    plans = {}
    for (t, k), cfg in cell_configs(overrides, methods, tasks, variants).items():
        method, extra = keys[k]
        command_line = [*overrides, *extra]
        overrides_dir = override_dirname(command_line)
        directory = cell_directory(cfg.results_root, cfg.experiment_name, cfg.pair.name, t, method, overrides_dir)
        cell = CellAddress(cfg.experiment_name, cfg.pair.name, t, method, overrides_dir, directory, tuple(command_line))
        plans[(t, k)] = plan_cell(cfg, cell)
    return plans


def run_interleaved(
    overrides: list[str],
    methods: list[str],
    tasks: list[str],
    max_minutes: float | None = None,
    progress: bool = True,
    variants: list[Variant] = (),
) -> dict:
    """Run ``methods`` and ``variants`` ((method, overrides) pairs) x ``tasks`` of the experiment
    named in ``overrides``; returns a summary with the cells' metrics, keyed (task, method or
    ``<method>/<overrides>``), and whether the time limit stopped the run."""
    if not methods or not tasks:
        raise ValueError("run_interleaved needs at least one method and one task")
    plans = plan_cells(overrides, methods, tasks, variants)  # bad settings stop here: nothing loaded, nothing written
    keys = list(columns(methods, variants))
    first = plans[(tasks[0], keys[0])].cfg
    with failures_recorded(first, [p.cell for p in plans.values()]), ExitStack() as held:
        for plan in plans.values():  # one writer per cell: every cell of the run is held until it ends
            held.enter_context(cell_lock(plan.cell.directory, plan.cell.name))
        return _run_held(plans, keys, tasks, max_minutes, progress)


def _open_runs(plans: dict[tuple[str, str], CellSettings], methods, tasks) -> dict[tuple[str, str], CellRecords]:
    """Every cell's resume state, each task's examples read once; a task whose data is absent is
    marked missing (``missing_data=mark``) and left out, or fails the run."""
    from mtad.data import DataMissingError

    runs = {}
    for t in tasks:
        task_plans = {m: plans[(t, m)] for m in methods}
        try:
            examples = task_plans[methods[0]].task.examples(limit=task_plans[methods[0]].limit)
        except DataMissingError as exc:
            missing_or_fail(task_plans[methods[0]].cfg, [p.cell for p in task_plans.values()], exc)
            continue
        for m, plan in task_plans.items():
            runs[(t, m)] = CellRecords(plan, examples=examples)
    return runs


def _run_held(plans, methods, tasks, max_minutes, progress) -> dict:
    """Every prompt of ``tasks``, each of ``methods`` (the run's keys: methods and variants) in turn."""
    from tqdm import tqdm

    first = plans[(tasks[0], methods[0])].cfg
    runs = _open_runs(plans, methods, tasks)
    tasks = [t for t in tasks if (t, methods[0]) in runs]
    if not tasks:
        return {"metrics": {}, "stopped_by_time_limit": False, "minutes": 0.0}
    session = PairSession(first, runs)
    session.open()

    prompts = schedule({t: runs[(t, methods[0])].examples for t in tasks})
    pending = [(t, e) for t, e in prompts if any(str(e["id"]) not in runs[(t, m)].done for m in methods)]
    log.info(
        "interleaved %s: %d prompts x %d methods, %d prompts to run",
        first.experiment_name,
        len(prompts),
        len(methods),
        len(pending),
    )
    task, example = pending[0] if pending else (None, None)
    session.warm_up(example, [(task, m) for m in methods])
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
            if str(example["id"]) not in runs[(t, m)].done:
                session.run((t, m), example)
    metrics = session.close(timing=TIMING)
    return {"metrics": metrics, "stopped_by_time_limit": stopped, "minutes": (time.perf_counter() - start) / 60}
