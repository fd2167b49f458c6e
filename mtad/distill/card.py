"""Model card and training curve for an exported draft, written from the distillation work dir
(`checkpoint.pt`, `curve.jsonl`, `ab.json`, `rates.jsonl`, the corpus: `card_training`) and the
draft kind's file (`results/draft/draft.json`: its measurement, `card_measured`; its pipeline rates).
It states what was measured against the goals, whatever that is. One writer for every draft kind
(`CARDS`: what each kind's card says); the training records published beside the curve's figure
(`publish`: the A/B as the `training_ab` section, one entry per draft kind)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import PACKAGE
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS
from ..models.draft import read_draft_meta
from ..models.head import read_head_meta
from ..result_files import DRAFT, read_section, write_section
from ..tasks.heldout.kinds import UNSEEN_KINDS
from .card_measured import NOT_MEASURED, measured_lines
from .card_training import CardInputs, family_cells, head_made_lines, layer_made_lines, read_jsonl


def plot_curves(curve: list[dict], out_png: Path, draft: str) -> None:
    """`curves_figure` saved as `out_png`."""
    import matplotlib.pyplot as plt

    fig = curves_figure(curve, draft)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def curves_figure(curve: list[dict], draft: str):
    """Held-out E[accept] (top-k 10 / top-p 0.9) against trained tokens: one panel for the kinds of
    request the draft trains on, one for those it never sees, a colour per kind (20 distinct), the
    mean in black in both; each arm of an A/B its own line style; `draft` named in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..tasks.heldout.kinds import TRAINED_KINDS

    arms = sorted({c["arm"] for c in curve})
    kinds = [k for k in curve[-1] if isinstance(curve[-1][k], dict) and "accept_paper" in curve[-1][k] and k != "mean"]
    groups = {
        "kinds trained on": [k for k in kinds if k in TRAINED_KINDS],
        "kinds never trained on": [k for k in kinds if k not in TRAINED_KINDS],
    }
    groups = {title: members for title, members in groups.items() if members}
    tab20 = plt.get_cmap("tab20").colors
    colours = dict(zip(kinds, tab20[0::2] + tab20[1::2]))  # ten distinct hues first, then their light tints
    styles = dict(zip(arms, ("-", "--", ":", "-.")))
    fig, axes = plt.subplots(1, len(groups), figsize=(max(7.5, 5.2 * len(groups)), 4.2), sharey=True, squeeze=False)
    for ax, (title, members) in zip(axes[0], groups.items()):
        for arm in arms:
            rows = [c for c in curve if c["arm"] == arm]
            x = [c["trained_tokens"] for c in rows]
            prefix = f"{arm}: " if len(arms) > 1 else ""
            for kind in members:
                y = [c[kind]["accept_paper"] if kind in c else float("nan") for c in rows]
                ax.plot(x, y, marker=".", lw=1, ls=styles[arm], color=colours[kind], label=prefix + kind)
            y = [c["mean"]["accept_paper"] for c in rows]
            ax.plot(x, y, marker=".", lw=2.2, ls=styles[arm], color="black", label=f"{prefix}mean of every kind")
        ax.set(xlabel="trained tokens", ylim=(0, 1), title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, ncol=2 if len(members) * len(arms) > 8 else 1, loc="upper left")
    axes[0][0].set_ylabel("held-out E[accept], top-k 10 / top-p 0.9")
    fig.suptitle(f"{draft}: held-out acceptance per kind of request during training")
    fig.tight_layout()
    return fig


def _params(draft_file: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(draft_file), framework="pt") as f:
        return sum(int(torch.tensor(f.get_slice(k).get_shape()).prod()) for k in f.keys())


def _group_accept(row: dict) -> tuple[float, float]:
    """Mean held-out E[accept] over the trained kinds and over the never-trained ones (nan if absent)."""
    kinds = [k for k, v in row.items() if isinstance(v, dict) and "accept_paper" in v and k != "mean"]

    def mean(group):
        return sum(row[k]["accept_paper"] for k in group) / len(group) if group else float("nan")

    return mean([k for k in kinds if k not in UNSEEN_KINDS]), mean([k for k in kinds if k in UNSEEN_KINDS])


@dataclass(frozen=True)
class CurveTable:
    """A card's table of held-out acceptance during training: which rows of curve.jsonl, what they mean,
    the header and one row's cells."""

    note: str
    header: tuple[str, str]
    row: Callable[[dict], str]
    rows: Callable[[CardInputs, list[dict]], list[dict]] = lambda inputs, curve: curve


@dataclass(frozen=True)
class CardKind:
    """What the model card of one draft kind says around the sections every card has."""

    title: str
    intro: str
    read_meta: Callable[[Path], dict]
    body: Callable[[dict], str]  # what the draft is made of, from its file's metadata
    vocabulary: tuple[str, str, str]  # its label; restricted to {n} tokens; the full vocabulary
    own: str  # whose parameters the file holds
    shared: str  # what the pair takes from the target when it loads
    made: Callable[[CardInputs], list[str]]  # "How it was made" and the sections up to the curve
    curve: CurveTable
    records_prefix: str  # its training records in results/draft/


def _head_curve_row(c: dict) -> str:
    trained, unseen = _group_accept(c)
    return (
        f"| {c['trained_tokens']} | {c.get('corpus_tokens', '—')} | "
        f"{c['chat']['accept_paper']:.3f} | {trained:.3f} | {unseen:.3f} | "
        + " | ".join(f"{c['mean'].get(f'accept_paper@{s}', float('nan')):.3f}" for s in range(1, 5))
        + " |"
    )


ACCEPT = f"{ACCEPTANCE_TERMS['e_accept'].label} = {ACCEPTANCE_TERMS['e_accept'].formula}, on held-out prompts"
LICENCE = "Licence: Apache-2.0 (a derivative of SmolLM2-135M-Instruct)."

# per draft kind, under its name in the measurement's drafts and in the training_ab section
CARDS = {
    "layers": CardKind(
        title="draft",
        intro="A small draft for speculative / multi-token decoding with **SmolLM2-135M-Instruct** (the target; "
        "Apache-2.0, HuggingFaceTB). It shares the target's tokenizer and embedding.",
        read_meta=read_draft_meta,
        body=lambda meta: (
            f"Decoder layers {meta['source_layers']} of the target's 30 (initialised from them, then "
            "trained), the final RMSNorm, and a head."
        ),
        vocabulary=(
            "Head",
            "restricted to {n} tokens (logits of every other token are -inf, so q is exactly 0 there and "
            "speculative sampling stays exact)",
            "full vocabulary",
        ),
        own="draft's",
        shared="the token embedding is rebuilt from the target when the pair loads "
        "(`mtad.models.load_pair('smollm2_135m')`)",
        made=layer_made_lines,
        curve=CurveTable(
            note=f"{ACCEPT}, p rebuilt from the stored top-K.",
            header=("| trained tokens | chat | summary | sql | code | mean |", "|---|---|---|---|---|---|"),
            row=lambda c: (
                f"| {c['trained_tokens']} | " + family_cells(c, ("chat", "summary", "sql", "code", "mean")) + " |"
            ),
            rows=lambda inputs, curve: [c for c in curve if c["arm"] == inputs.state.get("winner", c["arm"])],
        ),
        records_prefix="training_",
    ),
    "head": CardKind(
        title="feature head",
        intro="An EAGLE-style feature head for speculative / multi-token decoding with **SmolLM2-135M-Instruct** "
        "(the target; Apache-2.0, HuggingFaceTB). It predicts the target's next final hidden state from the current "
        "token and the target's (or its own, while drafting) hidden state of the position before, and reads it "
        "through the target's LM head.",
        read_meta=read_head_meta,
        body=lambda meta: (
            f"Fusion Linear(2H -> H) over [token embedding; feature], {meta['num_layers']} Llama "
            "decoder layer(s) of the target's shape, a final RMSNorm; randomly initialised, then trained."
        ),
        vocabulary=(
            "Vocabulary",
            "restricted to {n} tokens (their rows of the frozen target LM head; q = 0 on every other token, so the "
            "lossless methods stay exact)",
            "the full target LM head (frozen)",
        ),
        own="head's",
        shared="the token embedding and the LM-head rows are the target's, taken when the pair loads",
        made=head_made_lines,
        curve=CurveTable(
            note=f"{ACCEPT} (p from the stored top-K); trained = mean over the kinds trained on (held-out subjects), "
            f"never trained = mean over {', '.join(UNSEEN_KINDS)}; @s = the s-th drafted token, the head running on "
            "its own features after the first (mean over every kind).",
            header=(
                "| trained tokens | corpus answer tokens | chat | trained | never trained | mean @1 | mean @2 | "
                "mean @3 | mean @4 |",
                "|---|---|---|---|---|---|---|---|---|",
            ),
            row=_head_curve_row,
        ),
        records_prefix="head_training_",
    ),
}


def _curve_lines(table: CurveTable, inputs: CardInputs) -> list[str]:
    """About 20 rows of the held-out curve, evenly spaced, and its last."""
    curve = table.rows(inputs, read_jsonl(inputs.workdir / "curve.jsonl"))
    if not curve:
        return []
    step = max(1, len(curve) // 20)
    shown = curve[::step] + ([curve[-1]] if (len(curve) - 1) % step else [])
    return ["## Held-out acceptance during training", "", table.note, "", *table.header, *map(table.row, shown), ""]


def write_card(
    kind: str,
    workdir: Path,
    draft_file: Path,
    card: Path,
    command: str,
    results: Path | None = None,
) -> None:
    """The model card of an exported draft of `kind` (a key of `CARDS`) trained in `workdir`; `results`:
    the draft kind's folder whose measurement and pipeline rates it quotes (None: neither)."""
    spec = CARDS[kind]
    state = torch.load(workdir / "checkpoint.pt", weights_only=False)["state"]
    inputs = CardInputs(workdir, command, state, spec.read_meta(draft_file), results)
    made = [*spec.made(inputs), *_curve_lines(spec.curve, inputs)]
    card.write_text("\n".join(card_lines(kind, draft_file, inputs.meta, made, results)) + "\n")


def card_lines(kind: str, draft_file: Path, meta: dict, made: list[str], results: Path | None) -> list[str]:
    """A card of a draft of `kind`: what it is (from its file), `made` (how it was made, up to its
    held-out curve), and the measurement in `results` (the draft kind's folder) of this very file."""
    spec = CARDS[kind]
    label, restricted, full = spec.vocabulary
    ids = meta["head_token_ids"]
    return [
        f"# Draft model card: smollm2_135m {spec.title}",
        "",
        spec.intro,
        "",
        "## Architecture and file",
        "",
        f"- {spec.body(meta)}",
        f"- {label}: {restricted.format(n=len(ids)) if ids else full}.",
        f"- `{draft_file.name}`: only the {spec.own} own parameters ({_params(draft_file) / 1e6:.1f} M, bfloat16, "
        f"{draft_file.stat().st_size / 2**20:.1f} MiB); {spec.shared}. Loading never trains.",
        "",
        "## How it was made",
        "",
        *made,
        *measured_lines(results, kind, meta.get("trained_tokens")),
        "",
        LICENCE,
    ]


def refresh_measured(card: Path, results: Path, kind: str | None) -> bool:
    """The card's "Measured" section rendered again from the measurement in `results` (the draft kind's
    folder; the rest of the card, which needs the training run's work dir, kept as it is); False when the
    measurement is not of this file (of this `kind`; None: of no kind), and the section then says so."""
    from safetensors import safe_open

    draft_file = card.with_suffix(".safetensors")
    with safe_open(str(draft_file), framework="pt") as f:
        trained_tokens = json.loads((f.metadata() or {}).get(PACKAGE, "{}")).get("trained_tokens")
    section = measured_lines(results, kind, trained_tokens)
    text = card.read_text()
    start, end = text.find("## Measured"), text.rfind(LICENCE)
    before = text[:start] if start >= 0 else text[:end]
    card.write_text(before + "\n".join(section) + "\n\n" + text[end:])
    return section is not NOT_MEASURED


def publish(kind: str, workdir: Path, draft_file: Path, results: Path, command: str) -> Path:
    """The work dir's training records published into `results`: curve and rates copied under the kind's
    prefix, the A/B (`ab.json`) as the kind's entry of the `training_ab` section; the curve plotted
    beside them, and the model card written beside `draft_file`; the card's path."""
    results.mkdir(parents=True, exist_ok=True)
    prefix = CARDS[kind].records_prefix  # one set of training records per draft kind
    for name in ("curve.jsonl", "rates.jsonl"):
        if (workdir / name).exists():
            shutil.copyfile(workdir / name, results / (prefix + name))
    if (workdir / "ab.json").exists():
        write_training_ab(results, kind, json.loads((workdir / "ab.json").read_text()))
    plot_curves(read_jsonl(workdir / "curve.jsonl"), results / f"{prefix}curve.png", draft_file.stem)
    card = draft_file.with_suffix(".md")
    write_card(kind, workdir, draft_file, card, command, results)
    return card


def write_training_ab(results: Path, kind: str, ab: dict) -> Path:
    """`ab` (a training work dir's `ab.json`) as the entry of draft kind `kind` (a key of `CARDS`) in the
    `training_ab` section of `results`' draft kind's file, the other kinds' entries kept; the file's path."""
    if kind not in CARDS:
        raise ValueError(f"unknown draft kind {kind!r}; valid: {', '.join(CARDS)}")
    published = read_section(DRAFT, results, "training_ab") or {}
    return write_section(DRAFT, results, "training_ab", {**published, kind: ab})


def training_ab(results: Path, kind: str) -> dict | None:
    """The training A/B published for draft kind `kind` in `results` (`write_training_ab`; None: none)."""
    return (read_section(DRAFT, results, "training_ab") or {}).get(kind)
