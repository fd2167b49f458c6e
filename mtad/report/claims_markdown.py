"""The claims report (``mtad.report.claims_report.build_report``) as Markdown: rule, table, details."""

from __future__ import annotations

from mtad.markdown import MISSING, fmt_number, fmt_percent, fmt_ratio, fmt_signed, md_table
from mtad.paper import CITATION, MMTAD, MTAD, VERSIONS

THEORY_STATEMENT = (
    "Both versions state that MTJD, sampling several tokens from their joint distribution, lowers perplexity, "
    'and that MTAD (the later version: and MMTAD) approximates exact MTJD "with a bounded error". Which '
    "distance that bound is about, its form in γ, W, τ and q, and its assumptions could not be sourced "
    "(mtad/decoding/README.md), so the distances below carry no verdict. What is tested is what MTJD is for: "
    "the expected raw target joint log-likelihood of the first γ tokens emitted, E[log p(x_1..x_γ)], higher "
    "than sampling's (verdict on the interval of the difference)."
)


def fmt(value, unit: str) -> str:
    """A value of a claim row in its unit's spelling (``mtad.markdown``)."""
    if value is None:
        return MISSING
    if unit == "relative":
        return fmt_percent(value, signed=True)
    if unit == "ratio":
        return fmt_ratio(value)
    if unit in ("tv", "logprob"):
        return fmt_signed(value)
    return fmt_number(value, "{:.3g}")  # p-values and anything else


def fmt_interval(interval: dict | None, unit: str) -> str:
    if not interval or interval.get("estimate") is None:
        return MISSING
    text = fmt(interval["estimate"], unit)
    if unit == "pvalue":
        return f"p = {text}"
    if interval.get("low") is not None:
        return f"{text} [{fmt(interval['low'], unit)}, {fmt(interval['high'], unit)}]"
    return f"{text} ({interval['reason']})" if interval.get("reason") else text


def _ours(claim: dict, interval: dict) -> str:
    """Our estimate with its interval; where a ratio has no interval (a zero denominator on some
    resamples), the summed scores it came from instead of a bare ratio (0 of 10 against 1 of 10
    is no −100% one could read as a measurement)."""
    scores = (claim.get("beside") or {}).get("scores")
    if scores and interval.get("low") is None:
        return f"{scores} (too few for a ratio: {interval.get('reason') or 'no interval'})"
    return fmt_interval(interval, claim["unit"])


def _c5_verdict(found: dict) -> str:
    """A C5 E[log p] verdict after Holm's adjustment, the unadjusted one beside it where they differ."""
    if "holm_verdict" not in found:
        return found["verdict"]
    if found["holm_verdict"] == found["verdict"]:
        return f"{found['verdict']} (Holm p {found['holm_p']:.2g})"
    return f"{found['holm_verdict']} (Holm p {found['holm_p']:.2g}; unadjusted: {found['verdict']})"


def _holm_line(holm: dict) -> str:
    return (
        f"The verdicts on E[log p] are adjusted for their number: Holm's step-down over all "
        f"{holm['comparisons']} (point, method) comparisons of the grid, two-sided p-values from each "
        f"difference's estimate and standard error; a verdict stands where the adjusted p < {holm['alpha']:.2g}, "
        "so the chance of any false verdict among them stays at most that."
    )


def fmt_effect(effect, unit: str) -> str:
    """The smallest effect detected, as ± in the row's unit (mtad.markdown has no ± spelling)."""
    if effect is None:
        return MISSING
    return f"±{100 * effect:.1f}%" if unit == "relative" else f"±{effect:.2f}" if unit == "ratio" else f"±{effect:.3f}"


def _modelled(modelled: dict) -> str:
    """The modelled speed ratio, named for what it rests on: the counts (block efficiency, the draft's
    calls and rows) and the per-layer overhead the roofline assumes (``cost_model.Accelerator``),
    which the report records beside the ratio."""
    ratio = fmt_ratio(modelled["ratio"])
    overhead = fmt_number(1e3 * modelled["layer_overhead_ms"], "{:g} µs")  # stored in ms
    return (
        f"modelled from the counts (block efficiency, draft rows) on an {modelled['accelerator']} roofline "
        f"with {overhead} per layer per forward (assumed): {ratio}; not measured"
    )


def _beside(claim: dict) -> str:
    parts = []
    ratio = claim["beside"].get("block_efficiency_ratio")
    if ratio:
        parts.append(f"block efficiency ratio {fmt_interval(ratio, 'ratio')}")
    modelled = claim["beside"].get("modelled")
    if modelled:
        parts.append(_modelled(modelled))
    if claim.get("reason"):
        parts.append(claim["reason"])
    scores = claim["beside"].get("scores")
    if scores and (claim.get("interval") or {}).get("low") is not None:
        parts.append(scores)
    if claim.get("source") not in ("", None, "tiny model") and claim["source"] != claim.get("_experiment"):
        parts.append(f"from experiment `{claim['source']}`")
    return "; ".join(parts)


def _coverage_lines(coverage: dict) -> list[str]:
    """The cells planned, present and missing (a partial report says what it lacks), and the methods
    some rows need that no module registers here."""
    missing = coverage["missing"]
    line = f"- cells: {coverage['planned']} planned, {coverage['present']} present, {len(missing)} missing"
    lines = [line + (f" from `{coverage['root']}`: {', '.join(missing)}" if missing else "")]
    unregistered = coverage["unregistered"]
    if unregistered:
        lines.append(
            f"- not registered here: {', '.join(unregistered)}; the rows that compare "
            f"{'it' if len(unregistered) == 1 else 'them'} are not run (no module under mtad/decoding/ declares "
            f"{'it' if len(unregistered) == 1 else 'them'})"
        )
    return lines


CLAIMS_HEADER = (
    "claim",
    "comparison",
    "prompts",
    "paper",
    "paper version",
    "ours, 95% CI",
    "n",
    "verdict",
    "paper's figure in CI",
    "detectable effect",
    "beside",
)


def claims_table(report: dict) -> list[str]:
    """One row per claim: the paper's figure, ours with its interval, n, the verdict and its power."""
    return md_table(CLAIMS_HEADER, [_claim_row({**c, "_experiment": report["experiment"]}) for c in report["claims"]])


def _claim_row(claim: dict) -> list[str]:
    interval = claim["interval"] or {}
    return [
        claim["claim"],
        claim["comparison"],
        claim["task"],
        claim["paper"],
        claim.get("version_label") or MISSING,
        _ours(claim, interval),
        interval.get("n") or MISSING,
        f"**{claim['verdict']}**",
        {True: "yes", False: "no", None: MISSING}[claim["paper_inside_interval"]],
        fmt_effect(claim["detectable_effect"], claim["unit"]),
        _beside(claim),
    ]


def to_markdown(report: dict) -> str:
    """The whole report: the header (versions, rule, design), the claims table, and C5's and C6's
    sections where the report holds the tiny models' results."""
    lines = [*_header_lines(report), "", *claims_table(report)]
    theory = report.get("theory") or {}
    if theory:
        lines += _c5_lines(theory) + _c6_lines(theory)
    return "\n".join(lines) + "\n"


def _header_lines(report: dict) -> list[str]:
    """The title, the paper versions tested, the verdict rule and the design behind the estimates."""
    return [
        f"# Claims of the paper, tested — experiment `{report['experiment']}`, pair `{report['pair']}`",
        "",
        f"Paper: {CITATION}. Versions whose figures are tested (each row names its own):",
        "",
        *[
            f"- **{v.label}**: {v.states}" + (f" ({', '.join(v.addresses)})" if v.addresses else "")
            for v in VERSIONS.values()
        ],
        "",
        f"**Verdict rule.** {report['rule']}",
        "",
        *_design_lines(report),
    ]


def _design_lines(report: dict) -> list[str]:
    """The design bullets: intervals, timing, power, machine and code, prompts per task, the cells'
    coverage and where the report was built from."""
    design = report["design"]
    return [
        f"- intervals: {int(100 * report['confidence'])}% paired bootstrap over prompts "
        f"({report['interval_method']}, {report['resamples']} resamples; percentile where BCa is undefined); "
        f"every method ran on the same prompts with the same per-sample seeds",
        f"- timings: {report['timing']}; block efficiency (tokens per target call) is beside every speed "
        "ratio because it is free of machine load",
        "- detectable effect: the smallest true effect this sample detects with 80% power at 95% confidence "
        "(normal approximation, 2.8 bootstrap standard errors)",
        f"- machine: {', '.join(design['machine']) or 'unknown'}; dtype: {', '.join(design['dtype']) or '?'}; "
        f"torch threads: {', '.join(design['threads']) or '?'}; seed: {', '.join(design['seed']) or '?'}; "
        f"commit(s): {', '.join(c[:10] for c in design['commits']) or 'unknown'}",
        *[_prompts_line(task, t) for task, t in design["tasks"].items()],
        *_coverage_lines(report["coverage"]),
        f"- built {report['built']} from `{report['results_root']}/{report['experiment']}`",
    ]


def _prompts_line(task: str, t: dict) -> str:
    """One task's prompts per method against those planned, and its token limit."""
    return (
        f"- prompts `{task}`: "
        + ", ".join(f"{m} {n}" for m, n in t["examples_per_method"].items())
        + f" of {t['examples_planned']} planned, ≤ {t['max_new_tokens']} new tokens"
        + ("" if t["status"] == ["complete"] else f" (cells: {', '.join(t['status'])})")
    )


C5_HEADER = (
    "| point | E[log p]: sampling | exact MTJD | MTAD, 95% CI | MMTAD, 95% CI | TV(sampling, MTJD) | "
    "TV(MTAD, MTJD) | TV(MMTAD, MTJD) | noise floor | verdict MTAD / MMTAD |"
)
C6_INTRO = (
    "The first tokens of each lossless method against the target's enumerated distribution (the "
    "chi-square test of the exactness tests; cells expecting < 5 draws pooled). Verdict: reproduced "
    "when the test does not reject at α; a test that does not reject vouches only for distances it "
    "can see, so each row states the smallest TV it detects with 80% power (in the direction "
    "hardest to see among its cells)."
)
C6_HEADER = (
    "| method | parameters | processing | tokens | runs | chi-square p | TV | detects TV ≥ (80% power) | α | verdict |"  # noqa: E501 (a table's header row)
)


def _c5_lines(theory: dict) -> list[str]:
    """C5's section: the statement tested, the setting, one row per point, Holm's note and the
    zero-distance check."""
    lines = [
        "",
        "## C5 — MTAD and MMTAD against exact multi-token joint decoding (tiny models)",
        "",
        THEORY_STATEMENT,
        "",
        _theory_setting(theory),
        "",
        C5_HEADER,
        "|---|---|---|---|---|---|---|---|---|---|",
        *map(_c5_row, theory["approximation"]),
    ]
    check = theory["zero_distance_check"]
    return lines + [
        "",
        _holm_line(theory["holm"]),
        "",
        f"Zero distance where the maths says so: with q = p, W = 1 and no truncation the single beam is "
        f"drawn from p itself and every block is accepted for any τ < 1, so MTAD's first γ = {check['gamma']} "
        f"tokens follow exact MTJD; chi-square over {check['runs']} runs: p = {check['pvalue']:.3g}, "
        f"TV = {check['tv']:.3f} (**{check['verdict']}** at α = {check['alpha']}){_detects(check)}.",
    ]


def _c5_row(row: dict) -> str:
    """One C5 point: exact E[log p] of sampling and MTJD, MTAD's and MMTAD's with their intervals,
    the distances to MTJD, the noise floor and the verdicts."""
    e, m = row["exact"], row["methods"]
    star = " (paper's point)" if row["point"]["operating"] else ""
    one, many = m[MTAD], m[MMTAD]
    return (
        f"| {row['label']}{star} | {fmt(e['sampling_logp'], 'logprob')} | "
        f"{fmt(e['mtjd_logp'], 'logprob')} | {fmt_interval(one['logp'], 'logprob')} | "
        f"{fmt_interval(many['logp'], 'logprob')} | {e['tv_sampling_mtjd']:.3f} | "
        f"{_tv(one['tv_mtjd'])} | {_tv(many['tv_mtjd'])} | {e['noise_floor']:.3f} | "
        f"{_c5_verdict(one)} / {_c5_verdict(many)} |"
    )


def _c6_lines(theory: dict) -> list[str]:
    """C6's section: what is tested, then one chi-square test per lossless method configuration."""
    return [
        "",
        "## C6 — the baselines are exact (tiny model)",
        "",
        C6_INTRO,
        "",
        C6_HEADER,
        "|---|---|---|---|---|---|---|---|---|---|",
        *map(_c6_row, theory["exactness"]),
    ]


def _c6_row(row: dict) -> str:
    """One C6 test: the method and its settings, the draws, the p-value, TV and what it can detect."""
    params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
    processing = ", ".join(f"{k} {v}" for k, v in row["processing"].items())
    return (
        f"| {row['method']} | {params} | {processing} | {row['tokens']} | {row['runs']} | "
        f"{row['pvalue']:.3g} | {row['tv']:.3f} | {_fmt3(row['detectable_tv'])} | {row['alpha']} | "
        f"{row['verdict']} |"
    )


def _fmt3(value) -> str:
    return fmt_number(value, "{:.3f}")


def _detects(test: dict) -> str:
    if test["detectable_tv"] is None:
        return ""
    return f"; the test detects TV ≥ {test['detectable_tv']:.3f} with {test['power']:.0%} power"


def _tv(interval: dict) -> str:
    return fmt_interval(interval, "tv").replace("+", "")


def _theory_setting(theory: dict) -> str:
    s = theory["theory_settings"]
    return (
        f"Target: a random 2-layer Llama over V tokens; draft q ≠ p: another seed of it (far from p); "
        "drafts 'TV d': the target's weights moved toward that seed's until the mean per-token TV from p "
        "along p's own continuations is d (the paper's premise: a draft that mostly agrees); prompt of 3 tokens; "
        f"{theory['approximation'][0]['runs'] if theory['approximation'] else '?'} seeded runs per method and "
        f"point. Sampling setting temperature 1, top-k {s['top_k']}, top-p {s['top_p']}: applied per token by "
        "MTAD, MMTAD and sampling, and to whole blocks by exact MTJD (without truncation MTJD would be the law "
        "of sampling itself). E[log p] is the raw target log-probability of the first γ tokens emitted, in "
        "nats: exact for sampling and MTJD (enumerated), the mean over runs with a percentile bootstrap "
        "interval for MTAD and MMTAD. TV values are plug-in distances over the runs, biased upwards by about "
        "the noise floor (the distance an exact sampler shows with as many runs). Verdict: the interval of "
        "E[log p] minus sampling's against 0 (the paper: higher)."
    )
