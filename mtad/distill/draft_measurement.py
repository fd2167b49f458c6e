"""The figures of a pair's drafts measured where they are used: held-out requests of every kind
(`kinds.py`, the `heldout` task), read from the cells `mtad.experiments.drafts` runs.

(a) the kinds the draft trained on, with subjects it never saw, and (b) the kinds it never trained
on at all; each draft's results carry both groups' means and the gap (a) - (b) (`group_means`).

Several drafts of one target (the layer-subset draft and the feature head, say) are measured
side by side on the same prompts, answers and seeds:

1. Distribution match (`distribution_by_kind`): on the target's own answers at the paper's setting
   (the sampling cell's; teacher-forced, full vocabulary; a head reads the target's features, one
   token ahead) we compare p and q: argmax agreement, mean TV(p, q) at temperature 1, and the
   expected SpS acceptance sum_x min(p', q') at temperature 1 and at the paper's setting.
2. Decoding at the paper's setting (`decoding_by_kind`): the cells of sampling and of every
   speculative method with every draft (each at its registry defaults), methods interleaved
   prompt by prompt so machine load hits every run alike. Acceptance and block efficiency are
   counts (free of load); tokens/s stands beside them.
3. Cost: one-token forwards of each draft and of the target on the fast decode path (the
   caches decoding uses) over a 200-token context, median of repeats.
The goals the drafts are held to are checked here, on these numbers, and written with them: the
`measurement` section of the draft kind's file (`write_measurement`, `mtad.result_files.DRAFT`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..decoding.capabilities import reads_target_features
from ..decoding.registry import REFERENCE, VANILLA, label, specs
from ..decoding.sampling import SAMPLING_PARAMS
from ..markdown import fmt_number, fmt_percent, md_row, md_rule, md_table, with_bounds
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS, per_token_alpha, terms_markdown
from ..metrics.speed import aggregate_speed
from ..models.draft import LlamaDraftForCausalLM
from ..paper import APPROXIMATORS, MMTAD, MTAD
from ..provenance import isa_label
from ..result_files import DRAFT, read_section, write_section
from ..tasks.heldout.kinds import UNSEEN_KINDS
from .objectives import pair_stats


def decoding_methods() -> dict:
    """Every study method (the registry, `mtad.decoding.registry`) at its defaults, the paper's setting
    (decoding/params.py), in table order: what the measurement decodes with."""
    return {m: spec.settings() for m, spec in specs().items()}


# the reports' column labels, from the one glossary of acceptance figures
E_ACCEPT, ALPHA, ACCEPTED = (ACCEPTANCE_TERMS[k].label for k in ("e_accept", "alpha", "acceptance_rate"))
# the draft report's columns (the groups' tables, the results page, the draft card): the methods the
# draft card compares, vanilla SpS beside the paper's two
COMPARED = (VANILLA, MTAD, MMTAD)
GOALS = {"alpha_chat": 0.6, "alpha_each_trained_kind": 0.5, "alpha_each_unseen_kind": 0.45, "draft_cost_ratio": 0.08}


def draft_kind(draft) -> str:
    """ "head" for a feature head, "layers" for a layer-subset draft, else the model's class."""
    if reads_target_features(draft):
        return "head"
    return "layers" if isinstance(draft, LlamaDraftForCausalLM) else type(draft).__name__


@torch.no_grad()
def teacher_forced_q(draft, seq: torch.Tensor, hidden_states: tuple) -> torch.Tensor:
    """The draft's next-token logits at every position of seq [1, T] (a head reads the target's
    `hidden_states` [1, T, H] each, at the depths it declares). [T, V]"""
    if reads_target_features(draft):
        features = torch.cat([hidden_states[d] for d in draft.target_depths], dim=-1).to(draft.dtype)
        return draft.expand_logits(draft.head_logits(draft.unroll(seq, features)[0][0]))
    return draft(seq).logits[0]


@torch.no_grad()
def distribution_match(target, drafts: dict, prompts: list[list[int]], answers: list[list[int]]) -> dict:
    """Per draft: agreement of q with p on the target's answers (teacher-forced), and per request
    (`requests`: each answer's summed E[accept] at the paper's setting and its positions)."""
    sums, count = {name: {} for name in drafts}, 0
    requests = {name: [] for name in drafts}
    for prompt, answer in zip(prompts, answers):
        seq = torch.tensor(prompt + answer)[None]
        P, n = len(prompt), len(answer)
        out = target(input_ids=seq, output_hidden_states=True)
        p_logits = out.logits[0, P - 1 : P - 1 + n].float()  # [n, V], predicting the answer
        for name, draft in drafts.items():
            q_logits = teacher_forced_q(draft, seq, out.hidden_states)[P - 1 : P - 1 + n].float()
            stats = pair_stats(p_logits, q_logits)
            stats["tv"] = 0.5 * (p_logits.softmax(-1) - q_logits.softmax(-1)).abs().sum(-1)
            for key, val in stats.items():
                sums[name][key] = sums[name].get(key, 0.0) + float(val.sum())
            requests[name].append({"accept_paper_sum": float(stats["accept_paper"].sum()), "positions": n})
        count += n
    return {
        name: {"positions": count, "requests": requests[name]} | {k: v / max(count, 1) for k, v in s.items()}
        for name, s in sums.items()
    }


def totals(stats: list, method: str) -> dict:
    """The runner's cell totals (`aggregate_speed`) plus, for SpS alone, per-token alpha from its mean
    accepted length at its γ. The i.i.d. model behind alpha is a chain of γ drafted tokens, each
    accepted on its own: a tree's paths (depth below γ), SpecTr's k chains and MTAD's joint acceptance
    of a block are not that model, so the others carry no alpha (— in the tables)."""
    row = aggregate_speed(s if isinstance(s, dict) else s.as_dict() for s in stats)
    mean_accepted = row["mean_accept_length"]
    chain = method == VANILLA and mean_accepted is not None
    return row | {"alpha": per_token_alpha(mean_accepted, decoding_methods()[VANILLA].gamma) if chain else None}


def ids_by_kind(kinds: dict[str, str]) -> dict[str, list[str]]:
    """Example ids (`kinds`: example id -> its kind, in the task's order) grouped by kind, each kind's in
    that order: the requests' order within a kind, which the intervals resample alike for every figure."""
    by_kind: dict[str, list[str]] = {}
    for example_id, kind in kinds.items():
        by_kind.setdefault(kind, []).append(example_id)
    return by_kind


def decoding_by_kind(stats: dict[str, dict[str, list[dict]]], kinds: dict[str, str]) -> dict[str, dict]:
    """Each kind's rows (`rows_of`) from the cells' records: `stats` maps method -> example id -> the
    example's generation stats (`DecodeStats` dicts), `kinds` example id -> its kind (`ids_by_kind`)."""
    return {
        kind: rows_of({m: [s for i in ids for s in per_example[i]] for m, per_example in stats.items()})
        for kind, ids in ids_by_kind(kinds).items()
    }


def rows_of(by_method: dict) -> dict:
    """Each method's totals over its generations (DecodeStats or their dicts) and its speed-up
    over sampling's; the per-generation records kept under `requests` (what intervals resample)."""
    as_dicts = {m: [s if isinstance(s, dict) else s.as_dict() for s in runs] for m, runs in by_method.items()}
    rows = {m: totals(runs, m) for m, runs in as_dicts.items()}
    for m, row in rows.items():
        row["speedup_vs_sampling"] = row["tokens_per_s"] / rows[REFERENCE]["tokens_per_s"]
        row["requests"] = as_dicts[m]
    return rows


def step_ms(target, draft=None, context: int = 200, repeats: int = 15) -> float:
    """Median wall time of a one-token forward of `draft` (None: the target) on the fast decode
    path after a `context`-token prefix, as decoding runs it (a head over the target's features)."""
    from ..generation import forward_ms

    return forward_ms(target if draft is None else draft, "fast", 1, context, repeats, target=target)


def group_means(families: dict) -> dict:
    """Means over (a) the kinds trained on (held-out subjects) and (b) the kinds never trained on,
    and the gap (a) - (b): teacher-forced E[accept], SpS alpha, block efficiency and speed-up of
    every method; each kind counts once, whatever its number of positions."""
    groups = {
        "trained": [f for f in families if f not in UNSEEN_KINDS],
        "unseen": [f for f in families if f in UNSEEN_KINDS],
    }
    out = {}
    for group, kinds in groups.items():
        if not kinds:
            continue
        rows = [families[f] for f in kinds]
        methods = list(rows[0]["decoding"])
        out[group] = {
            "kinds": kinds,
            "accept_paper": sum(r["distribution"]["accept_paper"] for r in rows) / len(rows),
            "alpha_sps": sum(r["decoding"][VANILLA]["alpha"] or 0.0 for r in rows) / len(rows),
            "block_efficiency": {
                m: sum(r["decoding"][m]["block_efficiency"] for r in rows) / len(rows) for m in methods
            },
            "speedup_vs_sampling": {
                m: sum(r["decoding"][m]["speedup_vs_sampling"] for r in rows) / len(rows) for m in methods
            },
        }
    if len(out) == 2:
        out["gap"] = {k: out["trained"][k] - out["unseen"][k] for k in ("accept_paper", "alpha_sps")}
    return out


def kind_figures(family: dict, idx, methods: list[str]) -> list[float]:
    """One kind's E[accept], SpS alpha, block efficiency and speed-up of every method over the
    requests `idx` (indices into its per-request records, repeats allowed)."""
    dist = [family["distribution"]["requests"][i] for i in idx]
    accept = sum(r["accept_paper_sum"] for r in dist) / max(sum(r["positions"] for r in dist), 1)
    rows = {m: totals([family["decoding"][m]["requests"][i] for i in idx], m) for m in methods}
    speed = {m: rows[m]["tokens_per_s"] / rows[REFERENCE]["tokens_per_s"] for m in methods}
    return (
        [accept, rows[VANILLA]["alpha"] or 0.0]
        + [rows[m]["block_efficiency"] for m in methods]
        + [speed[m] for m in methods]
    )


def group_intervals(families: dict, n_resamples: int = 1000, level: float = 0.95, seed: int = 0) -> dict:
    """95% bootstrap intervals (percentile, `scipy.stats.bootstrap`) of every group's figures in
    `group_means`, resampling requests within each kind (each kind one sample, so every
    resample keeps the kinds' counts and the group stays a mean over kinds). Groups whose kinds
    hold fewer than two requests get none."""
    import numpy as np
    from scipy.stats import bootstrap

    out = {}
    for group, g in group_means(families).items():
        if group == "gap":
            continue
        kinds = g["kinds"]
        counts = [len(families[f]["distribution"].get("requests", [])) for f in kinds]
        if min(counts) < 2:
            continue
        methods = list(families[kinds[0]]["decoding"])

        def statistic(*idx):
            per_kind = [kind_figures(families[f], i, methods) for f, i in zip(kinds, idx)]
            return np.mean(per_kind, axis=0)

        samples = tuple(np.arange(n) for n in counts)
        ci = bootstrap(
            samples,
            statistic,
            vectorized=False,
            n_resamples=n_resamples,
            confidence_level=level,
            method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval
        pairs = [[float(lo), float(hi)] for lo, hi in zip(ci.low, ci.high)]
        k = len(methods)
        out[group] = {
            "level": level,
            "resampled": "requests within each kind",
            "accept_paper": pairs[0],
            "alpha_sps": pairs[1],
            "block_efficiency": dict(zip(methods, pairs[2 : 2 + k])),
            "speedup_vs_sampling": dict(zip(methods, pairs[2 + k :])),
        }
    return out


def goals_met(result: dict) -> dict[str, bool]:
    """The goals for one draft's result (its families, decoding rows and cost)."""
    fam = result["families"]

    def alpha(f: str) -> float:
        return fam[f]["decoding"][VANILLA]["alpha"] or 0.0

    trained, unseen = [f for f in fam if f not in UNSEEN_KINDS], [f for f in fam if f in UNSEEN_KINDS]
    return {
        "alpha_chat": alpha("chat") >= GOALS["alpha_chat"],
        "alpha_each_trained_kind": all(alpha(f) >= GOALS["alpha_each_trained_kind"] for f in trained),
        "alpha_each_unseen_kind": all(alpha(f) >= GOALS["alpha_each_unseen_kind"] for f in unseen),
        "mtad_at_least_sps": all(
            fam[f]["decoding"][MTAD]["block_efficiency"] >= fam[f]["decoding"][VANILLA]["block_efficiency"] for f in fam
        ),
        "draft_cost_ratio": result["cost"]["draft_over_target"] <= GOALS["draft_cost_ratio"],
    }


def distribution_by_kind(
    target, drafts: dict, prompts: dict[str, list[int]], answers: dict[str, list[int]], kinds: dict[str, str]
) -> dict[str, dict[str, dict]]:
    """`distribution_match` of every draft (name -> model) per kind of request: draft name -> kind ->
    its figures. `prompts`, `answers` (the target's own) and `kinds` are keyed by example id."""
    out = {name: {} for name in drafts}
    for kind, ids in ids_by_kind(kinds).items():
        match = distribution_match(target, drafts, [prompts[i] for i in ids], [answers[i] for i in ids])
        for name in drafts:
            out[name][kind] = match[name]
    return out


def draft_result(kind: str, families: dict, cost: dict) -> dict:
    """One draft's measurement: its kind, per kind of request {"distribution", "decoding"}, its step
    cost, and what follows from them (the goals, the groups' means and their intervals)."""
    result = {"kind": kind, "families": families, "cost": cost}
    result["goals"] = {"thresholds": GOALS, "met": goals_met(result)}
    result["groups"] = group_means(families)
    result["intervals"] = group_intervals(families)
    return result


def settings_record(per_kind: int, max_new: int, seed: int, decode_path: str, methods: dict[str, dict]) -> dict:
    """The measurement's settings as its reports state them (`methods`: each method's settings as its
    cells ran them)."""
    return {
        "per_family": per_kind,
        "max_new_tokens": max_new,
        "seed": seed,
        "methods": methods,
        "setting": SAMPLING_PARAMS,
        "decode_path": decode_path,
    }


def _setting_heading() -> str:
    """The decoding section's heading: the drafts' shapes at the methods' defaults, SpS's γ, every lossless
    method's number of chains (SpecTr) or tree (SpecInfer), the paper's methods' beams."""
    p, s = decoding_methods(), specs()
    chains = [f"{s[m].label} {p[m].num_drafts} drafts" for m in s if s[m].lossless and s[m].drafts == "chains"]
    trees = [f"{s[m].label} {p[m].k_config}" for m in s if s[m].lossless and s[m].drafts == "tree"]
    beams = f"{'/'.join(s[m].label for m in APPROXIMATORS)} W {p[MTAD].beam_width}, tau {p[MTAD].threshold}"
    return f"## Decoding at the paper's setting ({'; '.join([f'gamma {p[VANILLA].gamma}', *chains, *trees, beams])})"


def _ci(value: float, interval: list | None, digits: int = 3, unit: str = "") -> str:
    """A figure and, where measured, its interval: 0.381 [0.360, 0.402]."""
    pattern = f"{{:.{digits}f}}"
    return with_bounds(pattern.format(value) + unit, *(interval or (None, None)), pattern.format)


def group_cells(r: dict, group: str) -> tuple[str, str, str, str]:
    """A group's E[accept], SpS alpha, block efficiencies and speed-ups (SpS / MTAD / MMTAD), each
    with its bootstrap interval where the measurement has one."""
    g, ci = r["groups"][group], (r.get("intervals") or {}).get(group, {})
    be, sp = g["block_efficiency"], g["speedup_vs_sampling"]
    be_ci, sp_ci = ci.get("block_efficiency", {}), ci.get("speedup_vs_sampling", {})
    return (
        _ci(g["accept_paper"], ci.get("accept_paper")),
        _ci(g["alpha_sps"], ci.get("alpha_sps")),
        " / ".join(_ci(be[m], be_ci.get(m), 2) for m in COMPARED),
        " / ".join(_ci(sp[m], sp_ci.get(m), 2, "×") for m in COMPARED),
    )


def group_table(drafts: dict) -> list[str]:
    """(a) kinds trained on, held-out subjects; (b) kinds never trained on; and the gap; 95%
    bootstrap intervals over requests in brackets."""
    columns = " / ".join(COMPARED)
    header = ["draft", "group", "kinds", E_ACCEPT, f"SpS {ALPHA}", f"BE {columns}", f"vs {REFERENCE} {columns}"]
    return [
        "",
        "## Requests of the kinds trained on (held-out subjects) against kinds never trained on",
        "",
        md_row(header),
        md_rule("l" * len(header)),
        *(_group_row(name, r, group) for name, r in drafts.items() for group in r["groups"]),
    ]


def _group_row(name: str, r: dict, group: str) -> str:
    """A group's line; the gap's holds only its two differences, its other cells empty."""
    g = r["groups"][group]
    if group == "gap":  # written out: its empty cells are `| |`, as measure.md has always had them
        return f"| {name} | gap (a) - (b) | | {g['accept_paper']:+.3f} | {g['alpha_sps']:+.3f} | | |"
    label = "(a) trained" if group == "trained" else "(b) never trained"
    return md_row([name, label, ", ".join(g["kinds"]), *group_cells(r, group)])


def markdown(result: dict, header: list[str]) -> str:
    drafts = result["drafts"]
    lines = (
        header
        + ["", *terms_markdown(("e_accept", "alpha", "acceptance_rate", "block_efficiency"))]
        + group_table(drafts)
        + _distribution_lines(drafts)
        + _decoding_lines(drafts)
        + _cost_lines(drafts)
        + _goals_lines(drafts)
        + [
            "",
            "alpha = the per-token acceptance probability that gives sps's observed mean accepted length "
            "(sum_{i<=4} alpha^i); E[accept] = sum_x min(p', q') is its teacher-forced estimate (for a head: of "
            "the first drafted token). Block efficiency and acceptance are counts, free of machine load; tokens/s "
            "depends on the machine and its load.",
        ]
    )
    return "\n".join(lines) + "\n"


def _families(drafts: dict) -> list[str]:
    """The request families measured (every draft on the same ones)."""
    return list(next(iter(drafts.values()))["families"])


def _distribution_lines(drafts: dict) -> list[str]:
    """Per family and draft, how close q is to p on the target's own answers."""
    header = ["family", "draft", "positions", "argmax agreement", "mean TV(p, q)", "E[accept] at T = 1, untruncated"]
    rows = [
        [f, name, d["positions"], *(f"{d[k]:.3f}" for k in ("argmax_agree", "tv", "accept_t1", "accept_paper"))]
        for f in _families(drafts)
        for name, r in drafts.items()
        for d in [r["families"][f]["distribution"]]
    ]
    return [
        "",
        "## Distribution match (teacher-forced on target answers at the paper's setting)",
        "",
        *md_table([*header, E_ACCEPT], rows),
    ]


def _decoding_lines(drafts: dict) -> list[str]:
    """Per family, draft and method, the decoding's counts and speed (one sampling row per family: the same runs)."""
    rows = [
        _decoding_row(f, name, m, row)
        for f in _families(drafts)
        for i, (name, r) in enumerate(drafts.items())
        for m, row in r["families"][f]["decoding"].items()
        if not (m == REFERENCE and i)
    ]
    header = ["family", "draft", "method", "block efficiency", ACCEPTED, ALPHA, "tokens/s", "vs sampling"]
    return ["", _setting_heading(), "", *md_table(header, rows)]


def _decoding_row(family: str, name: str, method: str, row: dict) -> list:
    """A method's block efficiency, acceptance (— where it drafts nothing), speed and speed-up."""
    return [
        family,
        "—" if method == REFERENCE else name,
        method,
        f"{row['block_efficiency']:.2f}",
        fmt_number(row["acceptance_rate"], "{:.3f}", missing="—"),
        fmt_number(row["alpha"], "{:.3f}", missing="—"),
        f"{row['tokens_per_s']:.1f}",
        f"{row['speedup_vs_sampling']:.2f}x",
    ]


def _cost_lines(drafts: dict) -> list[str]:
    """Each draft's one-token step beside the target's."""
    rows = [
        [name, f"{c['target_step_ms']:.1f}", f"{c['draft_step_ms']:.1f}", fmt_percent(c["draft_over_target"])]
        for name, r in drafts.items()
        for c in [r["cost"]]
    ]
    return [
        "",
        "## Cost (fast decode path, one-token forward over a 200-token context)",
        "",
        *md_table(["draft", "target step (ms)", "draft step (ms)", "draft / target"], rows),
    ]


def _goals_lines(drafts: dict) -> list[str]:
    """Whether each draft meets each goal (`GOALS`)."""
    th = GOALS
    names = {
        "alpha_chat": (f"SpS {ALPHA} on held-out chat subjects", f">= {th['alpha_chat']}"),
        "alpha_each_trained_kind": (f"SpS {ALPHA} on every kind trained", f">= {th['alpha_each_trained_kind']}"),
        "alpha_each_unseen_kind": (f"SpS {ALPHA} on every kind never trained", f">= {th['alpha_each_unseen_kind']}"),
        "mtad_at_least_sps": ("mtad block efficiency >= sps's on every kind", "—"),
        "draft_cost_ratio": ("draft step / target step", f"<= {th['draft_cost_ratio']}"),
    }
    rows = [
        [label, threshold, *("yes" if r["goals"]["met"][key] else "no" for r in drafts.values())]
        for key, (label, threshold) in names.items()
    ]
    return ["", "## Goals", "", *md_table(["goal", "threshold", *drafts], rows)]


README_GROUPS = {  # the results page's rows: the two groups of kinds
    "trained": "(a) the kinds trained on, held-out subjects",
    "unseen": "(b) kinds never trained on",
}
README_BEGIN = "<!-- draft-measurement: rendered from results/draft/draft.json by mtad.experiments.drafts -->"
README_END = "<!-- /draft-measurement -->"


def readme_block(result: dict, name: str | None = None) -> str:
    """The results page's summary of a committed draft measurement (`results/README.md`, "The
    draft"): every figure read from `result` (the measurement section), so no prose quotes another run."""
    name = name or result["pair"]
    r = result["drafts"][name]
    env = result["environment"]
    isa = isa_label(env["cpu_isa"])
    p = decoding_methods()
    labels = " / ".join(label(m) for m in COMPARED)
    lines = [
        README_BEGIN,
        f"**Measured** (`make measure-draft`, `results/draft/measure.md`: draft `{r['file']}`, "
        f"{r['meta'].get('trained_tokens', '?')} trained tokens; {result['per_family']} held-out requests of each "
        f"of the {len(r['families'])} kinds, ≤ {result['max_new_tokens']} new tokens, the paper's setting, "
        f"γ = {p[VANILLA].gamma}, W = {p[MTAD].beam_width}, τ = {p[MTAD].threshold}, {result['threads']} torch "
        f"thread(s), {result['target_dtype']} target, {result['decode_path']} decode path; "
        f"{env['machine']}, {isa}; E[accept] teacher-forced on target answers, α from SpS's accepted "
        "lengths, BE = block efficiency):",
        "",
        *md_table(
            ["requests", E_ACCEPT, f"SpS {ALPHA}", f"BE {labels}", f"tokens/s vs {REFERENCE}, {labels}"],
            (
                [f"{label} ({len(r['groups'][group]['kinds'])})", *group_cells(r, group)]
                for group, label in README_GROUPS.items()
                if group in r["groups"]
            ),
        ),
    ]
    if r.get("intervals"):
        lines += ["", "In brackets: 95% bootstrap intervals, requests resampled within each kind."]
    alphas = {f: fam["decoding"][VANILLA]["alpha"] or 0.0 for f, fam in r["families"].items()}
    low, high = min(alphas, key=alphas.get), max(alphas, key=alphas.get)
    met = [k for k, ok in r["goals"]["met"].items() if ok]
    lines += [
        "",
        f"By kind, SpS α runs from {alphas[low]:.2f} ({low}) to {alphas[high]:.2f} ({high}); a head step costs "
        f"{fmt_percent(r['cost']['draft_over_target'])} of a target step. Goals met: {', '.join(met) or 'none'} "
        f"(of {', '.join(r['goals']['met'])}).",
        README_END,
    ]
    return "\n".join(lines)


def write_measurement(folder: Path, result: dict) -> Path:
    """`result` (`measure`'s, with the caller's provenance) as the measurement section of the draft
    kind's file in `folder` (`mtad.result_files.DRAFT`); the file's path."""
    return write_section(DRAFT, folder, "measurement", result)


def read_measurement(folder: Path | None) -> dict | None:
    """The measurement committed in `folder`'s draft kind's file (None: no folder, or none measured)."""
    return read_section(DRAFT, folder, "measurement") if folder is not None else None


def readme_summary(folder: Path) -> str | None:
    """`readme_block` of the measurement in `folder` (None when none is there): the results page's quote."""
    result = read_measurement(folder)
    return readme_block(result) if result is not None else None
