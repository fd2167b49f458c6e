"""The feature head's reports beside its model card, as Markdown tables: its design choices
(the ``head_design`` section of ``results/draft/draft.json`` -> ``head_design.md``: the depth and
compute-dtype A/Bs, the fused design's ablation, its variants (input noise, high depth), a round on one
GPU and the vocabulary sweep) and its confidence against the target's acceptance (the ``calibration``
section -> ``calibration.md``); and what the results page shows of both (`readme_lines`)."""

from __future__ import annotations

from pathlib import Path

from ..markdown import MISSING, fmt_percent, md_table
from ..metrics.acceptance_terms import ACCEPTANCE_TERMS
from ..result_files import DRAFT, read_section, write_section
from .card import ACCEPT


def _at(accept: dict, s: int) -> float:
    """E[accept] at draft position s (keys int, or str once read back from JSON)."""
    return accept[str(s)] if str(s) in accept else accept[s]


POSITIONS = ["@1", "@2", "@3", "@4"]  # E[accept] at the s-th drafted token
ROUNDS_KEY = "gpu_rounds"  # the head_design section: the rounds on one accelerator, in the order they ran


def at_positions(accept: dict) -> list[str]:
    """E[accept] at draft positions 1..4, one cell each."""
    return [f"{_at(accept, s):.3f}" for s in range(1, 5)]


def design_markdown(design: dict) -> str:
    """The tables of the head_design section: the depth and compute-dtype A/Bs, the fused design's
    ablation and its variants, the rounds on one GPU and the vocabulary sweep."""
    lines = [
        "# Feature head: design choices (`scripts/distill_draft.py head-design | head-noise | head-final | head-ab | "
        "head-vocab | dtype-ab`)",
        "",
        f"Held-out {ACCEPT}; @s = the s-th drafted token (the head on its own features after the first).",
    ]
    for key, title, column in (
        ("layers_ab", "Depth: from scratch on identical batches", "layers"),
        ("compute_dtype_ab", "Compute dtype: the committed head trained on identical batches", "compute"),
    ):
        if key in design:
            lines += ["", *_ab_section(design[key], title, column)]
    if "design_ablation" in design:
        lines += ["", *_ablation_section(design["design_ablation"])]
    for key in VARIANT_SECTIONS:
        if key in design:
            lines += ["", *_variants_section(key, design[key])]
    for number, round_ in enumerate(design.get(ROUNDS_KEY, []), 1):
        lines += ["", *_round_section(round_, number)]
    if "vocabulary" in design:
        lines += ["", *_vocabulary_section(design["vocabulary"])]
    return "\n".join(lines) + "\n"


def _ab_section(ab: dict, title: str, column: str) -> list[str]:
    """An A/B of heads on identical batches (`column`: what its arms vary): E[accept] per draft
    position and trained tokens/s per arm."""
    rows = [
        [n, *at_positions(arm["accept_paper"]), f"{arm['trained_tokens_per_s']:.0f}"] for n, arm in ab["arms"].items()
    ]
    return [
        f"## {title}, {ab['tokens']} answer tokens each (corpus {ab['corpus_tokens']} tokens)",
        "",
        *md_table([column, *POSITIONS, "trained tokens/s"], rows),
    ]


def _ablation_section(ab: dict) -> list[str]:
    """The fused design's levers one at a time: each arm's design, E[accept], step cost and speed,
    then the best arm."""
    stopped = (
        f"; stopped by its time limit before the {ab['target_tokens']} asked for"
        if ab.get("target_tokens", 0) > ab["tokens"]
        else ""
    )
    return [
        f"## The fused design, one lever at a time: from scratch on identical records, {ab['tokens']} answer "
        f"tokens each (corpus {ab['corpus_tokens']} tokens)" + stopped,
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
        "",
        _best_line(ab["arms"]),
    ]


def _vocabulary_section(v: dict) -> list[str]:
    """The trained head read through vocabularies of the corpus's most probable tokens: the target
    mass each covers, E[accept] and the head's step cost."""
    return [
        f"## Vocabulary: the trained head ({v['head_trained_tokens']} tokens) read through the most "
        "probable tokens of the corpus",
        "",
        *md_table(
            ["vocabulary", "target mass covered", *POSITIONS, "head step (ms)", "/ target step"],
            (
                [r["vocabulary"], f"{r['mass_coverage']:.3f}", *at_positions(r["accept_paper"])]
                + [f"{r['step_ms']:.1f}", fmt_percent(r["step_ms"] / r["target_step_ms"])]
                for r in v["rows"]
            ),
        ),
    ]


VARIANT_SECTIONS = {  # the head_design section's key -> its title and what its arms vary
    "noise_ablation": (
        "Input noise on the fused head",
        "The fused head of the ablation above without feature loss (three depths, own output layer, one "
        "layer), its input features perturbed in training by uniform noise in [-a, a] times an RMS per "
        "position: of the three depths side by side, or of each depth on its own (the depths differ "
        "several-fold in scale).",
    ),
    "high_depth_ablation": (
        "The fused head's high depth",
        "The fused head without feature loss reading layer L-3's output as its high depth (EAGLE-3's "
        "choice) or the target's final normed feature (what the target's LM head reads), beside today's "
        "one-depth head (final feature, the target's LM head, feature loss 0.1).",
    ),
}


def _best_line(arms: dict) -> str:
    """Which arm reads the highest E[accept] over positions 1–4 and which at position 1."""
    mean = {n: sum(_at(arm["accept_paper"], k) for k in range(1, 5)) / 4 for n, arm in arms.items()}
    first = {n: _at(arm["accept_paper"], 1) for n, arm in arms.items()}
    best, best_first = max(mean, key=mean.get), max(first, key=first.get)
    return (
        f"Highest mean over positions 1–4: {best} ({mean[best]:.3f}); highest at position 1: {best_first} "
        f"({first[best_first]:.3f})."
    )


def _variants_section(key: str, ab: dict) -> list[str]:
    """Heads that vary one thing of the fused head (`head_ablations.design_ablation`, untimed): E[accept] by
    position, with the depths and noise each read (no step timed: the design ablation times designs)."""
    title, intro = VARIANT_SECTIONS[key]
    rows = [
        [n, ", ".join(str(d) for d in arm["design"]["fused_depths"] or ["final"]), _noise(arm["noise"])]
        + [f"{arm['design']['reg_weight']:g}", *at_positions(arm["accept_paper"])]
        + [f"{_at(arm['accept_paper'], 4) - _at(arm['accept_paper'], 1):+.3f}"]
        for n, arm in ab["arms"].items()
    ]
    return [
        f"## {title}: from scratch on identical records, {ab['tokens']} answer tokens each "
        f"(corpus {ab['corpus_tokens']} tokens)",
        "",
        intro
        + " Depths index the target's hidden states (-1: the final normed feature). "
        + (f"Training-time test over {ab['unroll']} unrolled steps. " if ab.get("unroll") else "")
        + (f"Vocabulary: the tokens of most {ab['vocabulary_by']} on the corpus. " if "vocabulary_by" in ab else "")
        + f"Machine: {ab.get('machine', 'not recorded')}.",
        "",
        *md_table(["arm", "depths", "input noise", "feature loss", *POSITIONS, "@4 - @1"], rows),
        "",
        _best_line(ab["arms"]),
    ]


def _round_section(ab: dict, number: int) -> list[str]:
    """The `number`-th distillation round on one accelerator (`gpu_round`): its arms at equal tokens on
    identical records, and each arm's held-out E[accept] at the first drafted token as the round went on."""
    corpus, arms = ab["corpus"], ab["arms"]
    rows = [
        [n, arm["design"]["layers"], *("yes" if arm["design"][k] else "no" for k in ("fused_depths", "own_output"))]
        + [f"{arm['design']['reg_weight']:g}", *at_positions(arm["accept_paper"])]
        + [f"{_at(arm['accept_paper'], 4) - _at(arm['accept_paper'], 1):+.3f}", f"{arm['trained_tokens_per_s']:.0f}"]
        for n, arm in arms.items()
    ]
    points = [p["tokens"] for p in next(iter(arms.values())).get("curve", [])]
    curve = [[t, *(f"{_at(arm['curve'][i], 1):.3f}" for arm in arms.values())] for i, t in enumerate(points)]
    lr = ab.get("lr")
    schedule = (
        f"learning rate {lr['start']:g} annealed on a cosine to {lr['floor']:g} x it over the training time, "
        if lr and lr["floor"] != 1
        else ""
    )
    return [
        f"## Round {number} on one GPU: {len(arms)} heads side by side on identical records, {ab['tokens']} answer "
        f"tokens each (corpus {corpus['answer_tokens']} answer tokens, {corpus['distinct_prompts']} distinct "
        "prompts)",
        "",
        f"`scripts/distill_draft.py round` on {ab['device']}: {corpus['new_answers']} new target answers "
        f"({corpus['new_answer_tokens']} tokens) to new training requests beside {corpus['dataset_answers']} "
        f"earlier teacher answers, every record scored and held on the device, {ab['batch_seqs']} sequences per "
        f"step, {schedule}training-time test "
        f"over {ab['unroll']} unrolled steps, the vocabulary the 4096 tokens of most p' mass on the corpus "
        f"(covering {ab['vocabulary_mass_coverage']:.3f} of it); the held-out answers scored on the device. "
        "The committed head continues from its file; the others start from scratch (fused depths: the target's "
        "hidden states after layers 2 and 15 and its final feature).",
        "",
        *md_table(
            ["arm", "layers", "fused depths", "own output", "feature loss", *POSITIONS, "@4 - @1"]
            + ["trained tokens/s (device)"],
            rows,
        ),
        "",
        _best_line(arms),
        "",
        "@1 as the round went on:",
        "",
        *md_table(["answer tokens", *arms], curve),
    ]


def _noise(noise: dict) -> str:
    if not noise["noise"]:
        return "none"
    scale = "each depth's RMS" if noise["noise_scale"] == "depth" else "the depths' RMS together"
    return f"{noise['noise']:g} x {scale}"


def _ablation_row(name: str, arm: dict) -> list:
    """One arm of the design ablation: its levers, E[accept] by position, its cost and training rate."""
    d, acc = arm["design"], arm["accept_paper"]
    step = arm.get("step_ms")
    cost = [f"{step:.1f}", fmt_percent(step / arm["target_step_ms"])] if step else [MISSING, MISSING]
    fused, own = ("yes" if d[k] else "no" for k in ("fused_depths", "own_output"))
    levers = [name, d["layers"], fused, own, f"{d['reg_weight']:g}"]
    return levers + [
        *at_positions(acc),
        f"{_at(acc, 4) - _at(acc, 1):+.3f}",
        *cost,
        f"{arm['trained_tokens_per_s']:.0f}",
    ]


def _depths_of(ab: dict) -> str:
    fused = next((a["design"]["fused_depths"] for a in ab["arms"].values() if a["design"]["fused_depths"]), None)
    return ", ".join(str(d) for d in fused) if fused else "–"


def add_round(results: Path, report: dict) -> str:
    """A round's report (`gpu_round.run_round`, its environment cut to what identifies the machine)
    after the earlier rounds under `ROUNDS_KEY`, or in place of the same round exported again (the
    same timings); the Markdown."""
    rounds = (read_section(DRAFT, results, "head_design") or {}).get(ROUNDS_KEY, [])
    kept = [r for r in rounds if r.get("timings") != report.get("timings")]
    return write_design(results, ROUNDS_KEY, kept + [report])


def write_design(results: Path, key: str, value: dict) -> str:
    """`value` under `key` in the head_design section of `results`' draft kind's file (beside the choices
    measured before) and the tables of every choice in `head_design.md`; the Markdown."""
    design = {**(read_section(DRAFT, results, "head_design") or {}), key: value}
    write_section(DRAFT, results, "head_design", design)
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
    """`table` as the calibration section of `results`' draft kind's file and its Markdown to
    `calibration.md` (rendered from the section as stored: its keys strings); the Markdown."""
    write_section(DRAFT, results, "calibration", table)
    text = calibration_markdown(read_section(DRAFT, results, "calibration"))
    (results / "calibration.md").write_text(text)
    return text


# ----------------------------------------------------------------------------- the results page
def readme_lines(results: Path) -> list[str]:
    """What the results page (`results/README.md`, "The draft") shows of the head's reports in `results`
    (the draft kind's folder, which the page links as `draft/`): the design ablation, its variants, the
    rounds on one GPU and the calibration; nothing of a report not there."""
    design = read_section(DRAFT, results, "head_design") or {}
    calibration = read_section(DRAFT, results, "calibration")
    lines = _readme_ablation_lines(design.get("design_ablation"))
    for key, what in (("noise_ablation", "input-noise rules"), ("high_depth_ablation", "high depths")):
        lines += _readme_variant_lines(design.get(key), what)
    rounds = design.get(ROUNDS_KEY, [])  # in the order they ran (`add_round`)
    for number, round_ in enumerate(rounds, 1):
        lines += _readme_round_lines(round_, number, last=number == len(rounds))
    return lines + (_readme_calibration_lines(calibration) if calibration else [])


def _readme_ablation_lines(design: dict | None) -> list[str]:
    """Each lever of the fused design: E[accept] at positions 1-4 and the head's step over the target's."""
    if not design:
        return []
    rows = [
        [arm, *at_positions(r["accept_paper"]), f"{r['step_ms'] / r['target_step_ms']:.1%}"]
        for arm, r in design["arms"].items()
    ]
    return [
        f"Each lever of the fused head design from scratch on identical records "
        f"([`draft/head_design.md`](draft/head_design.md): {design['tokens']} answer tokens per arm, "
        f"{design['unroll']} unrolled steps, {design['machine']}); held-out "
        f"{ACCEPTANCE_TERMS['e_accept'].label} at drafted positions 1–4 "
        "and the head's step over the target's:",
        "",
        *md_table(["arm", *POSITIONS, "head step / target step"], rows),
        "",
    ]


def _readme_variant_lines(variants: dict | None, what: str) -> list[str]:
    if not variants:
        return []
    rows = [[arm, *at_positions(r["accept_paper"])] for arm, r in variants["arms"].items()]
    return [
        f"The fused head under other {what}, the same way ({variants['tokens']} answer tokens per arm):",
        "",
        *md_table(["arm", *POSITIONS], rows),
        "",
    ]


def _readme_round_lines(round_: dict, number: int, last: bool) -> list[str]:
    """A round on one GPU: each arm's E[accept] at positions 1-4; the last round's head is the default."""
    rows = [[arm, *at_positions(r["accept_paper"])] for arm, r in round_["arms"].items()]
    corpus = round_["corpus"]
    return [
        f"Round {number} on one GPU ({round_['device']}: [`draft/head_design.md`](draft/head_design.md)), "
        f"the committed head continued beside designs from scratch on identical records, {round_['tokens']} "
        f"answer tokens per arm over a corpus of {corpus['answer_tokens']} answer tokens and "
        f"{corpus['distinct_prompts']} distinct prompts" + ("; the continued head is the default:" if last else ":"),
        "",
        *md_table(["arm", *POSITIONS], rows),
        "",
    ]


def _readme_calibration_lines(calibration: dict) -> list[str]:
    """Per drafted position: how often the head is unsure (confidence < the first edge) and how
    often what it drafts is then accepted, against its confident drafts (≥ the last edge but one)."""
    edges = calibration["edges"]
    rows = []
    for position, bins in calibration["rows"].items():
        low = [b for b in bins if b["bin"][1] <= edges[1]]
        high = [b for b in bins if b["bin"][0] >= edges[-3]]
        rows.append([position, _share(low), _weighted(low), _share(high), _weighted(high)])
    header = ["drafted position", f"drafted at confidence < {edges[1]:g}", "accepted there"]
    header += [f"drafted at confidence ≥ {edges[-3]:g}", "accepted there"]
    return [
        f"The head's confidence against the target's acceptance of what it drafts "
        f"([`draft/calibration.md`](draft/calibration.md), head `{calibration['head']}`):",
        "",
        *md_table(header, rows),
    ]


def _share(bins: list[dict]) -> str:
    return f"{sum(b['drafted_share'] for b in bins):.1%}"


def _weighted(bins: list[dict]) -> str:
    """The acceptance of the drafts in `bins`, weighted by how often each bin is drafted ("–": never)."""
    share = sum(b["drafted_share"] for b in bins)
    return "–" if not share else f"{sum(b['drafted_share'] * b['acceptance'] for b in bins) / share:.2f}"
