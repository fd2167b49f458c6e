"""``results/README.md``: what the committed results show, every figure rendered from them.

The prose of the project's READMEs quotes no measured figure (``tests/test_quoted_figures.py``);
this page is where a reader finds them, one section per committed result, each naming the file
it reads and the machine that measured it, and the stamp of the `make results` step that wrote it
(machine, pinned target dtype, commit). ``make results-readme`` (``scripts/results_readme.py``)
writes it and ``make results`` ends with it; ``tests/test_results_readme.py`` fails when a committed
result changed without it. The draft measurement's summary is rendered by the distillation package
(``mtad.distill.draft_measurement.readme_block``), which the report may not import: the caller passes it in.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from mtad.decoding.registry import study_methods
from mtad.markdown import fmt_count_range, fmt_ratio, md_table, with_bounds
from mtad.metrics.acceptance_terms import ACCEPTANCE_TERMS, terms_markdown
from mtad.provenance import read_stamp, stamp_label
from mtad.records import read_json
from mtad.report.claims_markdown import claims_table
from mtad.report.claims_report import read_report
from mtad.report.tables import TASK_ORDER

TITLE = "# What the committed results show"
INTRO = (
    "Rendered by `make results-readme` from the files named in each section (never typed by hand). "
    "Counts (block efficiency, acceptance) are free of machine load; tokens/s and its ratios belong "
    "to the machine named beside them."
)
VERDICTS = ("reproduced", "contradicted", "inconclusive", "no verdict", "not measurable here", "not run")


def _absent(path: Path, command: str) -> list[str]:
    return [f"Not committed: `{path}` (`{command}` writes it)."]


# ----------------------------------------------------------------------------- claims
def claims_section(results: Path) -> list[str]:
    path = results / "claims" / "claims.json"
    report = read_report(path)
    if not report:
        return _absent(path, "make claims")
    design = report["design"]
    counts = Counter((c["claim"], c["verdict"]) for c in report["claims"])
    claims = sorted({c["claim"] for c in report["claims"]})
    lines = [
        f"From [`claims/claims.md`](claims/claims.md) (experiment `{report['experiment']}`, pair `{report['pair']}`, "
        f"{', '.join(design['machine']) or 'machine unknown'}, dtype {', '.join(design['dtype']) or '?'}, "
        f"{', '.join(design['threads']) or '?'} torch thread(s), commit "
        f"{', '.join(c[:10] for c in design['commits']) or 'unknown'}). Verdicts per claim:",
        "",
        *md_table(
            ["claim", *VERDICTS],
            [[claim, *(str(counts[(claim, v)]) for v in VERDICTS)] for claim in claims],
        ),
        "",
        *claims_table(report),
    ]
    return lines


# ----------------------------------------------------------------------------- Table 2
def _table2_cell(row: pd.Series) -> str:
    if pd.isna(row.get("tokens_per_s")):
        return "not run"
    low, high = row.get("speedup_vs_sampling_low"), row.get("speedup_vs_sampling_high")
    speedup = with_bounds(fmt_ratio(row["speedup_vs_sampling"]), low, high, fmt_ratio)
    return f"{speedup}, BE {row['block_efficiency']:.2f}"


def table2_section(results: Path) -> list[str]:
    path = results / "tables" / "table2.csv"
    if not path.is_file():
        return _absent(path, "make reproduce-table2")
    df = pd.read_csv(path)
    df = df[df["variant"].isna() | (df["variant"] == "")]  # the fixed rows: the adaptive ones stay in table2.md
    tasks = [t for t in TASK_ORDER if t in set(df["task"])]
    methods = [m for m in study_methods() if m in set(df["method"])]
    rows = []
    for method in methods:
        cells = [df[(df["task"] == task) & (df["method"] == method)] for task in tasks]
        rows.append([method, *(_table2_cell(c.iloc[0]) if len(c) else "–" for c in cells)])
    lines = [
        f"From [`tables/table2.md`](tables/table2.md) (pair {', '.join(sorted(set(df['pair'])))}, "
        f"{', '.join(sorted(set(df['machine'])))}, dtype {', '.join(sorted(set(df['dtype'])))}, "
        f"{fmt_count_range(df['examples'])} examples per cell; cells timed one after "
        "another, not interleaved). Tokens/s over sampling's on the same task, its 95% interval, and block "
        "efficiency (BE: tokens per target call):",
        "",
        *md_table(["method", *tasks], rows),
        "",
    ]
    drafting = df[df["method"] != "sampling"].dropna(subset=["block_efficiency"])
    if len(drafting):
        best_be = drafting.loc[drafting.groupby("task", sort=False)["block_efficiency"].idxmax()]
        timed = df.dropna(subset=["tokens_per_s"])
        fastest = timed.loc[timed.groupby("task", sort=False)["tokens_per_s"].idxmax()]
        lines += [
            "Highest block efficiency per task: "
            + ", ".join(f"{r.task} {r.method} ({r.block_efficiency:.2f})" for r in best_be.itertuples())
            + ". Fastest per task: "
            + ", ".join(f"{r.task} {r.method} ({r.tokens_per_s:.1f} tok/s)" for r in fastest.itertuples())
            + "."
        ]
    return lines


# ----------------------------------------------------------------------------- sweeps
def sweeps_section(results: Path) -> list[str]:
    from mtad.report.cells import load_cells
    from mtad.report.sweeps import SWEEP_PARAMS, sweep_frame

    cells = load_cells(results / "runs")
    lines = [
        "From the cells under `runs/sweeps/` (figures: [`figures/`](figures/)). Per method and swept value: "
        "tokens/s over sampling's, block efficiency (BE) and acceptance (accepted / drafted).",
    ]
    for sweep, param in SWEEP_PARAMS.items():
        try:
            frame = sweep_frame(cells, sweep)
        except ValueError as err:
            lines += ["", f"**{param}**: {err}"]
            continue
        done = frame[~frame["missing"]]
        if done.empty:
            lines += ["", f"**{param}**: not run (`make sweep-{sweep.replace('_', '-')}`)."]
            continue
        values = sorted(done["value"].unique())
        rows = []
        for method in [m for m in study_methods() if m in set(done["method"])]:
            mine = done[done["method"] == method].set_index("value")
            rows.append(
                [method]
                + [
                    "–"
                    if v not in mine.index
                    else f"{fmt_ratio(mine.loc[v, 'speedup_vs_sampling'])}, BE {mine.loc[v, 'block_efficiency']:.2f}, "
                    f"acc. {mine.loc[v, 'acceptance_rate']:.2f}"
                    for v in values
                ]
            )
        first = done.iloc[0]
        commits = ", ".join(sorted({str(c)[:10] for c in done["git_commit"].fillna("unknown")}))  # cells' code
        lines += [
            "",
            f"**{param}** (pair `{first['pair']}`, task `{first['task']}`, {first.get('machine', '?')}, "
            f"commit {commits}):",
            "",
            *md_table([param, *(f"{v:g}" for v in values)], rows),
        ]
    return lines


# ----------------------------------------------------------------------------- the draft
def _mean_accept(row: dict, positions: int = 4) -> list[float]:
    return [row["accept_paper"][str(s)] for s in range(1, positions + 1)]


def draft_section(results: Path, measurement: str | None) -> list[str]:
    """`measurement`: the draft measurement's summary block (None: not committed)."""
    lines = _absent(results / "draft" / "measure.json", "make measure-draft") if measurement is None else []
    if measurement is not None:
        lines += [measurement, ""]
    head_design = read_json(results / "draft" / "head_design.json") or {}
    design = head_design.get("design_ablation")
    if design:
        rows = [
            [arm, *(f"{a:.3f}" for a in _mean_accept(r)), f"{r['step_ms'] / r['target_step_ms']:.1%}"]
            for arm, r in design["arms"].items()
        ]
        lines += [
            f"Each lever of the fused head design from scratch on identical records "
            f"([`draft/head_design.md`](draft/head_design.md): {design['tokens']} answer tokens per arm, "
            f"{design['unroll']} unrolled steps, {design['machine']}); held-out "
            f"{ACCEPTANCE_TERMS['e_accept'].label} at drafted positions 1–4 "
            "and the head's step over the target's:",
            "",
            *md_table(["arm", "@1", "@2", "@3", "@4", "head step / target step"], rows),
            "",
        ]
    for key, what in (("noise_ablation", "input-noise rules"), ("high_depth_ablation", "high depths")):
        variants = head_design.get(key)
        if variants:
            rows = [[arm, *(f"{a:.3f}" for a in _mean_accept(r))] for arm, r in variants["arms"].items()]
            lines += [
                f"The fused head under other {what}, the same way ({variants['tokens']} answer tokens per arm):",
                "",
                *md_table(["arm", "@1", "@2", "@3", "@4"], rows),
                "",
            ]
    rounds = head_design.get("gpu_rounds", [])  # in the order they ran (distill.head_reports.add_round)
    for number, round_ in enumerate(rounds, 1):
        rows = [[arm, *(f"{a:.3f}" for a in _mean_accept(r))] for arm, r in round_["arms"].items()]
        corpus = round_["corpus"]
        lines += [
            f"Round {number} on one GPU ({round_['device']}: [`draft/head_design.md`](draft/head_design.md)), "
            f"the committed head continued beside designs from scratch on identical records, {round_['tokens']} "
            f"answer tokens per arm over a corpus of {corpus['answer_tokens']} answer tokens and "
            f"{corpus['distinct_prompts']} distinct prompts"
            + ("; the continued head is the default:" if number == len(rounds) else ":"),
            "",
            *md_table(["arm", "@1", "@2", "@3", "@4"], rows),
            "",
        ]
    calibration = read_json(results / "draft" / "calibration.json")
    if calibration:
        lines += _calibration_lines(calibration)
    return lines


def _calibration_lines(calibration: dict) -> list[str]:
    """Per drafted position: how often the head is unsure (confidence < the first edge) and how
    often what it drafts is then accepted, against its confident drafts (≥ the last edge but one)."""
    edges = calibration["edges"]
    rows = []
    for position, bins in calibration["rows"].items():
        low = [b for b in bins if b["bin"][1] <= edges[1]]
        high = [b for b in bins if b["bin"][0] >= edges[-3]]
        rows.append(
            [
                position,
                f"{sum(b['drafted_share'] for b in low):.1%}",
                _weighted(low),
                f"{sum(b['drafted_share'] for b in high):.1%}",
                _weighted(high),
            ]
        )
    return [
        f"The head's confidence against the target's acceptance of what it drafts "
        f"([`draft/calibration.md`](draft/calibration.md), head `{calibration['head']}`):",
        "",
        *md_table(
            [
                "drafted position",
                f"drafted at confidence < {edges[1]:g}",
                "accepted there",
                f"drafted at confidence ≥ {edges[-3]:g}",
                "accepted there",
            ],
            rows,
        ),
    ]


def _weighted(bins: list[dict]) -> str:
    share = sum(b["drafted_share"] for b in bins)
    return "–" if not share else f"{sum(b['drafted_share'] * b['acceptance'] for b in bins) / share:.2f}"


# ----------------------------------------------------------------------------- speed
def speed_section(results: Path) -> list[str]:
    path = results / "bench" / "bench.json"
    payload = read_json(path)
    if not payload:
        return _absent(path, "make bench")
    env, setup = payload["environment"], payload["setup"]
    target = env["target_dtype"]
    ours = [r for r in payload["rows"] if r["impl"] == "ours" and r["path"] == "fast" and not r["target_dtype"]]
    table = [
        [
            r["method"] + _variant_suffix(r),
            f"{r['tokens_per_s']:.1f}",
            fmt_ratio(r.get("speedup_vs_sampling")),
            f"{r.get('block_efficiency') or 1:.2f}",
            "–" if not r.get("acceptance_rate") else f"{r['acceptance_rate']:.2f}",
        ]
        for r in ours
    ]
    # Hugging Face's generate() (every path and target) and our sampling off the fast path, tok/s
    references = [
        f"{r['label']} {r['tokens_per_s']:.1f}"
        for r in payload["rows"]
        if r["method"] == "sampling"
        and (r["impl"] == "hf" or r["path"] != "fast" and not (r["variant"] or r["target_dtype"]))
    ]
    reduced = [
        f"{r['label']} {r['tokens_per_s']:.1f}" for r in payload["rows"] if r["impl"] == "ours" and r["target_dtype"]
    ]
    llama = payload.get("llama_cpp") or {}
    lines = [
        f"From [`bench/bench.md`](bench/bench.md) (pair `{setup['pair']}`, {setup['prompts']} prompts × "
        f"{setup['max_new_tokens']} new tokens, median of {setup['reps']} alternating repetitions, "
        f"{env['machine']}, {env['threads']} torch threads, target {target}; the goals, the "
        "verification-cost curve and the cost model's held-out test are there; where a block's time goes: "
        "[`bench/profile.md`](bench/profile.md)). Every method on the fast path:",
        "",
        *md_table(["method", "tok/s", "vs sampling", "block eff.", ACCEPTANCE_TERMS["acceptance_rate"].label], table),
        "",
        "The references, tok/s: " + ", ".join(references) + ".",
    ]
    if reduced:
        lines += ["Sampling with the 4-bit targets (see below), tok/s: " + ", ".join(reduced) + "."]
    if llama.get("sampled_tokens_per_s"):
        lines += [
            f"llama.cpp on the same GGUF, {llama['threads']} threads: sampled {llama['sampled_tokens_per_s']:.1f}, "
            f"greedy {llama['greedy_tokens_per_s']:.1f} tok/s."
        ]
    return lines


def _variant_suffix(row: dict) -> str:
    """How a variant row differs from its fixed method: adaptive drafting, or a node budget."""
    if row["variant"] == "adaptive":
        return " (adaptive)"
    if row["variant"] == "budget":
        return f" (node budget {row['params']['node_budget']})"
    return ""


# ----------------------------------------------------------------------------- reduced targets
def reduced_targets_section(results: Path) -> list[str]:
    path = results / "bench" / "q4_tv.json"
    tv = read_json(path)
    if not tv:
        return _absent(path, "scripts/bench.py --q4-tv 20")
    rows = [
        [
            dtype,
            f"{d['all_positions']['mean_tv']:.1e}",
            f"{d['all_positions']['max_tv']:.1e}",
            f"{d['all_positions']['argmax_agreement']:.1%}",
            str(d["all_positions"]["positions"]),
        ]
        for dtype, d in tv.items()
        if isinstance(d, dict) and "all_positions" in d
    ]
    return [
        f"From [`bench/q4_tv.md`](bench/q4_tv.md) ({tv['prompts']} held-out prompts, ≤ {tv['new_tokens']} greedy "
        f"tokens each): each reduced target's next-token distribution against the float32 target's.",
        "",
        *md_table(["target", "mean TV", "max TV", "argmax agreement", "positions"], rows),
    ]


# ----------------------------------------------------------------------------- reproduction
def reproduction_section(results: Path) -> list[str]:
    envs = sorted((results / "verify").glob("**/env.json"))
    if not envs:
        return _absent(results / "verify", "make verify-reference")
    first = read_json(envs[0])
    commit = (first.get("git") or {}).get("commit") or "unknown"
    return [
        f"`make verify` reruns the {len(envs)} reference cells under [`verify/`](verify/) (every method, "
        f"dtype {first.get('dtype')}, measured on {first.get('machine')}, commit {commit[:10]}) and requires "
        "the same tokens, counts and scores.",
    ]


# ----------------------------------------------------------------------------- the steps that wrote them
def stamp_lines(results: Path, steps: tuple[str, ...]) -> list[str]:
    """Where, in what and at which commit the `make results` steps that wrote a section ran, read from
    their stamps (`mtad.provenance.read_stamp`); nothing where none is stamped."""
    stamped = [(step, stamp) for step in steps if (stamp := read_stamp(results, step))]
    if not stamped:
        return []
    ran = "; ".join(f"`{step}` on {stamp_label(stamp)}" for step, stamp in stamped)
    return [f"Written by `make results`, step {ran}.", ""]


def render(results: Path, draft_measurement: str | None) -> str:
    """The page; `draft_measurement`: `mtad.distill.draft_measurement.readme_block` of the committed measure.json."""
    sections = (  # title, the steps of `make results` that write it, its body
        ("Claims", ("claims",), claims_section(results)),
        ("Table 2", ("reproduce-table2",), table2_section(results)),
        ("Sweeps", ("sweeps",), sweeps_section(results)),
        ("The draft", ("measure-draft",), draft_section(results, draft_measurement)),
        ("Speed", ("profiles", "bench"), speed_section(results)),
        ("Reduced targets", ("q4-tv",), reduced_targets_section(results)),
        ("Reproduction", ("verify-reference",), reproduction_section(results)),
    )
    lines = [TITLE, "", INTRO, "", *terms_markdown()]
    for title, steps, body in sections:
        lines += ["", f"## {title}", "", *stamp_lines(results, steps), *body]
    return "\n".join(lines).rstrip() + "\n"
