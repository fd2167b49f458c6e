"""``make measure-draft``: a pair's draft, and the drafts of other pairs over the same target, measured
on held-out requests of every kind, as cells.

    python -m mtad.experiments.drafts                                   # experiment=draft, the embedded pair
    python -m mtad.experiments.drafts --compare smollm2_135m            # the layer draft beside, same prompts
    python -m mtad.experiments.drafts pair.draft.file=/path/head.safetensors task.per_kind=2
    python -m mtad.experiments.drafts --render results/draft            # the stored measurement, rendered again

1. Decoding: ``experiment=draft`` (``conf/experiment/draft.yaml``): every study method, sampling
   included, on the requests of the ``heldout`` task, methods alternating within each prompt
   (``run_interleaved``), into the ordinary cells ``<results_root>/draft/<pair>/heldout/<method>``. A
   compared pair's drafting methods run into its own cells (one session per pair: a pair is one
   target and one draft); its sampling row is the first pair's, whose target it shares.
2. Distribution match (untimed): the target's answers are the sampling cell's (its own samples at
   the paper's setting); each draft's q is held against the target's p on them, teacher-forced.
3. Cost: a one-token forward of the target and of each draft (``generation.forward_ms``).
Every figure is ``mtad.distill.draft_measurement``'s, read from those cells; written as the measurement
section of ``<out>/draft.json`` with ``measure.md``; for the committed ``results/draft`` every shipped
draft's model card (its Measured section) too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from mtad import provenance
from mtad.configs import compose
from mtad.experiments.interleaved import plan_cells, run_interleaved
from mtad.records import read_records
from mtad.runner.layout import SAMPLES

log = logging.getLogger("mtad.drafts")
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "draft"
TASK = "heldout"


def with_experiment(overrides: list[str]) -> list[str]:
    """The overrides, naming ``experiment=draft`` unless they name an experiment."""
    return list(overrides) if any(o.startswith("experiment=") for o in overrides) else ["experiment=draft", *overrides]


def generation_stats(records: list[dict]) -> dict[str, list[dict]]:
    """Each example's generations' stats (``DecodeStats`` dicts), by example id."""
    return {r["id"]: [t["stats"] for s in r["samples"] for t in s["turns"]] for r in records}


def run_pair_cells(overrides: list[str], methods: list[str], progress: bool) -> tuple[dict[str, list[dict]], dict]:
    """Run (or resume) the pair's (heldout, method) cells, methods interleaved; their records and their
    checked settings (`CellSettings`: config, task, limit, the method's settings), each by method."""
    summary = run_interleaved(overrides, methods, [TASK], progress=progress)
    if summary["stopped_by_time_limit"]:
        raise RuntimeError("the draft measurement stopped before its cells were complete: rerun to continue")
    plans = {m: plan for (_, m), plan in plan_cells(overrides, methods, [TASK]).items()}
    return {m: read_records(plan.cell.directory / SAMPLES) for m, plan in plans.items()}, plans


def study_methods(value) -> list[str]:
    """``draft_measurement.methods``: a list, or the registry's names comma-separated (``${methods:study}``);
    sampling, every speed-up's reference, among them."""
    from mtad.distill.draft_measurement import REFERENCE

    methods = value.split(",") if isinstance(value, str) else list(value)
    if REFERENCE not in methods:
        raise ValueError(f"draft_measurement.methods must include {REFERENCE} (every speed-up is over it): {methods}")
    return [REFERENCE, *(m for m in methods if m != REFERENCE)]


def answers_of(sampling: list[dict]) -> dict[str, list[int]]:
    """The target's answer to each request: the sampling cell's tokens, by example id."""
    return {r["id"]: list(r["samples"][0]["turns"][0]["token_ids"]) for r in sampling}


def draft_file_meta(cfg: dict) -> tuple[str | None, dict]:
    """The draft file of a pair config (relative to the checkout) and its metadata, head ids left out."""
    from mtad.models.draft import read_draft_meta
    from mtad.models.head import read_head_meta
    from mtad.models.pairs import ASSETS_DIR

    spec = cfg["draft"]
    if not spec.get("file"):
        return None, {"source": spec["source"]}
    path = Path(spec["file"]) if Path(spec["file"]).is_absolute() else ASSETS_DIR / spec["file"]
    meta = (read_head_meta if spec["source"] == "head" else read_draft_meta)(path)
    ids = meta.pop("head_token_ids", None)
    meta.pop("train_config", None)
    return os.path.relpath(path.resolve(), ROOT), meta | {
        "source": spec["source"],
        "head_size": len(ids) if ids else None,
    }


def measure(overrides: list[str], compare: list[str] = (), progress: bool = True) -> dict:
    """The measurement of the pair the overrides name and of the ``compare`` pairs' drafts (same
    target): the cells run (or resumed), then every figure read from them."""
    from omegaconf import OmegaConf

    from mtad.runner.session import load_pair_cached

    overrides = with_experiment(overrides)
    cfg = compose(overrides)
    methods = study_methods(cfg.draft_measurement.methods)
    others = {name: compose([*overrides, f"pair={name}"]).pair for name in compare}
    for name, other in others.items():  # before anything runs
        if other.target != cfg.pair.target:
            raise ValueError(f"--compare {name}: its target {other.target} is not {cfg.pair.name}'s {cfg.pair.target}")
    t0 = time.time()
    main_records, plans = run_pair_cells(overrides, methods, progress)
    records = {cfg.pair.name: main_records}
    pairs = {cfg.pair.name: load_pair_cached(OmegaConf.to_container(cfg.pair, resolve=True))}
    for name, other in others.items():
        drafted, _ = run_pair_cells([*overrides, f"pair={name}"], methods[1:], progress)
        records[name] = {methods[0]: main_records[methods[0]]} | drafted  # one target: one sampling row
        pairs[name] = load_pair_cached(OmegaConf.to_container(other, resolve=True))
    return assemble(plans, records, pairs, t0)


def assemble(plans: dict, records: dict, pairs: dict, t0: float) -> dict:
    """The measurement from every pair's cell records (``records``: pair -> method -> records, sampling
    first) and its loaded models (``pairs``, the first pair's first): decoding by kind, the distribution
    match, costs, goals, provenance. ``plans``: the first pair's cells' checked settings, by method."""
    from mtad.distill import draft_measurement as dm

    plan = plans[dm.REFERENCE]
    cfg, task = plan.cfg, plan.task
    main = next(iter(pairs.values()))
    answers = answers_of(records[cfg.pair.name][dm.REFERENCE])
    examples = [e for e in task.examples(limit=plan.limit) if e["id"] in answers]
    kinds = {e["id"]: e["kind"] for e in examples}
    prompts = {e["id"]: task.build_prompt(e, main.tokenizer) for e in examples}
    drafts = {name: pair.draft for name, pair in pairs.items()}
    match = dm.distribution_by_kind(main.target, drafts, prompts, answers, kinds)
    target_ms = dm.step_ms(main.target)
    per_draft = {}
    for name, pair in pairs.items():
        stats = {m: generation_stats(rs) for m, rs in records[name].items()}
        families = {
            kind: {"distribution": match[name][kind], "decoding": rows}
            for kind, rows in dm.decoding_by_kind(stats, kinds).items()
        }
        draft_ms = dm.step_ms(main.target, pair.draft)
        cost = {"target_step_ms": target_ms, "draft_step_ms": draft_ms, "draft_over_target": draft_ms / target_ms}
        per_draft[name] = dm.draft_result(dm.draft_kind(pair.draft), families, cost)
        per_draft[name]["file"], per_draft[name]["meta"] = draft_file_meta(pair.config)
        per_draft[name]["dtype"] = provenance.dtype_name(pair.draft)
    settings = {m: p.method_params for m, p in plans.items()}  # what the cells ran
    return {
        **dm.settings_record(task.options["per_kind"], task.max_new_tokens, int(cfg.seed), main.decode_path, settings),
        "drafts": per_draft,
        "pair": cfg.pair.name,
        "cells": {name: f"{cfg.results_root}/{cfg.experiment_name}/{name}/{TASK}" for name in pairs},
        "environment": provenance.environment_record([main.target, *drafts.values()]),
        "threads": cfg.threads,
        "target_dtype": provenance.dtype_name(main.target),
        "wall_seconds": round(time.time() - t0, 1),
        "load_average_1_5_15min_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def write_outputs(result: dict, out: Path) -> None:
    """The measurement section of draft.json and measure.md in `out`; for the committed results/draft also
    each shipped draft's model card (its Measured section; `make measure-draft` then renders the results page)."""
    from mtad.distill.card import refresh_measured
    from mtad.distill.draft_measurement import markdown, write_measurement
    from mtad.models.pairs import ASSETS_DIR

    write_measurement(out, result)
    (out / "measure.md").write_text(markdown(result, header(result)))
    if out.resolve() == COMMITTED.resolve():
        files = {(ROOT / r["file"]).resolve(): r["kind"] for r in result["drafts"].values() if r.get("file")}
        for card in sorted((ASSETS_DIR / "drafts").glob("*.md")):  # every shipped draft's card: measured, or saying not
            draft_file = card.with_suffix(".safetensors")
            if draft_file.exists():
                refresh_measured(card, out, files.get(draft_file.resolve()))


def header(result: dict) -> list[str]:
    """measure.md's title and the paragraph that says what was measured, where and how."""
    described = "; ".join(
        f"`{name}`: {r['kind']} draft `{r['file']}` "
        f"({r['meta'].get('trained_tokens', '?')} training tokens, {r['dtype']})"
        for name, r in result["drafts"].items()
    )
    cells = ", ".join(f"`{c}`" for c in (result.get("cells") or {}).values())
    return [
        f"# Draft measurement: {result['pair']}",
        "",
        f"Drafts of one target, measured side by side on the same prompts and seeds: {described}. Held-out "
        f"requests per kind: {result['per_family']} (subjects never used in training), at most "
        f"{result['max_new_tokens']} new tokens, seed {result['seed']}. Machine: {result['environment']['machine']}, "
        f"decode path {result['decode_path']}, torch threads {result['threads']}, target {result['target_dtype']}; "
        f"load average at the end {result['load_average_1_5_15min_at_end']}." + (f" Cells: {cells}." if cells else ""),
    ]


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default experiment=draft)")
    parser.add_argument("--compare", default="", help="comma-separated pairs of the same target measured beside")
    parser.add_argument("--out", default="results/local/draft", help="where draft.json and measure.md go")
    parser.add_argument("--render", default=None, help="only render the measurement stored in this folder into --out")
    return parser


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException

    from mtad.distill.draft_measurement import read_measurement

    args = arguments().parse_intermixed_args(argv)
    provenance.capture()  # the code this run starts from, whatever the checkout becomes while it runs
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    out = Path(args.out)
    if args.render:
        result = read_measurement(Path(args.render))
        if result is None:
            print(
                f"measure-draft: no measurement in {args.render}/draft.json (make measure-draft writes one)",
                file=sys.stderr,
            )
            return 1
    else:
        try:
            result = measure(args.overrides, [p for p in args.compare.split(",") if p], progress=True)
        except (ValueError, RuntimeError, HydraException) as err:  # a setting, a config name, a stopped run
            print(f"measure-draft: {err}", file=sys.stderr)
            return 1
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(result, out)
    print((out / "measure.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
