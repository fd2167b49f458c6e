"""Statistical reproduction: do two runs of the same experiment, on two machines, agree?

On another CPU type the sums of a forward run in another order, a sampling decision flips
every few hundred draws in float32, and from there the tokens differ: the cells cannot agree
bit for bit (``mtad.report.reproduce`` checks that, on one machine type). What must hold
anywhere is that each figure is the *same figure up to sampling noise*:

- **cells** (``compare_cells``): per (task, method) cell and figure — perplexity (as the mean
  log-probability per token), block efficiency (Σ new tokens / Σ target calls), acceptance
  (Σ accepted / Σ drafted), the task score — the interval of machine A's value minus machine
  B's, paired over the examples both ran (same prompts, same per-sample seeds). They agree
  when it contains 0.
- **claims** (``compare_claims``): per claim row, the two estimates agree when their
  difference is within z·√(se_A² + se_B²) (the rows' bootstrap standard errors), or, without
  standard errors, when the two intervals overlap; whether the verdicts match is shown beside.
  Speed and energy rows measure the machines themselves: they are reported, never required.

With m comparisons each is made at confidence 1 − α/m (Bonferroni), so two machines that
measure the same thing show any disagreement at all with probability at most α (default 5%).

The output ends with one verdict line (``verdict``): reproduced exactly (every cell both roots
hold has the same tokens and counts), agrees within intervals, or differs; where the cells do not
reproduce exactly it names why from the two roots' env.json records
(``mtad.report.reproduce.record_differences``: dtypes, instruction sets, library versions,
kernels, threads, machine, each with both values), or says that the records agree and the
difference is real. The figures outside their intervals follow it, last. Each root is labelled
with its machine, instruction sets and target dtype.

    python -m mtad.report.machine_agreement cells results/runs results/local/runs --experiment table2
    python -m mtad.report.machine_agreement claims results/claims/claims.json /other/claims.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mtad.markdown import MISSING, fmt_bounds, fmt_number, md_table
from mtad.report.cells import find_cells, load_cells
from mtad.report.claims_report import read_report
from mtad.report.examples import example_frame, paired
from mtad.stats import intervals as iv
from mtad.stats.agreement import ALPHA, bonferroni_confidence, bonferroni_z, estimates_agree

RESAMPLES = 4999
# figure -> (per-example columns, statistic on machine A's then B's columns)
FIGURES = {
    "mean_logprob": (["mean_logprob"], lambda a, b, axis=-1: np.mean(a, axis) - np.mean(b, axis)),
    "block_efficiency": (
        ["new_tokens", "target_calls"],
        lambda na, da, nb, db, axis=-1: iv.rate(na, da, axis) - iv.rate(nb, db, axis),
    ),
    "acceptance_rate": (
        ["accepted", "drafted"],
        lambda na, da, nb, db, axis=-1: iv.rate(na, da, axis) - iv.rate(nb, db, axis),
    ),
    "score": (["score"], lambda a, b, axis=-1: np.mean(a, axis) - np.mean(b, axis)),
}
MACHINE_CLAIMS = ("C3", "C4")  # tokens/s and energy: properties of the machine, not of the method


@dataclass
class Agreement:
    what: str  # "<task>/<method>: <figure>" or "<claim> <comparison> (<task>)"
    a: float | None
    b: float | None
    low: float | None  # interval of a − b (cells) or of the allowed difference (claims)
    high: float | None
    n: int
    agree: bool | None  # None: not comparable (no data on one side, or a machine figure)
    note: str = ""


def _examples(root: str | Path, experiment: str | None = None) -> pd.DataFrame:
    cells = load_cells(root, experiment=experiment)
    if cells.empty:
        raise FileNotFoundError(f"no cells under {Path(root) / (experiment or '')}")
    cells = cells[cells["overrides"].fillna("") == ""]
    return example_frame(cells)


def compare_cells(
    root_a: str | Path,
    root_b: str | Path,
    alpha: float = ALPHA,
    resamples: int = RESAMPLES,
    experiment: str | None = None,
) -> list[Agreement]:
    """Every (task, method, figure) both roots measured (of ``experiment``, else of every
    experiment: keep one per root), paired over the examples both finished."""
    frames = {"A": _examples(root_a, experiment), "B": _examples(root_b, experiment)}
    held = {s: set(map(tuple, f[["task", "method"]].drop_duplicates().values)) for s, f in frames.items()}
    keys = sorted(held["A"] & held["B"])
    one_sided = [  # a cell one root lacks: listed, never silently dropped
        Agreement(f"{task}/{method}", None, None, None, None, 0, None, f"not run: cell missing from {missing}")
        for (task, method), missing in sorted(
            [(k, root_b) for k in held["A"] - held["B"]] + [(k, root_a) for k in held["B"] - held["A"]]
        )
    ]
    plans = []
    for task, method in keys:
        sides = {s: f[(f["task"] == task) & (f["method"] == method)].assign(method=s) for s, f in frames.items()}
        for figure, (columns, statistic) in FIGURES.items():
            wide = paired(pd.concat(sides.values()), ["A", "B"], columns).dropna()
            if wide.empty or (len(columns) == 2 and (wide[f"A.{columns[1]}"].sum() == 0)):
                continue  # not measured (no score, or a method that drafts nothing)
            arrays = [wide[f"{s}.{c}"].to_numpy(float) for s in ("A", "B") for c in columns]
            plans.append((f"{task}/{method}: {figure}", columns, statistic, arrays))
    confidence = bonferroni_confidence(alpha, len(plans))
    out = []
    for what, columns, statistic, arrays in plans:
        half = len(arrays) // 2
        value = (
            (lambda xs: float(np.mean(xs[0])))
            if len(columns) == 1
            else (lambda xs: float(np.sum(xs[0]) / np.sum(xs[1])))
        )
        interval = iv.bootstrap_interval(
            statistic, arrays, confidence=confidence, resamples=resamples, method="percentile"
        )
        agree = interval.contains(0.0) if interval.available else None
        out.append(
            Agreement(
                what,
                value(arrays[:half]),
                value(arrays[half:]),
                interval.low,
                interval.high,
                interval.n,
                agree,
                interval.reason or "",
            )
        )
    return out + one_sided


@dataclass
class Exactness:
    """Which cells both roots hold reproduce exactly (``mtad.report.reproduce.compare_cell``), and
    what in the two roots' records could keep them from it (``reproduce.machine_differences``)."""

    cells: list[str]  # held by both, compared
    same: list[str]  # of those, the ones that reproduce exactly
    partial: list[str]  # one root ran fewer examples: compared on those both hold
    causes: list[str]  # "target dtype: A float32, B bfloat16", ...

    def summary(self) -> str:
        partial = "; ".join(self.partial)
        return (
            f"{len(self.same)} of {len(self.cells)} cells both roots hold reproduce exactly (tokens, counts; "
            "log-probabilities within the dtype's tolerance); the others are compared statistically below."
            + (f" {len(self.partial)} partial, compared on the examples both hold: {partial}." if partial else "")
        )

    def why_not(self) -> str:
        """Why the cells that differ do: the records' differences, or none (a real difference)."""
        if len(self.same) == len(self.cells):
            return ""
        if self.causes:
            return "exact reproduction not expected: " + "; ".join(self.causes)
        return (
            f"{len(self.cells) - len(self.same)} of {len(self.cells)} cells differ in tokens or counts with the "
            "same dtype, ISA, versions, threads and machine: a real difference"
        )


def compare_exactly(root_a: str | Path, root_b: str | Path, experiment: str | None = None) -> Exactness:
    """How many of A's cells B reproduces exactly (same tokens and counts, log-probabilities within
    the dtype's tolerance), and the records' differences that make it not expected."""
    from mtad.report.reproduce import compare_cell, example_ids, machine_differences

    base_a, base_b = Path(root_a) / (experiment or ""), Path(root_b) / (experiment or "")
    names = [c.relative_to(base_a) for c in find_cells(base_a) if (base_b / c.relative_to(base_a)).is_dir()]
    same, partial = [], []
    for n in names:
        ids_a, ids_b = example_ids(base_a / n), example_ids(base_b / n)
        if ids_a != ids_b:  # one root ran fewer examples: compared on those both hold
            partial.append(f"{n} ({len(ids_a & ids_b)} of {len(ids_a)} and {len(ids_b)} examples)")
        if ids_a & ids_b and not compare_cell(base_a / n, base_b / n, str(n), shared_only=ids_a != ids_b):
            same.append(str(n))
    causes = machine_differences(base_a, base_b, names, names=("A", "B"))
    return Exactness([str(n) for n in names], same, partial, causes)


def exact_summary(root_a: str | Path, root_b: str | Path, experiment: str | None = None) -> str:
    """``compare_exactly``'s count as one sentence (which cells reproduce, which are partial)."""
    return compare_exactly(root_a, root_b, experiment).summary()


def root_machine(root: str | Path, experiment: str | None = None) -> str:
    """The machines a root's cells ran on, each with its instruction sets and target dtype."""
    from mtad.report.reproduce import recorded_machine

    labels = dict.fromkeys(recorded_machine(c) for c in find_cells(Path(root) / (experiment or "")))
    return "; ".join(labels) or "no cells"


def _claim_key(row: dict) -> str:
    return f"{row['claim']} {row['comparison']} ({row['task']})"


def compare_claims(report_a: dict, report_b: dict, alpha: float = ALPHA) -> list[Agreement]:
    """Every claim row of both reports (matched by claim, comparison and prompts)."""
    rows_a = {_claim_key(r): r for r in report_a["claims"]}
    rows_b = {_claim_key(r): r for r in report_b["claims"]}
    common = [k for k in rows_a if k in rows_b]
    one_sided = [(k, "B") for k in rows_a if k not in rows_b] + [(k, "A") for k in rows_b if k not in rows_a]
    tested = [k for k in common if rows_a[k]["claim"] not in MACHINE_CLAIMS]
    z = bonferroni_z(alpha, len(tested))
    out = []
    for key in common:
        ra, rb = rows_a[key], rows_b[key]
        ia, ib = ra.get("interval") or {}, rb.get("interval") or {}
        ea, eb = ia.get("estimate"), ib.get("estimate")
        verdicts = f"verdicts {ra['verdict']} / {rb['verdict']}"
        if ea is None or eb is None:
            out.append(Agreement(key, ea, eb, None, None, 0, None, f"not measured on both; {verdicts}"))
            continue
        agree, low, high = estimates_agree(ia, ib, z)
        machine = ra["claim"] in MACHINE_CLAIMS
        out.append(
            Agreement(
                key,
                ea,
                eb,
                low,
                high,
                min(ia.get("n") or 0, ib.get("n") or 0),
                None if machine else agree,
                ("a property of the machine: not required to agree; " if machine else "") + verdicts,
            )
        )
    return out + [
        Agreement(k, None, None, None, None, 0, None, f"not run: row missing from {side}") for k, side in one_sided
    ]


def to_markdown(
    rows: list[Agreement],
    label_a: str,
    label_b: str,
    alpha: float = ALPHA,
    exact: Exactness | None = None,
) -> str:
    """The figures as a table, then one verdict line (``verdict``), then the figures outside their
    intervals, so the end of the output names them."""
    compared = [r for r in rows if r.agree is not None]
    failed = [r for r in compared if not r.agree]
    not_run = [r for r in rows if r.note.startswith("not run")]
    lines = [
        f"Agreement of {label_a} (A) and {label_b} (B): {len(compared) - len(failed)} of {len(compared)} "
        f"figures agree (each at confidence 1 − {alpha:g}/{max(len(compared), 1)}, Bonferroni)"
        + (f"; {len(not_run)} held by one side only (rows marked not run)." if not_run else "."),
        "",
        *md_table(["figure", "A", "B", "n", "allowed A − B", "agree", "note"], map(_cells, rows)),
        "",
        verdict(rows, exact),
        *[f"- {what}: A {a}, B {b}, A − B allowed {allowed}" for what, a, b, _, allowed, *_ in map(_cells, failed)],
    ]
    return "\n".join(lines) + "\n"


def verdict(rows: list[Agreement], exact: Exactness | None = None) -> str:
    """One line: reproduced exactly (every cell both hold), agrees within intervals, or differs
    (figures outside their intervals); with ``exact`` (cells), why exact reproduction was not
    expected where it failed."""
    compared = [r for r in rows if r.agree is not None]
    failed = [r for r in compared if not r.agree]
    not_run = sum(r.note.startswith("not run") for r in rows)
    why = exact.why_not() if exact is not None and exact.cells else ""
    if exact is not None and exact.cells and not why and not failed:
        text = f"reproduced exactly ({len(exact.same)} of {len(exact.cells)} cells)"
    elif failed:
        text = f"differs ({len(failed)} of {len(compared)} figures outside their intervals: listed below"
        text += f"; {why})" if why else ")"
    elif compared:
        text = f"agrees within intervals ({len(compared)} of {len(compared)} figures" + (f"; {why})" if why else ")")
    else:
        text = "nothing to compare (no figure measured by both)"
    return f"verdict: {text}" + (f"; {not_run} held by one side only" if not_run else "")


def _cells(r: Agreement) -> list:
    """One figure's cells: both sides to four significant figures, the difference allowed signed."""
    verdict = MISSING if r.agree is None else ("yes" if r.agree else "**no**")
    return [
        r.what,
        fmt_number(r.a, "{:.4g}"),
        fmt_number(r.b, "{:.4g}"),
        r.n,
        fmt_bounds(r.low, r.high, "{:+.4g}".format),
        verdict,
        r.note,
    ]


def _claims_report(path: str) -> dict:
    report = read_report(path)
    if report is None:
        raise FileNotFoundError(f"no claims report at {path} (`make claims` writes results/local/claims/claims.json)")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["cells", "claims"], help="two results roots, or two claims .json files")
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--alpha", type=float, default=ALPHA, help="family-wise error rate (default 0.05)")
    parser.add_argument("--experiment", default=None, help="cells: compare this experiment's cells only")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    exact, labels = None, (f"`{args.a}`", f"`{args.b}`")
    try:
        if args.kind == "cells":
            rows = compare_cells(args.a, args.b, args.alpha, experiment=args.experiment)
            exact = compare_exactly(args.a, args.b, args.experiment)
            labels = tuple(f"`{root}` ({root_machine(root, args.experiment)})" for root in (args.a, args.b))
            print(exact.summary())
        else:
            rows = compare_claims(*(_claims_report(p) for p in (args.a, args.b)), alpha=args.alpha)
    except (FileNotFoundError, KeyError, ValueError) as err:
        print(f"agreement: {err}", file=sys.stderr)
        return 2
    print(to_markdown(rows, *labels, args.alpha, exact), end="")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 1 if any(r.agree is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
