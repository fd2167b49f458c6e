"""Measuring a pair's draft where it is used: held-out prompts of each task family.

1. Distribution match: the target answers each held-out prompt at the paper's setting; on
   those answers (teacher-forced, full vocabulary) we compare p and q: argmax agreement,
   mean TV(p, q) at temperature 1, and the expected SpS acceptance sum_x min(p', q') at
   temperature 1 and at the paper's setting.
2. Decoding at the paper's setting (temperature 1, top-k 10, top-p 0.9; gamma 4, beam width
   4, threshold 0.5): sampling, sps, mtad and mmtad, interleaved prompt by prompt so machine
   load hits every method alike. Acceptance and block efficiency are counts (free of load);
   tokens/s stands beside them.
3. Cost: one-token forwards of draft and target over a 200-token cache (median of repeats).
The goals the draft is held to are checked here, on these numbers, and written with them.
"""
from __future__ import annotations

import random
import statistics
import time

import torch
from transformers import DynamicCache

from ..decoding import get_decoder
from ..decoding.sampling import SAMPLING_PARAMS
from ..metrics.speed import aggregate_speed
from .distill.corpus import PAPER_SETTING, cache_argument, encode, sample_answers
from .distill.objectives import pair_stats
from .distill.sources import FAMILIES, draw_item

METHODS = {
    "sampling": {},
    "sps": {"gamma": 4},
    "mtad": {"gamma": 4, "beam_width": 4, "threshold": 0.5},
    "mmtad": {"gamma": 4, "beam_width": 4, "threshold": 0.5},
}
GOALS = {"alpha_chat": 0.6, "alpha_each_family": 0.45, "mmtad_block_efficiency": 2.5, "draft_cost_ratio": 0.15}


def heldout_prompts(tokenizer, per_family: int, seed: int) -> dict[str, list[list[int]]]:
    """Prompt ids of held-out items (subjects never used in training) for every family."""
    rng = random.Random(seed)
    return {f: [encode(tokenizer, draw_item(f, rng, held=True)) for _ in range(per_family)] for f in FAMILIES}


@torch.no_grad()
def distribution_match(target, draft, eos: int, prompts: list[list[int]], max_new: int, seed: int) -> dict:
    answers = sample_answers(target, prompts, max_new, PAPER_SETTING, eos, seed)
    sums, count = {}, 0
    for prompt, answer in zip(prompts, answers):
        seq = torch.tensor(prompt + answer)[None]
        P, n = len(prompt), len(answer)
        p_logits = target(seq).logits[0, P - 1: P - 1 + n].float()  # [n, V], predicting the answer
        q_logits = draft(seq).logits[0, P - 1: P - 1 + n].float()
        stats = pair_stats(p_logits, q_logits)
        stats["tv"] = 0.5 * (p_logits.softmax(-1) - q_logits.softmax(-1)).abs().sum(-1)
        for key, val in stats.items():
            sums[key] = sums.get(key, 0.0) + float(val.sum())
        count += n
    return {"positions": count} | {k: v / max(count, 1) for k, v in sums.items()}


def alpha_from_accept_lengths(mean_accepted: float, gamma: int = 4) -> float:
    """Per-token acceptance probability alpha with sum_{i=1..gamma} alpha^i = mean accepted length
    (Leviathan et al.'s i.i.d. model); accepted/drafted alone understates alpha because drafting
    stops at the first rejection."""
    if mean_accepted <= 0:
        return 0.0
    if mean_accepted >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(1, gamma + 1)) < mean_accepted else (lo, mid)
    return (lo + hi) / 2


def totals(stats: list) -> dict:
    """The runner's cell totals (`aggregate_speed`) plus alpha from the mean accepted length."""
    row = aggregate_speed(s.as_dict() for s in stats)
    mean_accepted = row["mean_accept_length"]
    return row | {"alpha": None if mean_accepted is None else alpha_from_accept_lengths(mean_accepted)}


def decode_family(target, draft, eos: int, prompts: list[list[int]], max_new: int, seed: int,
                  decode_path: str = "eager") -> dict:
    """Every method on every prompt (same per-prompt seed), interleaved; totals per method."""
    stats: dict[str, list] = {m: [] for m in METHODS}
    for i, prompt in enumerate(prompts):
        ids = torch.tensor(prompt)[None]
        for method, params in METHODS.items():
            dec = get_decoder(method, target=target, draft=None if method == "sampling" else draft, decode_path=decode_path,
                              **SAMPLING_PARAMS, **params)
            out = dec.generate(ids, max_new_tokens=max_new, eos_token_id=eos, generator=torch.Generator().manual_seed(seed + i))
            stats[method].append(out.stats)
    rows = {m: totals(s) for m, s in stats.items()}
    for row in rows.values():
        row["speedup_vs_sampling"] = row["tokens_per_s"] / rows["sampling"]["tokens_per_s"]
    return rows


@torch.no_grad()
def step_ms(model, cache_len: int = 200, repeats: int = 15) -> float:
    """Median wall time of a one-token forward after a `cache_len`-token prefix."""
    kw = cache_argument(model)
    times = []
    for r in range(repeats + 2):
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.randint(0, model.config.vocab_size, (1, cache_len)), use_cache=True, **{kw: cache})
        t0 = time.perf_counter()
        model(input_ids=torch.tensor([[5]]), position_ids=torch.tensor([[cache_len]]), use_cache=True, logits_to_keep=1,
              **{kw: cache})
        if r >= 2:  # the first forwards warm up allocators and kernels
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def goals_met(result: dict) -> dict[str, bool]:
    fam = result["families"]
    return {
        "alpha_chat": (fam["chat"]["decoding"]["sps"]["alpha"] or 0) >= GOALS["alpha_chat"],
        "alpha_each_family": all((fam[f]["decoding"]["sps"]["alpha"] or 0) >= GOALS["alpha_each_family"] for f in fam),
        "mmtad_block_efficiency": all(fam[f]["decoding"]["mmtad"]["block_efficiency"] >= GOALS["mmtad_block_efficiency"]
                                      for f in fam),
        "mtad_at_least_sps": all(fam[f]["decoding"]["mtad"]["block_efficiency"] >= fam[f]["decoding"]["sps"]["block_efficiency"]
                                 for f in fam),
        "draft_cost_ratio": result["cost"]["draft_over_target"] <= GOALS["draft_cost_ratio"],
    }


def measure(pair, per_family: int = 6, max_new: int = 64, seed: int = 1234) -> dict:
    target, draft, eos = pair.target, pair.draft, pair.eos_token_id
    prompts = heldout_prompts(pair.tokenizer, per_family, seed)
    families = {}
    for f, fam_prompts in prompts.items():
        families[f] = {"distribution": distribution_match(target, draft, eos, fam_prompts, max_new, seed),
                       "decoding": decode_family(target, draft, eos, fam_prompts, max_new, seed, pair.decode_path)}
    t_ms, d_ms = step_ms(target), step_ms(draft)
    result = {"per_family": per_family, "max_new_tokens": max_new, "seed": seed, "methods": METHODS, "setting": SAMPLING_PARAMS,
              "decode_path": pair.decode_path,
              "families": families,
              "cost": {"target_step_ms": t_ms, "draft_step_ms": d_ms, "draft_over_target": d_ms / t_ms}}
    result["goals"] = {"thresholds": GOALS, "met": goals_met(result)}
    return result


def markdown(result: dict, header: list[str]) -> str:
    lines = header + ["", "## Distribution match (teacher-forced on target answers at the paper's setting)", "",
                      "| family | positions | argmax agreement | mean TV(p, q) | E[accept] T=1 | E[accept] paper |",
                      "|---|---|---|---|---|---|"]
    for f, r in result["families"].items():
        d = r["distribution"]
        lines.append(f"| {f} | {d['positions']} | {d['argmax_agree']:.3f} | {d['tv']:.3f} | {d['accept_t1']:.3f} | "
                     f"{d['accept_paper']:.3f} |")
    lines += ["", "## Decoding at the paper's setting (gamma 4; mtad/mmtad W 4, tau 0.5)", "",
              "| family | method | block efficiency | acceptance (accepted/drafted) | alpha (per token) | tokens/s | vs sampling |",
              "|---|---|---|---|---|---|---|"]
    for f, r in result["families"].items():
        for m, row in r["decoding"].items():
            acc = "—" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.3f}"
            alpha = "—" if row["alpha"] is None else f"{row['alpha']:.3f}"
            lines.append(f"| {f} | {m} | {row['block_efficiency']:.2f} | {acc} | {alpha} | {row['tokens_per_s']:.1f} | "
                         f"{row['speedup_vs_sampling']:.2f}x |")
    c = result["cost"]
    lines += ["", f"Cost of a one-token forward over a 200-token cache: target {c['target_step_ms']:.1f} ms, draft "
              f"{c['draft_step_ms']:.1f} ms ({c['draft_over_target']:.1%} of the target).", "", "## Goals", "",
              "| goal | threshold | met |", "|---|---|---|"]
    th = result["goals"]["thresholds"]
    names = {"alpha_chat": ("sps alpha on chat", f">= {th['alpha_chat']}"),
             "alpha_each_family": ("sps alpha on every family", f">= {th['alpha_each_family']}"),
             "mmtad_block_efficiency": ("mmtad block efficiency on every family", f">= {th['mmtad_block_efficiency']}"),
             "mtad_at_least_sps": ("mtad block efficiency >= sps's on every family", "—"),
             "draft_cost_ratio": ("draft step / target step", f"<= {th['draft_cost_ratio']}")}
    for key, met in result["goals"]["met"].items():
        lines.append(f"| {names[key][0]} | {names[key][1]} | {'yes' if met else 'no'} |")
    lines += ["", "alpha = the per-token acceptance probability that gives sps's observed mean accepted length "
              "(sum_{i<=4} alpha^i); E[accept] = sum_x min(p', q') is its teacher-forced estimate. Block efficiency "
              "and acceptance are counts, free of machine load; tokens/s depends on the machine and its load."]
    return "\n".join(lines) + "\n"
