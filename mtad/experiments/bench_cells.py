"""``make bench``: every timed generation of the bench as a cell, and the whole benchmark of one pair.

Each row of the bench (`mtad.bench.timings.Config`: a method on a decode path, at adaptive drafting
or a node budget, transformers' `generate()` or assisted generation, sampling on another target) is
the cell ``mtad-run experiment=bench method=<decoder> <overrides>`` writes
(``conf/experiment/bench.yaml``): its settings that differ from the method's defaults as
``method.<name>=<value>``, its decode path as ``pair.decode_path=<path>``, another target as
``pair.target_dtype=<dtype>``. The rows on the pair's target run in one session, alternating within
each prompt (``run_interleaved``); each other target's rows in a session of their own. The held-out
chat prompts are the short ones, CNN/DailyMail articles (at one thread) the long ones; repetitions
are the cells' samples, each seeded as the runner seeds sample ``rep`` of an example, so every row
draws the same stream. A rerun resumes the cells; a row is read back from its cell's records
(`repetitions`), as Table 2 reads its cells.

The rest of the bench times no generation of a cell: the verification-cost curve and its
calibration (single forwards; the curve is kept beside the cells, ``curve.json``, and read back by
a rerun on the same machine, so a resumed bench keeps the node budget its cells ran at), the
compile time of the first calls (`mtad.bench.timings.warm_up`) and llama.cpp on the pair's GGUF
(another engine, an optional install).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict

import torch
from omegaconf import OmegaConf

from mtad.bench.calibrate import predictions
from mtad.bench.llama_cpp import llama_cpp_on_pair
from mtad.bench.timings import (
    LONG_THREADS,
    Config,
    Repetition,
    budget_configs,
    curve_and_calibration,
    default_configs,
    environment,
    kept_configs,
    other_targets,
    pair_path,
    summarise,
    warm_up,
)
from mtad.configs import compose
from mtad.decode_stats import DecodeStats
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.registry import REFERENCE, spec
from mtad.devices import torch_threads
from mtad.experiments.interleaved import given_task_settings, plan_cells, run_interleaved
from mtad.provenance import dtype_name
from mtad.records import read_records
from mtad.runner.layout import SAMPLES, curve_path, override_dirname
from mtad.runner.session import load_pair_cached

SHORT, LONG = "chat", "cnndm"  # the tasks of the short and the long prompts


def setting_text(value) -> str:
    """A setting as a command-line value (a tuple as a list)."""
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def cell_overrides(config: Config, default_path: str) -> tuple[str, ...]:
    """The overrides of `config`'s cell beside its method: each setting that differs from the
    decoder's defaults, and our decode path where it is not the pair's (the target is the session's)."""
    defaults = asdict(spec(config.decoder).settings())
    overrides = [
        f"method.{name}={setting_text(value)}"
        for name, value in asdict(config.decoder_params).items()
        if value != defaults[name]
    ]
    if config.decode_path is not None and config.decode_path != default_path:
        overrides.append(f"pair.decode_path={config.decode_path}")
    return tuple(overrides)


def repetitions(records: list[dict], examples: list[dict]) -> list[Repetition]:
    """A cell's generations as the bench's repetitions: sample ``rep`` of every example, in the
    task's order (a resumed cell appends in the order it ran)."""
    by_id = {r["id"]: r for r in records}
    ordered = [by_id[str(e["id"])] for e in examples]
    reps = len(ordered[0]["samples"]) if ordered else 0
    return [[DecodeStats.from_dict(r["samples"][rep]["turns"][0]["stats"]) for r in ordered] for rep in range(reps)]


def timed_rows(overrides: list[str], configs: list[Config], task: str, progress: bool = True) -> dict:
    """Run (or resume) every config's cell on `task`, those of each target in one interleaved session;
    each config's repetitions read back from its cell, by label."""
    default_path = compose(overrides).pair.decode_path
    by_target: dict[str | None, list[Config]] = defaultdict(list)
    for config in configs:
        by_target[config.target_dtype].append(config)
    results = {}
    for dtype, group in by_target.items():
        run_overrides = [*overrides, *([f"pair.target_dtype={dtype}"] if dtype else [])]
        columns = {c.label: (c.decoder, cell_overrides(c, default_path)) for c in group}
        methods = list(dict.fromkeys(m for m, extra in columns.values() if not extra))
        variants = list(dict.fromkeys((m, extra) for m, extra in columns.values() if extra))
        summary = run_interleaved(run_overrides, methods, [task], progress=progress, variants=variants)
        if summary["stopped_by_time_limit"]:
            raise RuntimeError("the bench stopped before its cells were complete: rerun to continue")
        plans = plan_cells(run_overrides, methods, [task], variants)
        for label, (method, extra) in columns.items():
            plan = plans[(task, f"{method}/{override_dirname(list(extra))}" if extra else method)]
            examples = plan.task.examples(limit=plan.limit)
            results[label] = repetitions(read_records(plan.cell.directory / SAMPLES), examples)
    return results


def bench_overrides(pair_name: str, results_root: str, threads: int, **pair) -> list[str]:
    """The bench experiment's overrides: the pair (its dtypes where given), the thread count, the results root."""
    overrides = [
        "experiment=bench",
        f"pair={pair_name}",
        f"results_root={results_root}",
        f"threads={threads or 'null'}",
    ]
    return overrides + [f"pair.{k}={v}" for k, v in pair.items() if v]


def task_setting(overrides: list[str], task: str, key: str):
    """A task setting of the bench as the overrides compose it."""
    return compose(overrides).per_task[task][key]


def pair_config(overrides: list[str]) -> dict:
    """The pair config the overrides compose, resolved (what every cell of the run loads)."""
    return OmegaConf.to_container(compose(overrides).pair, resolve=True)


def short_prompts(overrides: list[str], pair) -> list[torch.Tensor]:
    """The short prompts' ids ([1, L] each), as the cells build them: for the warm-up and llama.cpp."""
    plan = next(iter(plan_cells(overrides, [REFERENCE], [SHORT]).values()))
    plan.task.bind_pair(pair)
    examples = plan.task.examples(limit=plan.limit)
    return [torch.tensor([plan.task.build_prompt(e, pair.tokenizer, history=())]) for e in examples]


def long_rows(overrides: list[str], configs: list[Config], progress: bool) -> dict | None:
    """Our fast-path rows again on the CNN/DailyMail articles at `LONG_THREADS` thread (None for a limit of 0)."""
    if not task_setting(overrides, LONG, "limit"):
        return None
    ours = [c for c in configs if c.impl == "ours" and c.path == "fast" and not c.target_dtype]
    results = timed_rows([*overrides, f"threads={LONG_THREADS}"], ours, LONG, progress)
    prompt_tokens = [g.prompt_tokens for g in next(iter(results.values()))[0]]
    return {
        "prompts": len(prompt_tokens),
        "mean_prompt_tokens": sum(prompt_tokens) / len(prompt_tokens),
        "threads": LONG_THREADS,
        "rows": summarise(ours, results),
    }


def pair_configs(pair, gamma: int, compiled: bool, sampling_targets: tuple[str, ...], only: str | None) -> list:
    """The rows `pair` runs (`default_configs`; `only`: label substrings to keep): assisted generation
    with a model draft only, sampling on each of `sampling_targets` other than the pair's own."""
    own = dtype_name(pair.target)
    others = tuple(d for d in sampling_targets if d != own)
    assisted = not reads_target_features(pair.draft)
    return kept_configs(default_configs(gamma, compiled, assisted, target_dtypes=others, pair_dtype=own), only)


def measure_pair(
    pair_name: str,
    *,
    prompts: int | None,
    max_new_tokens: int | None,
    reps: int | None,
    gamma: int,
    threads: int,
    target_dtype: str | None,
    draft_dtype: str | None,
    only: str | None,
    compiled: bool,
    curve_dtypes: tuple[str, ...],
    curve_reps: int,
    sampling_targets: tuple[str, ...],
    llama_cpp: bool,
    long_prompts: int | None,
    notes: list[str],
    results_root: str,
    progress: bool = True,
    log=print,
) -> dict:
    """The whole benchmark of pair `pair_name` -> the payload `write_report` renders: the curve over
    `curve_dtypes` and its calibration; every row (`pair_configs`, and `budget_configs` at the calibrated
    node budget) as cells under `results_root` on the short and the long prompts (`prompts`,
    `long_prompts`, `max_new_tokens`, `reps`: None takes conf/experiment/bench.yaml's); llama.cpp on the
    pair's GGUF; the predicted speed-ups and the wall time. `threads` (0: torch's default) holds for the
    whole run. Other defaults: scripts/bench.py's."""
    with torch_threads(threads):  # the whole run, the pair's loading included
        started = time.perf_counter()
        run = bench_overrides(pair_name, results_root, threads, target_dtype=target_dtype, draft_dtype=draft_dtype)
        short, long = (
            run + given_task_settings([task], limit=limit, max_new_tokens=max_new_tokens, samples_per_example=reps)
            for task, limit in ((SHORT, prompts), (LONG, long_prompts))
        )
        max_new_tokens, reps = (task_setting(short, SHORT, k) for k in ("max_new_tokens", "samples_per_example"))
        pair = load_pair_cached(pair_config(short))
        prompt_ids = short_prompts(short, pair)
        configs = pair_configs(pair, gamma, compiled, sampling_targets, only)
        targets = other_targets(pair, {*curve_dtypes, *(c.target_dtype for c in configs if c.target_dtype)})
        stored = curve_path(results_root, compose(short).experiment_name, pair_name)
        curve, calibrated = curve_and_calibration(pair, curve_dtypes, curve_reps, targets, gamma, stored, log)
        if calibrated and calibrated.get("node_budget"):
            configs += kept_configs(budget_configs(gamma, calibrated["node_budget"]["nodes"]), only)
        warm = warm_up(configs, pair.target, pair.draft, prompt_ids, 8, max_new_tokens, log=log, targets=targets)
        results = timed_rows(short, configs, SHORT, progress)
        payload = {
            "setup": {"pair": pair_name, "prompts": len(prompt_ids), "max_new_tokens": max_new_tokens, "reps": reps}
            | {"gamma": gamma, "threads": threads, "default_path": pair_path(pair), "results_root": results_root},
            "environment": environment(pair.target, pair.draft, pair.config),
            "rows": summarise(configs, results),
            "warm_up": warm,
            "curve": curve,
            "llama_cpp": llama_cpp_on_pair(pair, prompt_ids, max_new_tokens, reps, skip=not llama_cpp, only=only),
            "long": long_rows(long, configs, progress),
            "notes": list(notes),
            "calibration": calibrated,
        }
        own = dtype_name(pair.target)
        return payload | {"predicted": predictions(payload, gamma, own), "wall_s": time.perf_counter() - started}
