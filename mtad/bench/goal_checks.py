"""The benchmark's goals and whether a run's measurements meet them: (a) a whole forward within
`OVERHEAD_GOAL` of its matrix products, (b) the 5-token products within `FIVE_OVER_ONE_GOAL` of the
1-token ones, (c) sampling `VS_HF_GOAL` times HF eager generate(), (d) sampling with a 4-bit target
`VS_LLAMA_CPP_GOAL` times llama.cpp on the same GGUF, (e) the compiled path's first use within
`COMPILE_GOAL_S` where it is the default, (f) the cost model's held-out speed-ups from counts within
`modelled.AGREEMENT` of the measured ones, (g) the speculative methods' `SPEEDUP_GOALS` over sampling,
(h) adaptive drafting no slower than fixed and SpS and MTAD with it `ADAPTIVE_GOAL`, (i) host work within
`HOST_GOAL` of every method's time on short and long prompts, (j) our fastest exact method at
least llama.cpp's sampling, (k) the target's one-row products within `FLOOR_GOAL` of the weight
bandwidth floor and its 17-row products within `SEVENTEEN_OVER_ONE_GOAL` of them, (l) the target's
one-token step within `STEP_OVER_PRODUCTS_GOAL` of its products and a 5-token verification within
`VERIFY_OVER_STEP_GOAL` of that step (`goals`); and the payload readers they share with the
report (`fast_target_curves`, `default_dtype`, `q4_sampling_tokens_per_s`)."""

from __future__ import annotations

from mtad.bench.llama_cpp import llama_cpp_unmeasured
from mtad.bench.modelled import AGREEMENT, modelled_rows
from mtad.bench.rows import find_row, tokens_per_s
from mtad.bench.timings import HF_REFERENCE_DTYPE
from mtad.decoding.registry import REFERENCE, VANILLA, MethodsWhere
from mtad.models.quantized import Q4_1_DTYPES
from mtad.paper import MMTAD, MTAD

OVERHEAD_GOAL = 1.25  # whole forward / its matrix products, at 1 and 5 tokens (fast path, each dtype)
FIVE_OVER_ONE_GOAL = 1.3  # 5-token / 1-token matrix products (the pair's target dtype)
VS_HF_GOAL = 1.6  # our sampling (fast) / HF eager generate(), tokens/s
VS_LLAMA_CPP_GOAL = 1.0  # our sampling with the q4_1 target / llama.cpp sampling on the same GGUF
COMPILE_GOAL_S = 60.0  # first use of the compiled path, where it is the default
SPEEDUP_GOALS = {VANILLA: 1.3, MTAD: 1.3}  # tokens/s over sampling at the methods' defaults, fast path
AT_LEAST = {MMTAD: MTAD}  # a method whose goal is another's measured speed-up (and so that one's goal)
ADAPTIVE_GOAL = 1.5  # SpS and MTAD with adaptive drafting over sampling, fast path
ADAPTIVE_GOAL_METHODS = (VANILLA, MTAD)  # the methods `ADAPTIVE_GOAL` is set for
HOST_GOAL = 0.04  # host work (outside both models' forwards) / a method's decode time
FLOOR_GOAL = 1.2  # 1-row products / the weight-bandwidth floor (the pair's target dtype, fast path)
SEVENTEEN_OVER_ONE_GOAL = 1.6  # 17-row / 1-row products: a 16-node tree verified near a step's price
STEP_OVER_PRODUCTS_GOAL = 1.4  # whole 1-token forward / its products: the step outside its products
VERIFY_OVER_STEP_GOAL = 1.3  # whole 5-token forward / whole 1-token forward: SpS's verification


def _by_width(ms: dict) -> dict[int, float]:
    return {int(k): v for k, v in ms.items()}  # JSON keys are strings


def fast_target_curves(payload: dict) -> dict[str, dict]:
    """dtype -> the curve's fast-path target row with products measured, at the run's thread count
    (else at the most threads measured)."""
    curve = payload.get("curve") or {}
    threads = payload["environment"]["threads"]
    rows = [c for c in curve.get("curves", []) if c["model"] == "target" and c["path"] == "fast" and c.get("linear_ms")]
    return {c["dtype"]: c for c in sorted(rows, key=lambda c: (c["threads"] == threads, c["threads"]))}


def default_dtype(payload: dict) -> str:
    return payload["environment"]["target_dtype"]


def _goal(key: str, goal: str, measured: str, met: bool | None) -> dict:
    return {"key": key, "goal": goal, "measured": measured, "met": met}


def _overhead_goals(payload: dict) -> list[dict]:
    """(a) per dtype: whole forward ≤ 1.25x its matrix products at 1 and 5 tokens (fast path)."""
    out = []
    for dtype, c in fast_target_curves(payload).items():
        ms, linear = _by_width(c["ms"]), _by_width(c["linear_ms"])
        ratios = {w: ms[w] / linear[w] for w in (1, 5) if w in ms and w in linear}
        text = ", ".join(f"{w} tok {r:.2f}x" for w, r in ratios.items()) + f" ({c['threads']} threads)"
        met = all(r <= OVERHEAD_GOAL for r in ratios.values()) if len(ratios) == 2 else None
        goal = f"{dtype}: whole forward ≤ {OVERHEAD_GOAL}x its matrix products at 1 and 5 tokens (fast path)"
        out.append(_goal("a", goal, text if ratios else "not measured", met))
    return out or [_goal("a", f"whole forward ≤ {OVERHEAD_GOAL}x its matrix products", "not measured (no curve)", None)]


def _five_over_one_goal(payload: dict) -> dict:
    """(b) the default dtype's 5-token matrix products ≤ 1.3x its 1-token ones."""
    dtype = default_dtype(payload)
    goal = f"{dtype} (the pair's target): 5-token matrix products ≤ {FIVE_OVER_ONE_GOAL}x the 1-token ones"
    c = fast_target_curves(payload).get(dtype)
    linear = _by_width(c["linear_ms"]) if c else {}
    if not {1, 5} <= set(linear):
        return _goal("b", goal, "not measured", None)
    ratio = linear[5] / linear[1]
    return _goal("b", goal, f"{ratio:.2f}x ({linear[5]:.2f} / {linear[1]:.2f} ms)", ratio <= FIVE_OVER_ONE_GOAL)


def q4_sampling_tokens_per_s(payload: dict, dtype: str = "q4_1") -> float | None:
    """Sampling with the 4-bit target `dtype`: its own row, or the pair's when its target is it."""
    own = None if default_dtype(payload) == dtype else dtype
    return tokens_per_s(payload.get("rows", []), REFERENCE, target_dtype=own)


def _vs_hf_goal(payload: dict) -> dict:
    """(c) sampling on the default pair ≥ 1.6x HF eager generate() on the float32 target, tokens/s."""
    rows = payload.get("rows", [])
    ours = tokens_per_s(rows, REFERENCE)
    hf = tokens_per_s(rows, REFERENCE, "eager", impl="hf", target_dtype=HF_REFERENCE_DTYPE) or (
        tokens_per_s(rows, REFERENCE, "eager", impl="hf") if default_dtype(payload) == HF_REFERENCE_DTYPE else None
    )
    goal = (
        f"sampling (fast path, target {default_dtype(payload)}) ≥ {VS_HF_GOAL}x HF eager generate() "
        f"on the {HF_REFERENCE_DTYPE} target, tokens/s"
    )
    if not (ours and hf):
        return _goal("c", goal, "not measured", None)
    return _goal("c", goal, f"{ours / hf:.2f}x ({ours:.1f} / {hf:.1f} tok/s)", ours / hf >= VS_HF_GOAL)


def _vs_llama_cpp_goals(payload: dict) -> list[dict]:
    """(d) per 4-bit target (q4_1, q4_1_bf16): sampling ≥ 1.0x llama.cpp sampling on the same GGUF."""
    out = []
    for dtype in Q4_1_DTYPES:  # the GGUF's own blocks: what llama.cpp runs too
        goal = f"sampling with the {dtype} target ≥ {VS_LLAMA_CPP_GOAL}x llama.cpp on the same GGUF, tokens/s"
        llama, ours = payload.get("llama_cpp"), q4_sampling_tokens_per_s(payload, dtype)
        why = llama_cpp_unmeasured(llama)
        if why or not ours:
            out.append(_goal("d", goal, f"not measurable ({why or f'no {dtype} sampling row'})", None))
            continue
        ref = llama["sampled_tokens_per_s"]
        out.append(
            _goal("d", goal, f"{ours / ref:.2f}x ({ours:.1f} / {ref:.1f} tok/s)", ours / ref >= VS_LLAMA_CPP_GOAL)
        )
    return out


def _compile_goal(payload: dict) -> dict:
    """(e) first use of the compiled path ≤ 60 s where it is the default path."""
    path = payload["setup"].get("default_path")
    goal = f"compilation, where it is the default, ≤ {COMPILE_GOAL_S:.0f} s first use"
    if path != "compiled":
        return _goal("e", goal, f"not the default (the default path here is {path or 'not recorded'})", None)
    warm = payload.get("warm_up", {}).get(f"{REFERENCE} compiled")
    if not warm:
        return _goal("e", goal, "not measured (run with --compiled)", None)
    first = warm["first_call_s"]
    return _goal("e", goal, f"{first:.1f} s (of which compile {warm['compile_s']:.1f} s)", first <= COMPILE_GOAL_S)


def goals(payload: dict) -> list[dict]:
    """Each goal with its measured value and met (True / False; None: not measurable or not applicable)."""
    return [
        *_overhead_goals(payload),
        _five_over_one_goal(payload),
        _vs_hf_goal(payload),
        *_vs_llama_cpp_goals(payload),
        _compile_goal(payload),
        _cost_model_goal(payload),
        _speedup_goal(payload),
        _adaptive_goal(payload),
        _host_goal(payload),
        _fastest_exact_goal(payload),
        _floor_goal(payload),
        _step_goal(payload),
    ]


def _target_curve(payload: dict) -> dict | None:
    """The pair's target dtype's fast-path curve row, products measured (None: none)."""
    return fast_target_curves(payload).get(default_dtype(payload))


def _floor_goal(payload: dict) -> dict:
    """(k) the target's 1-row products ≤ `FLOOR_GOAL` x the weight-bandwidth floor (weight bytes /
    copy bandwidth: a step cannot read its weights faster), and 17-row ≤ `SEVENTEEN_OVER_ONE_GOAL` x
    1-row (a run that timed the products at fewer widths says which it lacks)."""
    dtype = default_dtype(payload)
    goal = (
        f"{dtype} (the pair's target): products at 1 row ≤ {FLOOR_GOAL}x the weight-bandwidth floor, "
        f"at 17 rows ≤ {SEVENTEEN_OVER_ONE_GOAL}x 1 row (fast path)"
    )
    c = _target_curve(payload)
    linear = _by_width(c["linear_ms"]) if c else {}
    if 1 not in linear or not c.get("floor_ms"):
        return _goal("k", goal, "not measured", None)
    floor = linear[1] / c["floor_ms"]
    text = f"1 row {floor:.2f}x the floor ({linear[1]:.2f} / {c['floor_ms']:.2f} ms)"
    if 17 not in linear:
        widest = max(linear)
        text += f"; 17 rows not timed alone (widest: {widest} rows, {linear[widest] / linear[1]:.2f}x 1 row)"
        return _goal("k", goal, text, False if floor > FLOOR_GOAL else None)
    wide = linear[17] / linear[1]
    text += f"; 17 rows {wide:.2f}x 1 row"
    return _goal("k", goal, text, floor <= FLOOR_GOAL and wide <= SEVENTEEN_OVER_ONE_GOAL)


def _step_goal(payload: dict) -> dict:
    """(l) the target's whole 1-token forward ≤ `STEP_OVER_PRODUCTS_GOAL` x its products, and its
    whole 5-token forward ≤ `VERIFY_OVER_STEP_GOAL` x the 1-token one (fast path)."""
    dtype = default_dtype(payload)
    goal = (
        f"{dtype} (the pair's target): 1-token step ≤ {STEP_OVER_PRODUCTS_GOAL}x its products, "
        f"5-token verification ≤ {VERIFY_OVER_STEP_GOAL}x the step (fast path)"
    )
    c = _target_curve(payload)
    ms, linear = (_by_width(c["ms"]), _by_width(c["linear_ms"])) if c else ({}, {})
    if not (1 in linear and {1, 5} <= set(ms)):
        return _goal("l", goal, "not measured", None)
    step, verify = ms[1] / linear[1], ms[5] / ms[1]
    text = f"step {step:.2f}x its products ({ms[1]:.1f} / {linear[1]:.1f} ms); 5 tokens {verify:.2f}x the step"
    return _goal("l", goal, text, step <= STEP_OVER_PRODUCTS_GOAL and verify <= VERIFY_OVER_STEP_GOAL)


EXACT_METHODS = MethodsWhere(lambda spec: spec.lossless)  # the methods whose output is the target's distribution


def _fastest_exact_goal(payload: dict) -> dict:
    """(j) our fastest exact method (any of its fast-path rows, any target) ≥ llama.cpp's sampling
    on the same GGUF, tokens/s."""
    goal = f"our fastest exact method ({', '.join(EXACT_METHODS)}; fast path) ≥ llama.cpp's sampling, tokens/s"
    llama = payload.get("llama_cpp")
    why = llama_cpp_unmeasured(llama)
    rows = [r for r in payload.get("rows", []) if r["method"] in EXACT_METHODS and r["path"] == "fast"]
    if why or not rows:
        return _goal("j", goal, f"not measurable ({why or 'no fast-path rows'})", None)
    best, ref = max(rows, key=lambda r: r["tokens_per_s"]), llama["sampled_tokens_per_s"]
    ratio = best["tokens_per_s"] / ref
    text = f"{best['label']}: {ratio:.2f}x ({best['tokens_per_s']:.1f} / {ref:.1f} tok/s)"
    return _goal("j", goal, text, ratio >= 1)


def _speedup_goal(payload: dict) -> dict:
    """(g) each method of `SPEEDUP_GOALS` at least its speed-up over sampling on the fast path, and
    mmtad ≥ mtad ≥ sampling on the eager and fast paths (MMTAD's extra drafting must pay for itself)."""
    goal = (
        ", ".join(f"{m} ≥ {g}x" for m, g in SPEEDUP_GOALS.items())
        + f" {REFERENCE} (fast path); "
        + "; ".join(f"{m} ≥ {other} ≥ {REFERENCE}" for m, other in AT_LEAST.items())
        + " on both paths, tokens/s"
    )
    paths = ("eager", "fast")
    methods = (REFERENCE, *SPEEDUP_GOALS, *AT_LEAST)
    speed = {(m, p): tokens_per_s(payload.get("rows", []), m, p) for m in methods for p in paths}
    if None in speed.values():
        return _goal("g", goal, "not measured", None)
    ratios = {m: speed[m, "fast"] / speed[REFERENCE, "fast"] for m in SPEEDUP_GOALS}
    ordered = all(speed[m, p] >= speed[other, p] >= speed[REFERENCE, p] for m, other in AT_LEAST.items() for p in paths)
    text = ", ".join(f"{m} {r:.2f}x" for m, r in ratios.items()) + f"; order {'holds' if ordered else 'broken'}"
    return _goal("g", goal, text, ordered and all(ratios[m] >= g for m, g in SPEEDUP_GOALS.items()))


def _adaptive_goal(payload: dict) -> dict:
    """(h) every adaptive (and node-budget) row at least as fast as its fixed self, and SpS and MTAD
    with adaptive drafting ≥ `ADAPTIVE_GOAL` x sampling (fast path)."""
    goal = (
        f"adaptive drafting: every method ≥ its fixed self, and {', '.join(ADAPTIVE_GOAL_METHODS)} "
        f"≥ {ADAPTIVE_GOAL}x {REFERENCE} (fast path)"
    )
    rows = [r for r in payload.get("rows", []) if r.get("variant") and r.get("vs_fixed")]
    speedups = {
        m: (find_row(rows, m, variant="adaptive") or {}).get("speedup_vs_sampling") for m in ADAPTIVE_GOAL_METHODS
    }
    if not rows or None in speedups.values():
        return _goal("h", goal, "not measured", None)
    slowest = min(rows, key=lambda r: r["vs_fixed"])
    text = f"slowest vs fixed: {slowest['label']} {slowest['vs_fixed']:.2f}x; " + ", ".join(
        f"{m} adaptive {s:.2f}x sampling" for m, s in speedups.items()
    )
    return _goal("h", goal, text, slowest["vs_fixed"] >= 1 and min(speedups.values()) >= ADAPTIVE_GOAL)


def _host_goal(payload: dict) -> dict:
    """(i) host work ≤ `HOST_GOAL` of every method's time on the fast path, on the short prompts and
    (where measured) the long ones."""
    goal = f"host work ≤ {HOST_GOAL:.0%} of every method's time (fast path), short and long prompts"
    groups = {"short": [r for r in payload.get("rows", []) if r["impl"] == "ours" and r["path"] == "fast"]}
    groups["long"] = (payload.get("long") or {}).get("rows", [])
    worst = {g: max(rows, key=lambda r: r["other_frac"]) for g, rows in groups.items() if rows}
    if not worst:
        return _goal("i", goal, "not measured", None)
    text = "; ".join(f"{g}: worst {r['label']} {r['other_frac']:.1%}" for g, r in worst.items())
    if "long" not in worst:
        text += "; long prompts not measured"
    met = all(r["other_frac"] <= HOST_GOAL for r in worst.values())
    return _goal("i", goal, text, met if "long" in worst or not met else None)


def _cost_model_goal(payload: dict) -> dict:
    """(f) every method's modelled speed-up over sampling (its counts × a profile fitted to the other
    prompts' generations, the host term measured by a block profile of this machine where there is
    one) within ``AGREEMENT`` of the measured one over the same generations, and closer on average
    than both baselines: a constant speed-up of 1, and one host term shared by all methods."""
    goal = (
        f"cost model: speed-ups from counts, each prompt's fitted on the others, within {AGREEMENT:.0%} of "
        "measured over the same generations, and closer than a constant 1.0 and a host term shared by all methods"
    )
    rows = [r for r in modelled_rows(payload) if r["agrees"] is not None]
    if not rows:
        return _goal("f", goal, "not measured (the rows record no generations of two or more prompts)", None)

    def error(r: dict, modelled: float | None) -> float:
        return abs(modelled / r["measured_pooled"] - 1) if modelled else float("inf")

    worst = max(rows, key=lambda r: error(r, r["modelled"]))
    mean = {
        "model": sum(error(r, r["modelled"]) for r in rows) / len(rows),
        "constant 1.0": sum(error(r, 1.0) for r in rows) / len(rows),
        "shared host": sum(error(r, r["modelled_by_host"].get("shared")) for r in rows) / len(rows),
    }
    host = {"measured": "measured by `make profile`", "fitted": "fitted per method (no block profile of this machine)"}
    terms = "; ".join(f"{path}: {host[t]}" for path, t in {r["path"]: r["host_term"] for r in rows}.items())
    baselines = "; ".join(
        f"{name}: {sum(bool(r['baselines_agree'][name]) for r in rows)} agree, mean error {mean[name]:.1%}"
        for name in ("constant 1.0", "shared host")
    )
    text = (
        f"host term ({terms}): {sum(r['agrees'] for r in rows)} of {len(rows)} agree, mean error "
        f"{mean['model']:.1%}; worst {worst['label']}: {worst['modelled']:.2f}x modelled, "
        f"{worst['measured_pooled']:.2f}x measured. Baselines: {baselines}"
    )
    ahead = mean["model"] < min(mean["constant 1.0"], mean["shared host"])
    return _goal("f", goal, text, all(r["agrees"] for r in rows) and ahead)
