"""The "Measured" section of a draft's model card (``mtad.distill.card``), from the committed
measurement (``results/draft/draft.json``, ``make measure-draft``): each kind of request's and
each group's acceptance, block efficiency and speed-up, the gap between the kinds trained on and
those never trained on, the draft's cost and the goals."""

from __future__ import annotations

from pathlib import Path

from ..decoding.registry import VANILLA
from ..decoding.registry import label as method_label
from ..markdown import fmt_percent, md_table
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS, terms_markdown
from .draft_measurement import COMPARED, read_measurement

E_ACCEPT, ALPHA = (ACCEPTANCE_TERMS[k].label for k in ("e_accept", "alpha"))


NOT_MEASURED = [
    "## Measured",
    "",
    "Not in the committed measurement (`results/draft/draft.json`, `make measure-draft`), which measures "
    "the embedded pair's draft: `make measure-draft OTHER_DRAFT_PAIRS=<this draft's pair>` measures this file "
    "beside it and renders this section.",
]


def measured_lines(results: Path | None, kind: str | None, trained_tokens) -> list[str]:
    """The measurement in `results` (the draft kind's folder) of the draft of this kind if it measured
    this very file, else a section saying it did not (a card never keeps figures of an earlier measurement)."""
    m = read_measurement(results) or {}
    mine = [
        (name, r)
        for name, r in m.get("drafts", {}).items()
        if r["kind"] == kind and r.get("meta", {}).get("trained_tokens") == trained_tokens
    ]
    if not mine:
        return NOT_MEASURED
    name, r = mine[0]
    groups = r.get("groups", {})
    rows = [_kind_row(kind, fam) for kind, fam in r["families"].items()]
    rows += [
        _measured_row(
            f"**{label}**", g["accept_paper"], g["alpha_sps"], g["block_efficiency"], g["speedup_vs_sampling"]
        )
        for group, label in MEASURED_GROUPS.items()
        if (g := groups.get(group))
    ]
    be = [f"{method_label(m)} block efficiency" for m in COMPARED]
    header = ["kind of request", E_ACCEPT, f"SpS {ALPHA}", *be, "SpS vs sampling"]
    met = r["goals"]["met"]
    return [
        f"## Measured (`make measure-draft`, results/draft/measure.md: `{name}`)",
        "",
        *md_table(header, rows),
        "",
        *_gap_lines(groups),
        *terms_markdown(("e_accept", "alpha", "block_efficiency")),
        "",
        f"Draft step / target step (fast path): {fmt_percent(r['cost']['draft_over_target'])}.",
        "",
        "Goals: " + "; ".join(f"{k} {'met' if v else 'not met'}" for k, v in met.items()) + ".",
    ]


MEASURED_GROUPS = {"trained": "(a) kinds trained on, held-out subjects", "unseen": "(b) kinds never trained on"}


def _measured_row(label: str, accept: float, alpha: float, block_efficiency: dict, speedup: dict) -> list[str]:
    """E[accept], SpS's α, each method's block efficiency and SpS's speed-up over sampling."""
    be = (f"{block_efficiency[m]:.2f}" for m in COMPARED)
    return [label, f"{accept:.3f}", f"{alpha:.3f}", *be, f"{speedup[VANILLA]:.2f}x"]


def _kind_row(kind: str, fam: dict) -> list[str]:
    """`_measured_row` of one kind of request (its figures stored by method)."""
    d = fam["decoding"]
    be, speedup = ({m: d[m][key] for m in d} for key in ("block_efficiency", "speedup_vs_sampling"))
    return _measured_row(kind, fam["distribution"]["accept_paper"], d[VANILLA]["alpha"], be, speedup)


def _gap_lines(groups: dict) -> list[str]:
    if "gap" not in groups:
        return []
    gap = groups["gap"]
    return [f"Gap (a) − (b): {E_ACCEPT} {gap['accept_paper']:+.3f}, SpS {ALPHA} {gap['alpha_sps']:+.3f}.", ""]
