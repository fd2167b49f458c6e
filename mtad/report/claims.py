"""``make claims``: every claim of the paper, measured here with a 95% interval and a verdict.

    python -m mtad.report.claims                                   # experiment=claims (embedded pair)
    python -m mtad.report.claims experiment=claims pair=llama2_13b_7b       # the same design on a GPU pair
    python -m mtad.report.claims experiment=table2_full pair=opt_66b_350m   # report from a finished grid
    python -m mtad.report.claims --report-only                      # rebuild from the cells, run nothing

An experiment with a ``claims:`` section (``conf/experiment/claims*.yaml``) is *run* first:
every method on the same prompts with the same per-sample seeds, methods alternating within
each prompt (``mtad.interleaved``); any other experiment (``table2``, ``table2_full``) is only
read from its cells, whose examples are paired by id across methods. Then:

- C1 perplexity: PPL(MTAD)/PPL(sampling) − 1 and the same for MMTAD;
- C2 task quality: score(MTAD)/score(sampling) − 1 per task that scores above zero, the tasks
  the target scores 0 on for every method named as such;
- C3 speed: tokens/s of MTAD over SpS and over the best of SpS, SpecTr and SpecInfer, and of
  MMTAD over MTAD, with the block efficiency ratio (tokens per target call, free of timing
  noise) beside;
- C4 energy: J/token of SpS (and of the most frugal conventional method) over MTAD's, from
  hardware counters only;
- C5 and C6 on enumerable tiny models (``mtad.report.claims_theory``).

The rows, their figures and the paper version each figure comes from are ``mtad.report.paper``.

Every interval is a paired bootstrap over prompts (``mtad.report.intervals``); the verdict rule
is written at the top of the report. Output: ``results/claims/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from mtad.interleaved import compose, run_interleaved  # first: it reads the code state at start-up
from mtad.report import intervals as iv
from mtad.report.cells import load_cells
from mtad.report.claims_theory import (
    APPROXIMATORS,
    NO_BOUND,
    ExactnessSettings,
    TheorySettings,
    approximation_rows,
    exactness_rows,
    zero_distance_check,
)
from mtad.report.examples import example_frame, paired
from mtad.methods import LABELS
from mtad.report.paper import VERSIONS, PaperClaim, claims_of, methods_needed
from mtad.tasks import TASKS

log = logging.getLogger("mtad.claims")

DEFAULT_METHODS = tuple(methods_needed())  # every method some claim compares
PAPER_TASKS = tuple(name for name, task in TASKS.items() if task.primary_score)  # the tasks with a score


@dataclass
class ClaimsSettings:
    """The ``claims:`` section of an experiment (every key optional; these are the defaults)."""

    methods: list = field(default_factory=lambda: list(DEFAULT_METHODS))
    tasks: list | None = None  # set: the experiment is run (interleaved) before the report
    max_minutes: float | None = None  # stop starting prompts after this long (a rerun continues)
    zero_score_evidence: str | None = None  # experiment whose cells speak for paper tasks not run here
    confidence: float = iv.CONFIDENCE
    resamples: int = iv.RESAMPLES
    interval: str = "BCa"
    theory: TheorySettings = field(default_factory=TheorySettings)
    exactness: ExactnessSettings = field(default_factory=ExactnessSettings)

    @classmethod
    def from_config(cls, cfg) -> "ClaimsSettings":
        from omegaconf import OmegaConf

        section = OmegaConf.to_container(cfg.claims, resolve=True) if "claims" in cfg else {}
        unknown = sorted(set(section) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} under claims:; valid: {sorted(cls.__dataclass_fields__)}")
        theory = TheorySettings(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in (section.pop("theory", None) or {}).items()}
        )
        exact = section.pop("exactness", None) or {}
        if "cases" in exact:
            exact["cases"] = tuple(
                (c["method"], {k: tuple(v) if isinstance(v, list) else v for k, v in c.get("params", {}).items()})
                for c in exact["cases"]
            )
        return cls(**section, theory=theory, exactness=ExactnessSettings(**exact))


# ----------------------------------------------------------------------------- one claim row
@dataclass
class Claim:
    claim: str  # "C1" ... "C6"
    comparison: str  # e.g. "MTAD vs sampling: PPL ratio − 1"
    task: str  # the prompts ("chat", "cnndm", ...) or "tiny model"
    paper: str  # the paper's figure, as text
    paper_value: float | None
    unit: str  # "relative" (−0.21 = −21%), "ratio" (1.42×), "tv", "pvalue", "logprob"
    null: float | None
    direction: int | None  # +1: the paper claims above null; −1: below
    interval: iv.Interval | None = None
    verdict: str = iv.NOT_MEASURABLE
    reason: str | None = None
    beside: dict = field(default_factory=dict)  # e.g. the block-efficiency ratio next to a speed ratio
    source: str = ""  # the experiment whose cells gave it
    version: str = ""  # the paper version the figure and the statement come from (paper.VERSIONS)

    @classmethod
    def of(cls, paper_claim: PaperClaim, comparison: str, task: str, source: str) -> "Claim":
        c = paper_claim
        return cls(
            c.claim, comparison, task, c.paper, c.figure, c.unit, c.null, c.direction, source=source, version=c.version
        )

    def finish(self) -> "Claim":
        if self.reason and (self.interval is None or self.interval.estimate is None):
            self.verdict = iv.NOT_MEASURABLE
        elif self.null is not None:
            self.verdict = iv.verdict(self.interval, self.null, self.direction)
        return self

    def as_dict(self) -> dict:
        d = asdict(self)
        d["interval"] = self.interval.as_dict() if self.interval else None
        d["detectable_effect"] = iv.detectable_effect(self.interval) if self.interval else None
        d["paper_inside_interval"] = (
            self.interval.contains(self.paper_value)
            if self.interval is not None and self.paper_value is not None
            else None
        )
        d["beside"] = {k: (v.as_dict() if isinstance(v, iv.Interval) else v) for k, v in self.beside.items()}
        d["version_label"] = VERSIONS[self.version].label if self.version in VERSIONS else self.version
        return d


def _boot(settings: ClaimsSettings, statistic, arrays) -> iv.Interval:
    return iv.bootstrap_interval(
        statistic, arrays, confidence=settings.confidence, resamples=settings.resamples, method=settings.interval
    )


def _pairs(frame: pd.DataFrame, task: str, methods: list[str], columns: list[str]) -> pd.DataFrame:
    wide = paired(frame[frame["task"] == task], methods, columns)
    return wide.dropna() if len(wide) else wide


def _against(claim: PaperClaim) -> str:
    """The baseline(s) as the report names them: one method, or the best of several."""
    names = [LABELS[b] for b in claim.baselines]
    return names[0] if len(names) == 1 else f"best of {', '.join(names)}"


def _not_run(frame: pd.DataFrame, task: str, methods) -> list[str]:
    ran = set(frame[frame["task"] == task]["method"])
    return [m for m in methods if m not in ran]


def _columns(wide: pd.DataFrame, methods, columns) -> list:
    return [wide[f"{m}.{c}"] for m in methods for c in columns]


# ----------------------------------------------------------------------------- C1 - C4
def perplexity_claims(frame, tasks, settings, source) -> list[Claim]:
    claims = []
    for task in tasks:
        for paper_claim in claims_of("perplexity"):
            method, base = paper_claim.method, paper_claim.baselines[0]
            claim = Claim.of(paper_claim, f"{LABELS[method]} vs {LABELS[base]}: PPL ratio − 1", task, source)
            wide = _pairs(frame, task, [method, base], ["mean_logprob"])
            if wide.empty:
                claim.reason = f"no prompt finished by both {method} and {base}"
            else:
                claim.interval = _boot(
                    settings, iv.perplexity_change, [wide[f"{method}.mean_logprob"], wide[f"{base}.mean_logprob"]]
                )
            claims.append(claim.finish())
    return claims


def _score_reason(cells: pd.DataFrame, task: str) -> str | None:
    rows = cells[cells["task"] == task]
    for column in [c for c in rows.columns if c.startswith("score.") and c.endswith("missing_reason")]:
        reasons = {r for r in rows[column] if isinstance(r, str) and r}
        if reasons:
            return "; ".join(sorted(reasons))
    return None


def quality_claims(frame, cells, tasks, settings, source) -> list[Claim]:
    claims = []
    for task in tasks:
        scored = frame[(frame["task"] == task) & frame["score"].notna()] if "score" in frame else frame.iloc[0:0]
        score_names = sorted({n for n in cells[cells["task"] == task].get("score_name", []) if isinstance(n, str)})
        what = score_names[0] if score_names else "score"
        methods_here = sorted(set(frame[frame["task"] == task]["method"]))
        for paper_claim in claims_of("quality"):
            method, base = paper_claim.method, paper_claim.baselines[0]
            claim = Claim.of(paper_claim, f"{LABELS[method]} vs {LABELS[base]}: {what} ratio − 1", task, source)
            if scored.empty:
                claim.reason = _score_reason(cells, task) or f"no task score recorded for {task}"
            elif (scored["score"] == 0).all():
                n = scored.groupby("method")["id"].nunique()
                claim.reason = (
                    f"the target scores 0 on every example for every method "
                    f"({', '.join(f'{LABELS.get(m, m)} {n.get(m, 0)}' for m in methods_here)} examples)"
                )
            else:
                wide = _pairs(frame, task, [method, base], ["score"])
                if wide.empty:
                    claim.reason = f"no example scored for both {method} and {base}"
                else:
                    claim.interval = _boot(
                        settings, iv.relative_change, [wide[f"{method}.score"], wide[f"{base}.score"]]
                    )
                    if claim.interval.estimate is None:
                        claim.reason = f"{base} scores 0 on these examples: no relative change"
            claims.append(claim.finish())
    return claims


def speed_claims(frame, tasks, settings, source, timing) -> list[Claim]:
    """Tokens/s of the method over its baseline's (over the fastest baseline's, chosen inside every
    resample, when the paper compares with several), the block-efficiency ratio beside."""
    claims = []
    for task in tasks:
        for paper_claim in claims_of("speed"):
            methods = [paper_claim.method, *paper_claim.baselines]
            claim = Claim.of(
                paper_claim, f"{LABELS[paper_claim.method]} / {_against(paper_claim)}: tokens/s ratio", task, source
            )
            wide = _pairs(frame, task, methods, ["new_tokens", "seconds", "target_calls"])
            missing = _not_run(frame, task, methods)
            if missing:
                claim.reason = f"not run here: {', '.join(missing)} (add it to claims.methods)"
            elif wide.empty:
                claim.reason = f"no prompt finished by all of {', '.join(methods)}"
            else:
                claim.interval = _boot(settings, iv.rate_over_best, _columns(wide, methods, ["new_tokens", "seconds"]))
                claim.beside["block_efficiency_ratio"] = _boot(
                    settings, iv.rate_over_best, _columns(wide, methods, ["new_tokens", "target_calls"])
                )
                claim.beside["timing"] = timing
            claims.append(claim.finish())
    return claims


def _energy_reason(cells: pd.DataFrame) -> str | None:
    reasons = {r for r in cells.get("energy_missing_reason", []) if isinstance(r, str) and r}
    return "; ".join(sorted(reasons)) if reasons else None


def energy_claims(frame, cells, tasks, settings, source) -> list[Claim]:
    """Joules per token of the baseline (the most frugal one, chosen inside every resample, when
    the paper compares with several) over the method's."""
    claims = []
    for task in tasks:
        for paper_claim in claims_of("energy"):
            methods = [paper_claim.method, *paper_claim.baselines]
            claim = Claim.of(
                paper_claim,
                f"{_against(paper_claim)} / {LABELS[paper_claim.method]}: energy per token ratio",
                task,
                source,
            )
            wide = _pairs(
                frame.assign(energy_j=frame["energy_j"].astype(float)), task, methods, ["energy_j", "new_tokens"]
            )
            missing = _not_run(frame, task, methods)
            if missing:
                claim.reason = f"not run here: {', '.join(missing)} (add it to claims.methods)"
            elif wide.empty:
                reason = _energy_reason(cells[cells["task"] == task])
                claim.reason = f"no energy counter: {reason}" if reason else "no prompt with an energy reading for all"
            else:
                claim.interval = _boot(
                    settings, iv.lowest_over_rate, _columns(wide, methods, ["energy_j", "new_tokens"])
                )
            claims.append(claim.finish())
    return claims


# ----------------------------------------------------------------------------- C5, C6
def theory_claims(settings: ClaimsSettings) -> tuple[list[Claim], dict]:
    """C5 rows at the paper's operating point (the whole grid is in the report's C5 section), the
    zero-distance check, and C6."""
    rows = approximation_rows(settings.theory, settings.confidence)
    check = zero_distance_check(settings.theory, settings.exactness.alpha)
    exact = exactness_rows(settings.exactness)
    claims, blocks_done = [], set()
    for row in (r for r in rows if r["point"]["operating"]):
        point, label = row["point"], row["label"]
        if point["draft"] == "q ≠ p" and (point["vocab"], point["gamma"]) not in blocks_done:
            blocks_done.add((point["vocab"], point["gamma"]))
            gain = row["exact"]["mtjd_logp"] - row["exact"]["sampling_logp"]
            claims.append(
                Claim(
                    "C5",
                    f"exact MTJD − sampling: E[log p] of a {point['gamma']}-token block, V={point['vocab']} "
                    "(both enumerated)",
                    "tiny model",
                    "MTJD lowers perplexity",
                    None,
                    "logprob",
                    0.0,
                    +1,
                    iv.Interval(gain, gain, gain, method="exact"),
                    source="tiny model",
                    version="arxiv-v2",
                ).finish()
            )
        for method in APPROXIMATORS:
            measured = row["methods"][method]
            claims.append(
                Claim(
                    "C5",
                    f"{LABELS[method]} − sampling: E[log p] of the first γ tokens; {label}",
                    "tiny model",
                    "lowers perplexity",
                    None,
                    "logprob",
                    0.0,
                    +1,
                    iv.Interval(**measured["logp_gain"]),
                    source="tiny model",
                    version="arxiv-v2" if method == "mtad" else "iclr-final",
                ).finish()
            )
        if point["draft"] == "q ≠ p" and point["replacement"]:
            for method in APPROXIMATORS:
                claims.append(
                    Claim(
                        "C5",
                        f"TV({LABELS[method]}, MTJD) − TV(sampling, MTJD); {label}",
                        "tiny model",
                        "bounded error (form not sourced)",
                        None,
                        "tv",
                        None,
                        None,
                        iv.Interval(**row["methods"][method]["tv_gain"]),
                        verdict=iv.NO_VERDICT,
                        reason=NO_BOUND,
                        source="tiny model",
                        version="iclr-final" if method == "mmtad" else "arxiv-v2",
                    )
                )
    claims.append(
        Claim(
            "C5",
            f"distance zero where the maths says so (q = p, W = 1, τ = 0.01, no truncation): "
            f"chi-square p = {check['pvalue']:.3g}",
            "tiny model",
            "0 (exact)",
            None,
            "pvalue",
            None,
            None,
            iv.Interval(check["pvalue"], n=check["runs"]),
            check["verdict"],
            source="tiny model",
        )
    )
    for row in exact:
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        claims.append(
            Claim(
                "C6",
                f"{row['method']} ({params}) reproduces p: chi-square p = {row['pvalue']:.3g}",
                "tiny model",
                "exact (lossless)",
                None,
                "pvalue",
                None,
                None,
                iv.Interval(row["pvalue"], n=row["runs"]),
                row["verdict"],
                source="tiny model",
            )
        )
    detail = {
        "approximation": rows,
        "zero_distance_check": check,
        "exactness": exact,
        "theory_settings": _jsonable(asdict(settings.theory)),
        "exactness_settings": _jsonable(asdict(settings.exactness)),
    }
    return claims, detail


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


# ----------------------------------------------------------------------------- the report
def build_report(results_root, experiment: str, pair: str, settings: ClaimsSettings, theory: bool = True) -> dict:
    """Every claim from the cells of ``experiment``/``pair`` under ``results_root`` (and C5/C6)."""
    cells = load_cells(results_root, experiment=experiment)
    cells = cells[cells["pair"] == pair] if "pair" in cells else cells
    if cells.empty:
        raise ValueError(
            f"no cells of experiment {experiment!r} and pair {pair!r} under {results_root}; run it "
            f"first (`make claims`, or `mtad-run experiment={experiment} pair={pair}`)"
        )
    cells = cells[cells["overrides"] == ""]
    frame = example_frame(cells)
    tasks = [t for t in (settings.tasks or _ordered_tasks(cells)) if t in set(cells["task"])]
    timing = (
        "interleaved within each prompt"
        if "timing" in cells and cells["timing"].notna().any()
        else "one cell after another (not interleaved)"
    )
    claims = perplexity_claims(frame, tasks, settings, experiment) + quality_claims(
        frame, cells, [t for t in tasks if t in PAPER_TASKS], settings, experiment
    )
    evidence_tasks = [t for t in PAPER_TASKS if t not in tasks]
    if settings.zero_score_evidence and evidence_tasks:
        other = load_cells(results_root, experiment=settings.zero_score_evidence)
        other = other[(other["pair"] == pair) & (other["overrides"] == "")] if "pair" in other else other
        found = [t for t in evidence_tasks if t in set(other.get("task", []))]
        if found:
            claims += quality_claims(example_frame(other), other, found, settings, settings.zero_score_evidence)
    claims += speed_claims(frame, tasks, settings, experiment, timing)
    claims += energy_claims(frame, cells, tasks, settings, experiment)
    detail = {}
    if theory:
        theory_rows, detail = theory_claims(settings)
        claims += theory_rows
    return {
        "experiment": experiment,
        "pair": pair,
        "results_root": str(results_root),
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rule": iv.VERDICT_RULE,
        "confidence": settings.confidence,
        "resamples": settings.resamples,
        "interval_method": settings.interval,
        "timing": timing,
        "design": design(cells, frame, tasks),
        "claims": [c.as_dict() for c in claims],
        "theory": detail,
    }


def _ordered_tasks(cells: pd.DataFrame) -> list[str]:
    order = list(PAPER_TASKS) + ["chat"]
    return sorted(set(cells["task"]), key=lambda t: (order.index(t) if t in order else len(order), t))


def design(cells: pd.DataFrame, frame: pd.DataFrame, tasks: list[str]) -> dict:
    """Sample sizes and settings behind the estimates."""
    per_task = {}
    for task in tasks:
        rows = cells[cells["task"] == task]
        per_task[task] = {
            "examples_per_method": {
                m: int(frame[(frame["task"] == task) & (frame["method"] == m)]["id"].nunique())
                for m in sorted(set(rows["method"]))
            },
            "examples_planned": _int_or_none(rows.get("examples_planned", pd.Series(dtype=float)).max()),
            "max_new_tokens": _int_or_none(rows.get("max_new_tokens", pd.Series(dtype=float)).max()),
            "status": sorted(set(rows["status"])),
        }
    commits = sorted({c for c in cells.get("git_commit", []) if isinstance(c, str)})
    return {
        "tasks": per_task,
        "machine": _values(cells, "machine"),
        "dtype": _values(cells, "dtype"),
        "seed": _values(cells, "seed"),
        "commits": commits,
        "threads": _values(cells, "torch_threads"),
    }


def _values(cells, column) -> list:
    return sorted(
        {str(v) for v in cells.get(column, []) if v is not None and not (isinstance(v, float) and math.isnan(v))}
    )


def _int_or_none(value) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def report_name(experiment: str, pair: str, default_pair: str | None) -> str:
    """``claims`` for the claims experiment on its own pair, else ``claims_<experiment>[_<pair>]``."""
    stem = experiment if experiment.startswith("claims") else f"claims_{experiment}"
    return stem if pair == default_pair else f"{stem}_{pair}"


def write_report(report: dict, out_dir: str | Path, name: str) -> tuple[Path, Path]:
    from mtad.report.claims_markdown import to_markdown

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{name}.md", out_dir / f"{name}.json"
    md.write_text(to_markdown(report))
    js.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
    return md, js


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default experiment=claims)")
    parser.add_argument("--report-only", action="store_true", help="build the report from the cells, run nothing")
    parser.add_argument("--out", default="results/claims", help="output directory (default results/claims)")
    parser.add_argument("--name", default=None, help="file stem (default claims, or claims_<experiment>[_<pair>])")
    parser.add_argument("--no-theory", action="store_true", help="skip C5 and C6 (tiny-model computations)")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    overrides = list(args.overrides)
    if not any(o.startswith("experiment=") for o in overrides):
        overrides.insert(0, "experiment=claims")
    try:
        cfg = compose(overrides)
        settings = ClaimsSettings.from_config(cfg)
        experiment, pair = cfg.experiment_name, cfg.pair.name
        stopped = False
        if settings.tasks and not args.report_only:
            summary = run_interleaved(
                overrides, settings.methods, settings.tasks, settings.max_minutes, progress=bool(cfg.progress)
            )
            stopped = summary["stopped_by_time_limit"]
            log.info(
                "prompts ran for %.1f min%s",
                summary["minutes"],
                " (time limit reached: rerun to continue)" if stopped else "",
            )
        experiment_only = [o for o in overrides if o.split("=", 1)[0] == "experiment"]
        default_pair = compose(experiment_only).pair.name if any(o.startswith("pair=") for o in overrides) else pair
        name = args.name or report_name(experiment, pair, default_pair)
        report = build_report(cfg.results_root, experiment, pair, settings, theory=not args.no_theory)
    except (ValueError, FileNotFoundError) as err:
        print(f"claims: {err}", file=sys.stderr)
        return 1
    md, js = write_report(report, args.out, name)
    print(md.read_text())
    print(
        f"wrote {md} and {js}"
        + ("; the time limit stopped the run: rerun `make claims` to continue" if stopped else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
