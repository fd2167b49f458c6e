"""How far each reduced target's distribution is from the float32 target's (``scripts/bench.py
--q4-tv``): the q4_1 target, the same with the LM head requantized per row (the lossy single-call
layout), q4_1_bf16, the int8 targets (every Linear requantized per row) and the bfloat16 target;
per-position total-variation distance and argmax agreement on held-out chat prompts, and the
rounding of the carry over every Q4_1 block of the file. Written as the ``target_distance`` section of the
bench result file (`mtad.result_files`) and ``q4_tv.md`` beside it; `readme_distance_lines` is what
results/README.md shows of it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from mtad.markdown import md_table
from mtad.models.quantized import q4_1_fields, zero_rounding
from mtad.result_files import BENCH, read_section, write_section


def carry_rounding(gguf_path: str | Path) -> dict:
    """Over every Q4_1 block of a GGUF: how many scales d and zeros m + 8d each activation dtype
    of the int4 kernel cannot hold exactly (scales and zeros take the activations' dtype)."""
    from gguf import GGUFReader

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    out = {
        "tensors": 0,
        "blocks": 0,
        "scale_inexact": dict.fromkeys(dtypes, 0),
        "zero_inexact": dict.fromkeys(dtypes, 0),
    }
    for tensor in GGUFReader(str(gguf_path)).tensors:
        if tensor.tensor_type.name != "Q4_1":
            continue
        _, d, m = q4_1_fields(np.asarray(tensor.data))
        out["tensors"] += 1
        out["blocks"] += d.numel()
        for name, dtype in dtypes.items():
            out["scale_inexact"][name] += int((d.to(dtype).double() != d.double()).sum())
            out["zero_inexact"][name] += zero_rounding(d, m, dtype)
    return out


def _summary(tv: torch.Tensor, same: torch.Tensor) -> dict:
    return {
        "positions": int(tv.numel()),
        "mean_tv": float(tv.mean()),
        "max_tv": float(tv.max()),
        "argmax_agreement": float(same.double().mean()),
    }


@torch.no_grad()
def distribution_distance(reference, other, sequences: list[torch.Tensor], starts: list[int]) -> dict:
    """Per-position next-token distributions of two models over the same token sequences ([1, L]
    each): mean and max total-variation distance ½ Σ_v |p − q| (float64) and how often their
    argmaxes agree, over every position and over those from ``starts[i]`` on (a continuation)."""
    tvs, agree, tail = [], [], []
    for ids, start in zip(sequences, starts):
        p = torch.softmax(reference(input_ids=ids).logits[0].double(), dim=-1)  # [L, V]
        q = torch.softmax(other(input_ids=ids).logits[0].double(), dim=-1)
        tvs.append(0.5 * (p - q).abs().sum(dim=-1))  # [L]
        agree.append(p.argmax(dim=-1) == q.argmax(dim=-1))
        tail.append(torch.arange(ids.shape[1]) >= start)
    tv, same, tail = torch.cat(tvs), torch.cat(agree), torch.cat(tail)
    return {"all_positions": _summary(tv, same), "continuation": _summary(tv[tail], same[tail])}


COMPARED = ("q4_1", "q4_1_bf16", "int8", "int8_bf16", "bfloat16")  # the targets measured against float32


def q4_tv(pair: str, prompts: int, new_tokens: int, seed: int = 11) -> dict:
    """Each target of COMPARED against the float32 target on held-out chat prompts: each prompt plus
    the float32 target's greedy continuation of `new_tokens`; q4_1 also with the LM head
    requantized per row (the lossy single-call layout); the rounding of the carry over the file's blocks."""
    from mtad.models.gguf_cache import find_gguf
    from mtad.models.pairs import load_target_and_tokenizer, pair_config
    from mtad.tasks.prompts import chat_ids, make_prompts

    cfg = pair_config(pair)
    dense, tokenizer = load_target_and_tokenizer(cfg, dtype="float32")
    sequences, starts = [], []
    for text in make_prompts(prompts, seed=seed, held_out=True):
        ids = chat_ids(tokenizer, text)
        out = dense.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        sequences.append(out)
        starts.append(ids.shape[1] - 1)  # the position predicting the first new token
    spec = cfg["target"]
    result = {
        "pair": pair,
        "prompts": prompts,
        "prompt_seed": seed,
        "new_tokens": new_tokens,
        "torch_threads": torch.get_num_threads(),
        "carry": carry_rounding(find_gguf(spec["package"], str(spec["version"]), spec["file"])),
    }
    for dtype in COMPARED:
        other, _ = load_target_and_tokenizer(cfg, dtype=dtype)
        result[dtype] = distribution_distance(dense, other, sequences, starts)
        if dtype == "q4_1":
            q4 = other  # measured again below with its head requantized
    exact_head = q4.lm_head
    q4.lm_head = exact_head.requantized_per_row()
    result["per_row_head"] = distribution_distance(dense, q4, sequences, starts)
    result["per_row_head"]["head_weight_error"] = _weight_error(exact_head.weight, q4.lm_head.weight)
    q4.lm_head = exact_head
    return result


def _weight_error(exact: torch.Tensor, other: torch.Tensor) -> dict:
    """Max |Δw| and RMS |Δw| relative to the RMS weight."""
    diff = (other.double() - exact.double()).abs()
    rms = float(exact.double().pow(2).mean().sqrt())
    return {"max_abs": float(diff.max()), "rms_rel": float(diff.pow(2).mean().sqrt()) / rms}


def write_q4_tv(result: dict, out_dir: str | Path = "results/bench") -> Path:
    """`result` as the ``target_distance`` section of the bench result file in `out_dir`, and a short
    `q4_tv.md` beside it."""
    from mtad.provenance import cpu_model, git_commit

    result = dict(result, machine=f"{cpu_model()} ({os.cpu_count()} CPUs)", git=git_commit(), torch=torch.__version__)
    path = write_section(BENCH, Path(out_dir), "target_distance", result)
    (Path(out_dir) / "q4_tv.md").write_text(q4_tv_markdown(result))
    return path


def readme_distance_lines(folder: Path) -> list[str] | None:
    """What results/README.md shows of the reduced targets' distance stored in `folder` (links relative
    to that page): each target's TV and argmax agreement over all positions; None when `folder` holds none."""
    tv = read_section(BENCH, folder, "target_distance")
    if not tv:
        return None
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


def q4_tv_markdown(result: dict) -> str:
    """The short report of a `q4_tv` result (as `write_q4_tv` stores it)."""
    rows = [
        (f"{label}, {where.replace('_', ' ')}", result[key][where])
        for key, label in (
            ("q4_1", "q4_1"),
            ("per_row_head", "q4_1, head requantized per row"),
            ("q4_1_bf16", "q4_1_bf16"),
            ("int8", "int8"),
            ("int8_bf16", "int8_bf16"),
            ("bfloat16", "bfloat16"),
        )
        if key in result
        for where in ("all_positions", "continuation")
    ]
    lines = [
        "# Reduced targets against the float32 target",
        "",
        f"Pair `{result['pair']}`; {result['prompts']} held-out chat prompts (seed {result['prompt_seed']}), "
        f"each with the float32 target's greedy continuation of up to {result['new_tokens']} tokens (shorter "
        "where it ends its answer); per position, the total-variation distance between the two next-token "
        "distributions (float64 softmax); the continuation's positions start at the one predicting its first token.",
        f"Machine: {result['machine']}; torch {result['torch']}, {result['torch_threads']} thread(s); "
        f"commit {result['git'].get('commit')}. `python scripts/bench.py --pair {result['pair']} "
        f"--q4-tv {result['prompts']} --max-new-tokens {result['new_tokens']} --threads {result['torch_threads']}`.",
        "",
        "| target | positions | mean TV | max TV | argmax agreement |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, d in rows:
        lines.append(
            f"| {label} | {d['positions']} | {d['mean_tv']:.2e} | {d['max_tv']:.2e} | {d['argmax_agreement']:.4f} |"
        )
    err, carry = result["per_row_head"]["head_weight_error"], result["carry"]
    inexact = "; ".join(
        f"{what} {', '.join(f'{k} {v}' for k, v in carry[key].items())}"
        for what, key in (("scales d", "scale_inexact"), ("zeros m + 8d", "zero_inexact"))
    )
    lines += [
        "",
        f"Carry: {carry['tensors']} Q4_1 tensors, {carry['blocks']} blocks; blocks whose scale or zero "
        f"a kernel dtype cannot hold exactly: {inexact} (q4_1 runs float32, q4_1_bf16 bfloat16).",
        "",
        "The q4_1 target multiplies by the same weights as the float32 target (both are the GGUF's "
        "dequantized values), so its distance is float32 rounding only (summation order in the kernels). "
        "q4_1_bf16 rounds the scales, zeros and activations to bf16, and the bfloat16 target rounds the "
        "weights and activations: theirs is the distance of a different target. int8 requantizes every "
        "Linear of the float32 target to one int8 scale per output row (each weight moved by at most half "
        "a step, max |w| / 254), the embedding kept; int8_bf16 rounds its scales and activations to bf16 too. "
        f"Requantizing the Q8_0 head to one int8 scale per row moves its weights by up to {err['max_abs']:.2e} "
        f"(RMS {err['rms_rel']:.2%} of the RMS weight).",
        "",
    ]
    return "\n".join(lines)
