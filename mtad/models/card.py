"""Model card and training curve for an exported draft, written from the distillation work dir."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .distill import GEN_SETTINGS
from .draft import read_draft_meta


def _loss_rows(losses: list, rows: int = 16) -> list[tuple[int, int, float]]:
    """(step, tokens, mean loss over the window ending there), about `rows` windows."""
    if not losses:
        return []
    width = max(1, len(losses) // rows)
    out = []
    for end in range(width, len(losses) + 1, width):
        window = losses[end - width:end]
        out.append((window[-1][0], window[-1][1], sum(w[2] for w in window) / len(window)))
    return out


def extrapolate(curve: list[dict], key: str = "accept_paper", goal: float = 0.6, x_key: str = "trained_tokens"):
    """Least-squares fit of `key` = a + b ln(x) over the trained points; the x where it reaches
    `goal` (None when the fit does not rise). A rough guide, not a promise: curves flatten."""
    import math

    pts = [(math.log(c[x_key]), c[key]) for c in curve if c["trained_tokens"] > 0 and c[x_key] > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    a = my - b * mx
    return {"a": a, "b": b, "x_at_goal": math.exp((goal - a) / b) if b > 0 else None}


def read_curve(workdir: Path) -> list[dict]:
    path = workdir / "curve.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def plot_curves(workdir: Path, out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    state = torch.load(workdir / "checkpoint.pt", weights_only=False)["state"]
    curve = read_curve(workdir)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    rows = _loss_rows(state["losses"], rows=60)
    ax1.plot([r[1] for r in rows], [r[2] for r in rows])
    ax1.set(xlabel="training tokens", ylabel="KL(p || q) (nats)", yscale="log", title="distillation loss")
    for key, label in [("argmax_agree", "argmax agreement"), ("accept_t1", "E[accept] T=1"),
                       ("accept_paper", "E[accept] top-k 10/top-p 0.9")]:
        ax2.plot([c["trained_tokens"] for c in curve], [c[key] for c in curve], marker="o", label=label)
    ax2.set(xlabel="training tokens", ylim=(0, 1), title="held-out prompts")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def write_card(workdir: Path, draft_file: Path, card: Path, command: str, measure_json: Path | None = None) -> None:
    saved = torch.load(workdir / "checkpoint.pt", weights_only=False)
    state, cfg = saved["state"], saved["state"]["config"]
    meta = read_draft_meta(draft_file)
    from safetensors import safe_open

    with safe_open(str(draft_file), framework="pt") as f:
        n_params = sum(f.get_slice(k).get_shape().numel() if hasattr(f.get_slice(k).get_shape(), "numel")
                       else int(torch.tensor(f.get_slice(k).get_shape()).prod()) for k in f.keys())
    corpus = sorted((workdir / "corpus").glob("chunk_*.pt"))
    n_seqs = n_tokens = 0
    for path in corpus:
        records = torch.load(path, weights_only=False)["records"]
        n_seqs += len(records)
        n_tokens += sum(len(r["answer_ids"]) for r in records)
    head = meta["head_token_ids"]
    lines = [
        "# Draft model card: smollm2_135m draft", "",
        "A small draft for speculative / multi-token decoding with **SmolLM2-135M-Instruct** (the target; "
        "Apache-2.0, HuggingFaceTB). It shares the target's tokenizer and embedding.", "",
        "## Architecture and file", "",
        f"- Decoder layers {meta['source_layers']} of the target's 30 (initialised from them, then trained), "
        "the final RMSNorm, and a head.",
        f"- Head: {'restricted to ' + str(len(head)) + ' tokens' if head else 'full vocabulary'}"
        + (f" (the tokens with most target probability mass on the training corpus plus all special tokens; they "
           f"covered {state.get('head_mass_coverage', float('nan')):.3f} of that mass when chosen). Logits of every other "
           "token are -inf, so q is exactly 0 there: speculative sampling stays exact." if head else ""),
        f"- `{draft_file.name}`: only the draft's own parameters ({n_params / 1e6:.1f} M, bfloat16, "
        f"{draft_file.stat().st_size / 2**20:.1f} MiB); the token embedding (and a full head) are rebuilt from "
        "the target when the pair loads (`mtad.models.load_pair('smollm2_135m')`). Loading never trains.", "",
        "## How it was made", "",
        f"- Command: `{command}` (resumable: rerunning continues from the last checkpoint in "
        "`$MTAD_CACHE/distill/smollm2_135m/`, or from this file on a fresh clone).",
        f"- Corpus: {n_seqs} chat answers ({n_tokens} answer tokens) that the target itself sampled from templated "
        "prompts (`mtad/models/prompts.py`: explanations, essays, stories, e-mails, poems, translation, quizzes, "
        "Python/JavaScript functions, SQL over made-up schemas, summaries of articles the target wrote). Sampling "
        f"settings rotate over (temperature, top-k, top-p) = {GEN_SETTINGS}. No evaluation data (Spider, "
        "CNN/DailyMail, MT-Bench, HumanEval) is used; a fifth of the topics is held out for measurement.",
        f"- Loss: KL(p~ || q) at answer positions, p~ = the target's top-{cfg['store_top_k']} distribution (temperature 1) "
        "restricted to the head's tokens and renormalised; AdamW "
        f"lr {cfg['lr']} (warm-up {cfg['warmup_steps']} steps), {cfg['batch_seqs']} sequences per step, bfloat16 "
        f"autocast, 1 CPU thread, {cfg['train_per_gen']} trained tokens per generated token (latest run).",
        f"- Trained: {state['step']} steps, {state['trained_tokens']} answer tokens"
        + (f" (continued from `{state['warm_start']}`)" if state.get("warm_start") else "") + ".", "",
        "## Loss curve (mean KL over windows)", "", "| step | training tokens | KL (nats) |", "|---|---|---|",
    ]
    lines += [f"| {s} | {t} | {loss:.3f} |" for s, t, loss in _loss_rows(state["losses"])]
    runs = state.get("runs", [])
    if runs:
        lines += ["", "## Runs (each resumed the previous one)", "",
                  "| from tokens | lr | lr decays to | trained per generated token | generation batch | minutes (cap) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['from_tokens']} | {r['lr']} | {r['lr'] * r['lr_final_fraction']:.1e} | {r['train_per_gen']} | "
                  f"{r['gen_batch']} | {r['max_minutes']:g} |" for r in runs]
    lines += ["", "## Held-out agreement during training", "",
              "Estimated on held-out prompts from the stored top-64 target distribution: argmax agreement and "
              "the per-token SpS acceptance sum_x min(p', q') at temperature 1 (tail beyond 64 ignored, slight "
              "underestimate) and at top-k 10 / top-p 0.9 (exact).", "",
              "| training tokens | argmax agreement | E[accept] T=1 | E[accept] top-k 10 / top-p 0.9 |", "|---|---|---|---|"]
    lines += [f"| {c['trained_tokens']} | {c['argmax_agree']:.3f} | {c['accept_t1']:.3f} | {c['accept_paper']:.3f} |"
              for c in read_curve(workdir)]
    curve = read_curve(workdir)
    fits = {x: extrapolate(curve, x_key=x) for x in ("trained_tokens", "corpus_tokens")}
    if all(f and f["x_at_goal"] for f in fits.values()):
        t, c = fits["trained_tokens"], fits["corpus_tokens"]
        lines += ["", f"Log-linear fit of E[accept] (top-k 10 / top-p 0.9) over these points: "
                  f"{t['a']:.3f} + {t['b']:.4f} ln(training tokens), reaching 0.6 near {t['x_at_goal']:.2e} training "
                  f"tokens; against unique generated corpus tokens: {c['a']:.3f} + {c['b']:.4f} ln(corpus), 0.6 near "
                  f"{c['x_at_goal']:.2e} corpus tokens (a rough guide: such curves flatten)."]
    if measure_json and measure_json.exists():
        m = json.loads(measure_json.read_text())
        if m.get("draft_meta", {}).get("trained_tokens") == meta.get("trained_tokens"):
            d = m["distribution"]
            lines += ["", "## Measured (scripts/measure_draft.py, results/draft/measure.md)", "",
                      f"Held-out prompts: {m['n_prompts']}, gamma {m['gamma']}. Argmax agreement {d['argmax_agreement']:.3f}, "
                      f"mean TV {d['mean_tv']:.3f}.", "",
                      "| setting | method | tokens/s | speed-up | acceptance rate (accepted/drafted) | alpha (per token) | block efficiency |",
                      "|---|---|---|---|---|---|---|"]
            for r in m["decoding"]:
                acc = "—" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
                alpha = "—" if r.get("alpha") is None else f"{r['alpha']:.3f}"
                lines.append(f"| {r['setting']} | {r['method']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {acc} | "
                             f"{alpha} | {r['block_efficiency']:.2f} |")
            lines += ["", "Settings: t1 = temperature 1; paper = top-k 10, top-p 0.9. Goals were alpha >= 0.6 at the "
                      "paper setting and sps >= 1.3x over sampling; neither is reached yet (see the fit above)."]
    lines += ["", "Licence: Apache-2.0 (a derivative of SmolLM2-135M-Instruct)."]
    card.write_text("\n".join(lines) + "\n")
