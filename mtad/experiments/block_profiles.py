"""``make profile``: where a decoding block's time goes, every study method as cells.

At each thread count the experiment ``profile`` (``conf/experiment/profile.yaml``) runs every study
method (with ``adaptive``: each drafting method's adaptive variant, ``MethodSpec.adaptive_override``)
on short prompts (held-out chat) and long ones (CNN/DailyMail articles), methods alternating within
each prompt (``run_interleaved``), into the cells ``<results_root>/profile_threads<n>/<pair>/<task>/
<method>[/<overrides>]``; ``profile: true`` makes each generation's record hold its blocks' split by
phase (``decoding.phases.Profile.block_record``). The rows (`mtad.bench.block_profile.BlockProfile`,
one per method, thread count and prompt group) are read from those records; a rerun resumes the cells.
"""

from __future__ import annotations

import time

from mtad.bench.block_profile import BlockProfile
from mtad.decoding.registry import specs
from mtad.experiments.interleaved import given_task_settings, plan_cells, run_interleaved
from mtad.provenance import dtype_name, environment_record
from mtad.records import read_records
from mtad.runner.layout import SAMPLES
from mtad.runner.session import load_pair_cached

GROUPS = {"chat": "short", "cnndm": "long"}  # task -> the profile's prompt group


def columns(adaptive: bool) -> tuple[list[str], list[tuple[str, tuple[str, ...]]]]:
    """The study methods, and with `adaptive` each drafting method's adaptive variant in its place."""
    variants = [(m, (s.adaptive_override,)) for m, s in specs().items() if adaptive and s.adaptive_override]
    return [m for m in specs() if m not in dict(variants)], variants


def profile_rows(plans: dict, threads: int) -> list[dict]:
    """One row per (method, prompt group) of a thread count, summed over its cells' generations."""
    rows = []
    for (task, key), plan in plans.items():
        found = BlockProfile(plan.cell.method, threads, GROUPS[task])
        for record in read_records(plan.cell.directory / SAMPLES):
            for turn in (t for s in record["samples"] for t in s["turns"]):
                block = turn["profile"]
                found.add(
                    block["seconds"],
                    block["target_widths"],
                    block["blocks"],
                    len(turn["token_ids"]),
                    turn["prompt_tokens"],
                )
        rows.append(found.row())
    return rows


def run_profile(
    pair_name: str,
    *,
    prompts: int | None,
    max_new_tokens: int | None,
    threads: tuple[int, ...],
    adaptive: bool,
    results_root: str,
    progress: bool = True,
) -> dict:
    """The profile of pair `pair_name` -> the payload `write_profile` stores: its cells run (or
    resumed) at each thread count, the rows read from them, the setup and the machine."""
    started = time.perf_counter()
    methods, variants = columns(adaptive)
    base = ["experiment=profile", f"pair={pair_name}", f"results_root={results_root}"]
    base += given_task_settings(GROUPS, limit=prompts, max_new_tokens=max_new_tokens)
    rows, plans = [], {}
    for n in threads:
        overrides = [*base, f"threads={n}", f"experiment_name=profile_threads{n}"]
        summary = run_interleaved(overrides, methods, list(GROUPS), progress=progress, variants=variants)
        if summary["stopped_by_time_limit"]:
            raise RuntimeError("the profile stopped before its cells were complete: rerun to continue")
        plans = plan_cells(overrides, methods, list(GROUPS), variants)
        rows += profile_rows(plans, n)
    return {"setup": setup_record(plans, threads, started), "rows": rows}


def setup_record(plans: dict, threads: tuple[int, ...], started: float) -> dict:
    """The profile's setup: the pair, prompts and tokens per group, thread counts, each method's
    settings as its cells ran them, the machine and the dtypes."""
    from omegaconf import OmegaConf

    first = next(iter(plans.values()))
    pair = load_pair_cached(OmegaConf.to_container(first.cfg.pair, resolve=True))
    env = environment_record([pair.target, pair.draft])
    short = [p for (t, _), p in plans.items() if t == "chat"]
    return {
        "pair": first.cfg.pair.name,
        "prompts_per_group": first.limit,
        "max_new_tokens": first.task.max_new_tokens,
        "threads": list(threads),
        "methods": {
            p.cell.method: {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.method_params.items()}
            for p in short
        },
        "machine": f"{env['machine']}, {'/'.join(env.get('cpu_isa') or []) or 'no AVX2'}",
        "target_dtype": dtype_name(pair.target),
        "draft_dtype": dtype_name(pair.draft),
        "wall_minutes": (time.perf_counter() - started) / 60,
    }
