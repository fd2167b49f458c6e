"""What the measured costs pick and predict: per model, the dtype and thread count of the cheapest
fast-path step and verification among the dense dtypes (`calibration`, the candidates for a
study's default target), and the SpS speed-up over sampling those costs predict
(`predicted_sps_speedup`, `predictions`) at fixed α and at the α the measured block efficiency
implies (the glossary's `per_token_alpha`)."""

from __future__ import annotations

from mtad.bench.rows import find_row
from mtad.decoding.registry import VANILLA
from mtad.metrics.acceptance_terms import per_token_alpha

DENSE_DTYPES = ("float32", "bfloat16", "float16", "float64")  # a study's default target is one of these
TREE_COST_TOLERANCE = 1.3  # what a tree's verification may cost over a one-token step


def node_budget(ms: dict[int, float], tolerance: float = TREE_COST_TOLERANCE) -> int:
    """The most draft-tree nodes one verification holds at most `tolerance` × a one-token step on a
    verification-cost curve (ms by forward width): the widest measured forward within it, less the
    fresh token every verification carries (0: no tree fits)."""
    return max(w for w, t in ms.items() if t <= tolerance * ms[1]) - 1


def calibration(curve: dict, gamma: int) -> dict:
    """Per model, the (dtype, threads) of the fast path with the cheapest 1-token step and, for
    the target, the cheapest (γ+1)-token verification (what speculative methods pay), among the
    dense dtypes: the candidates for a study's default target (the published weights, or their
    bf16 rounding). Where a 4-bit target is cheaper still, it is named under `fastest` (a
    different target: the fastest way to decode, not a default). `node_budget`: the tree
    SpecInfer's and MMTAD's `node_budget` setting should keep to on that target (`node_budget`)."""
    fast = [c for c in curve["curves"] if c["path"] == "fast"]

    def pick(model: str, width: int, dtypes=None) -> dict | None:
        rows = [
            c for c in fast if c["model"] == model and width in c["ms"] and (dtypes is None or c["dtype"] in dtypes)
        ]
        best = min(rows, key=lambda c: c["ms"][width], default=None)
        return best and {"dtype": best["dtype"], "threads": best["threads"], "ms": best["ms"][width], "width": width}

    out = {}
    for key, model, width in (
        ("target_step", "target", 1),
        ("target_verify", "target", gamma + 1),
        ("draft_step", "draft", 1),
    ):
        dense, best = pick(model, width, DENSE_DTYPES), pick(model, width)
        out[key] = dense or best
        if dense and best["ms"] < dense["ms"]:
            out[key] = {**dense, "fastest": best}
    step = out["target_step"]
    if step:  # the tree methods' node budget (EAGLE-2's dynamic tree) on the chosen target's own curve
        ms = next(
            c["ms"]
            for c in fast
            if (c["model"], c["dtype"], c["threads"]) == ("target", step["dtype"], step["threads"])
        )
        out["node_budget"] = {"nodes": node_budget(ms), "tolerance": TREE_COST_TOLERANCE, "dtype": step["dtype"]}
    return out


def predicted_sps_speedup(alpha: float, gamma: int, draft_ms: float, step_ms: float, verify_ms: float) -> float:
    """Expected SpS tokens/s over sampling at per-token acceptance α (Leviathan et al.): block
    efficiency (1 - α^(γ+1)) / (1 - α) per iteration of γ draft steps and one (γ+1)-token verification."""
    block = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return block * step_ms / (gamma * draft_ms + verify_ms)


def predictions(payload: dict, gamma: int, dtype: str) -> dict | None:
    """SpS speed-ups the measured fast-path forward costs predict, at fixed α and at the measured one."""
    curve = payload.get("curve")
    if not curve:
        return None
    threads = payload["environment"]["threads"]
    draft_dtype = payload["environment"]["draft_dtype"]

    def chosen(model: str, dt: str) -> dict | None:
        fast = [c for c in curve["curves"] if c["path"] == "fast" and c["threads"] == threads]
        return next((c for c in fast if c["model"] == model and c["dtype"] == dt), None)

    target, draft = chosen("target", dtype), chosen("draft", draft_dtype)
    ms = {int(k): v for k, v in target["ms"].items()} if target else {}
    if not (draft and gamma + 1 in ms):
        return None
    step, verify = ms[1], ms[gamma + 1]
    draft_ms = {int(k): v for k, v in draft["ms"].items()}[1]  # widths are strings once read back from JSON
    out = {
        "dtype": dtype,
        "step_ms": step,
        "verify_ms": verify,
        "draft_ms": draft_ms,
        "by_alpha": {a: predicted_sps_speedup(a, gamma, draft_ms, step, verify) for a in (0.4, 0.6, 0.8)},
    }
    sps = find_row(payload["rows"], VANILLA)
    if sps and sps.get("acceptance_rate") is not None:
        # a block's accepted tokens: its tokens less the one the target adds to every block
        alpha = per_token_alpha(sps["block_efficiency"] - 1, gamma)
        out.update(
            measured_alpha=alpha,
            at_measured=predicted_sps_speedup(alpha, gamma, draft_ms, step, verify),
            measured=sps.get("speedup_vs_sampling"),
        )
    return out
