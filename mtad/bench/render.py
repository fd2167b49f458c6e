"""The benchmark's report: `write_report` writes bench.json (the payload) and bench.md (the tables of
every method on both paths, the references and compiled paths, sampling by target, the forward-cost
curve, whole forwards beside their matrix products, the predicted speed-up, the goals and the
calibration), each table from its own line builder; `rendered` prepares a stored bench.json for
rendering again."""

from __future__ import annotations

import json
from pathlib import Path

from mtad.bench.calibrate import calibration
from mtad.bench.curves import contradictions
from mtad.bench.goal_checks import _by_width, _tokens_per_s, default_dtype, goals
from mtad.bench.llama_cpp import llama_cpp_unmeasured
from mtad.bench.modelled import attach_host_profile, modelled_rows
from mtad.decoding import SamplingParams
from mtad.metrics.acceptance_terms import terms_markdown


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "" if value is None else pattern.format(value)


def _products_lines(curve: dict) -> list[str]:
    """The table of whole forwards beside their matrix products, per dtype, path and threads."""
    rows = [c for c in curve["curves"] if c["model"] == "target" and c.get("linear_ms")]
    if not rows:
        return []
    widths = sorted({int(w) for c in rows for w in c["linear_ms"]})
    head = " | ".join(f"fwd {w} | mm {w} | fwd/mm {w}" for w in widths)
    lines = [
        "",
        "Whole forward vs its matrix products (ms, median): a forward of n new tokens on the cache above, beside "
        "its matrix products alone, back to back on inputs [n, in_features] through the same modules and kernels "
        "(fast: q|k|v and gate|up fused for dense weights; q4_1: the int4 kernel, its head the int8 one; "
        "the LM head on n rows). fwd/mm is what a forward costs beyond its products. int8 per row: the float32 "
        "fast path's products requantized to one int8 scale per row in `_weight_int8pack_mm` (a kernel "
        "measured, not a target dtype).",
        "",
        f"| dtype | path | threads | {head} | mm 5 / mm 1 | mm 9 / mm 1 |",
        "|---|---|---:|" + "---:|" * (3 * len(widths) + 2),
    ]
    int8 = [{**c, "dtype": "int8 per row", "ms": {}} for c in curve.get("int8_products", [])]
    for c in [*rows, *int8]:
        ms, linear = _by_width(c["ms"]), _by_width(c["linear_ms"])
        cells = " | ".join(
            f"{_fmt(ms.get(w), '{:.1f}')} | {_fmt(linear.get(w), '{:.2f}')} | "
            f"{_fmt(ms[w] / linear[w] if w in ms and w in linear else None)}"
            for w in widths
        )
        growth = [_fmt(linear[w] / linear[1] if w in linear and 1 in linear else None) for w in (5, 9)]
        lines.append(f"| {c['dtype']} | {c['path']} | {c['threads']} | {cells} | {growth[0]} | {growth[1]} |")
    return lines


def _method_settings(rows: dict) -> str:
    """The settings beyond γ that the methods ran with, read from their rows."""
    params = {m: (rows.get(f"{m} fast") or {}).get("params") or {} for m in ("spectr", "specinfer", "mtad")}
    parts = []
    if "num_drafts" in params["spectr"]:
        parts.append(f"SpecTr k = {params['spectr']['num_drafts']}")
    if "k_config" in params["specinfer"]:
        parts.append(f"SpecInfer tree {tuple(params['specinfer']['k_config'])}")
    if "beam_width" in params["mtad"]:
        parts.append(f"MTAD/MMTAD W = {params['mtad']['beam_width']}, τ = {params['mtad']['threshold']:g}")
    return "".join(f", {p}" for p in parts)


def _per_block(row: dict, key: str) -> str:
    """A bench row's count `key` per target call (per block)."""
    counts = row.get("counts") or {}
    return _fmt(counts[key] / counts["target_calls"] if counts.get("target_calls") else None, "{:.2f}")


def _adaptive_lines(payload: dict) -> list[str]:
    """Each method with adaptive drafting beside its fixed self on the fast path (absent from a run
    made before the rows existed)."""
    rows = {r["label"]: r for r in payload["rows"]}
    adaptive = [r for r in payload["rows"] if r.get("variant") == "adaptive"]
    if not adaptive:
        return []
    lines = [
        "",
        "Adaptive drafting (`stop_below`: drafting ends where the draft is unsure; `mtad/decoding/README.md`), "
        "fast path, beside the same method drafting its fixed γ or tree:",
        "",
        "| method | stop_below | tok/s | vs fixed | vs sampling | block eff. (fixed) | drafted per block (fixed) "
        "| tree nodes per block (fixed) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in adaptive:
        fixed = rows.get(f"{r['method']} fast") or {}
        lines.append(
            f"| {r['method']} | {r['params'].get('stop_below')} | {r['tokens_per_s']:.2f} | "
            f"{_fmt(r.get('vs_fixed'))} | "
            f"{_fmt(r.get('speedup_vs_sampling'))} | {_fmt(r.get('block_efficiency'))} "
            f"({_fmt(fixed.get('block_efficiency'))}) | {_per_block(r, 'drafted')} ({_per_block(fixed, 'drafted')}) | "
            f"{_per_block(r, 'tree_nodes')} ({_per_block(fixed, 'tree_nodes')}) |"
        )
    return lines


def _llama_cpp_line(payload: dict) -> str:
    llama = payload.get("llama_cpp")
    why = llama_cpp_unmeasured(llama)
    if why:
        return f"llama.cpp: not measured ({why})."
    evals = ", ".join(f"{w}: {v:.1f}" for w, v in _by_width(llama["eval_ms"]).items())
    return (
        f"llama.cpp {llama.get('version') or ''} on the same GGUF, {llama['threads']} threads: greedy "
        f"{llama['greedy_tokens_per_s']:.2f} tok/s, sampled {llama['sampled_tokens_per_s']:.2f} tok/s; "
        f"eval of n tokens on a {(payload.get('curve') or {}).get('context', 200)}-token cache (every row's logits): "
        f"{evals} ms."
    )


def _sampling_lines(payload: dict) -> list[str]:
    """Sampling per target beside HF eager generate() and llama.cpp (tokens/s)."""
    hf = _tokens_per_s(payload, "HF generate")
    runs = [
        ("sampling fast", f"ours, fast path, target {default_dtype(payload)}"),
        *(
            (r["label"], f"ours, fast path, target {r['target_dtype']}")
            for r in payload["rows"]
            if r.get("target_dtype") and r["impl"] == "ours"
        ),
        ("HF generate", f"HF eager generate(), target {default_dtype(payload)}"),
        *(
            (r["label"], f"HF eager generate(), target {r['target_dtype']}")
            for r in payload["rows"]
            if r.get("target_dtype") and r["impl"] == "hf"
        ),
    ]
    lines = ["", "Sampling by target (tokens/s, same prompts and budget):", "", "| run | tok/s | / HF generate |"]
    lines.append("|---|---:|---:|")
    for label, text in runs:
        tps = _tokens_per_s(payload, label)
        if tps:
            lines.append(f"| {text} | {tps:.2f} | {_fmt(hf and tps / hf)} |")
    llama = payload.get("llama_cpp")
    if not llama_cpp_unmeasured(llama):
        for kind in ("sampled", "greedy"):
            tps = llama[f"{kind}_tokens_per_s"]
            lines.append(
                f"| llama.cpp {kind}, q4_1 GGUF, {llama['threads']} threads | {tps:.2f} | {_fmt(hf and tps / hf)} |"
            )
    return [*lines, "", _llama_cpp_line(payload)]


def _calibration_line(cal: dict, auto: str | None) -> str:
    def one(v: dict) -> str:
        return f"{v['dtype']}, {v['threads']} threads, {v['ms']:.1f} ms"

    picks = "; ".join(
        f"{k.replace('_', ' ')} ({v['width']} tok): {one(v)}"
        + (f" ({one(v['fastest'])} is faster still, a different target)" if v.get("fastest") else "")
        for k, v in cal.items()
        if k != "node_budget"
    )
    line = f"Calibration (fast path, cheapest per model and work among the dense dtypes): {picks}."
    if cal.get("node_budget"):
        budget = cal["node_budget"]
        line += (
            f" A draft tree of {budget['nodes']} nodes verifies for at most {budget['tolerance']}× that target's"
            f" one-token step: SpecInfer's `method.node_budget={budget['nodes']}` on this machine."
        )
    if auto:
        dense = {v["dtype"] for v in cal.values()}
        verdict = "agrees" if dense == {auto} else "differs: set the pair's dtypes explicitly to follow it"
        line += f" A pair's `auto` dtype is {auto} on this machine; the calibration {verdict}."
    return line


def _modelled_lines(payload: dict) -> list[str]:
    """Measured and modelled speed-ups over sampling, from each row's counts (mtad.metrics.cost_model)."""
    rows = modelled_rows(payload)
    if not rows:
        return []
    device = rows[0]["accelerator"]
    lines = [
        "",
        "Speed-up over sampling from each method's counts (prompt tokens, target calls and the tokens each "
        "verified, draft calls and their rows): measured here (the rows' medians; per repetition, the lowest and "
        "highest ratio of the method to sampling in the same repetition; pooled, tokens over seconds summed over "
        "every timed generation); modelled here for the same generations, each by a profile fitted to the other "
        "prompts' timed generations of its repetition (prefill per prompt token, target and draft forwards linear "
        "in width and rows; `mtad.bench.modelled`) with each method's host work per call as this machine's block "
        "profile measured it (`make profile`; fitted per method where there is none: the host term column), and "
        "held against the pooled measurement, beside the same with one host term for every method (a baseline, as "
        "is a constant 1.00); modelled from the isolated forwards of the cost curve above (host work as sampling's); "
        f"modelled on a memory-bound {device} from its datasheet bandwidth and the pair's parameter counts "
        "(modelled, never measured):",
        "",
        "| method | path | measured | per repetition | measured, pooled | modelled here | host term "
        f"| modelled / pooled | one host term | isolated forwards | modelled, {device} |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["modelled"] / r["measured_pooled"] if r["measured_pooled"] and r["modelled"] else None
        spread = "–".join(f"{v:.2f}" for v in r["measured_range"]) if r.get("measured_range") else ""
        lines.append(
            f"| {r['method']} | {r['path']} | {_fmt(r['measured'])} | {spread} | {_fmt(r['measured_pooled'])} | "
            f"{_fmt(r['modelled'])} | {r['host_term']} | {_fmt(ratio)} | {_fmt(r['modelled_by_host'].get('shared'))} | "
            f"{_fmt(r['modelled_isolated'])} | "
            f"{_fmt(r['modelled_on_accelerator'])} |"
        )
    return lines


def _goals_lines(payload: dict) -> list[str]:
    marks = {True: "met", False: "not met", None: "n/a"}
    lines = ["", "## Goals", "", "| | goal | measured | met |", "|---|---|---|---|"]
    lines += [f"| ({g['key']}) | {g['goal']} | {g['measured']} | {marks[g['met']]} |" for g in goals(payload)]
    if payload.get("calibration"):
        lines += ["", _calibration_line(payload["calibration"], payload["environment"].get("auto_dtype"))]
    return lines


def write_report(out_dir: Path, payload: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    attach_host_profile(payload, out_dir / "profile.json")  # the cost model's host term, where measured here
    (out_dir / "bench.json").write_text(json.dumps(payload, indent=2))
    env, setup = payload["environment"], payload["setup"]
    sampling = SamplingParams()
    rows = {r["label"]: r for r in payload["rows"]}
    lines = [
        "# Speed: decode paths and the Hugging Face references",
        "",
        f"Pair `{setup['pair']}`, {setup['prompts']} held-out prompts x {setup['max_new_tokens']} new tokens, "
        f"{setup['reps']} alternating repetitions (median), sampled (T {sampling.temperature:g}, "
        f"top-k {sampling.top_k}, top-p {sampling.top_p:g}), γ = {setup['gamma']}{_method_settings(rows)}. "
        f"Machine: {env['platform']}, {env['threads']} torch threads, device {env['device']} "
        f"(capability {env['cpu_capability']}, AMX {'yes' if env['amx'] else 'no'}), target {env['target_dtype']}, "
        f"draft {env['draft_dtype']}, torch {env['torch']}, transformers {env['transformers']}. "
        f"Wall time of the whole run: {payload.get('wall_s', 0) / 60:.1f} min.",
        "",
        "| method | eager tok/s | fast tok/s | fast / eager | vs sampling (fast) | block eff. | accepted / drafted | target % | draft % | other % |",  # noqa: E501 (a table's header row)
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method in dict.fromkeys(r["method"] for r in payload["rows"] if r["impl"] == "ours"):
        e, f = rows.get(f"{method} eager"), rows.get(f"{method} fast")
        if not (e and f):
            continue
        lines.append(
            f"| {method} | {e['tokens_per_s']:.2f} | {f['tokens_per_s']:.2f} | {_fmt(f.get('vs_eager'))} | "
            f"{_fmt(f.get('speedup_vs_sampling'))} | {_fmt(f.get('block_efficiency'))} | "
            f"{_fmt(f.get('acceptance_rate'))} | {_fmt(100 * f['target_frac'], '{:.0f}')} | "
            f"{_fmt(100 * f['draft_frac'] if f['draft_frac'] else None, '{:.0f}')} | "
            f"{_fmt(100 * f['other_frac'], '{:.1f}')} |"
        )
    lines += ["", *terms_markdown(("block_efficiency", "acceptance_rate", "alpha"))]
    lines += _adaptive_lines(payload)
    lines += [
        "",
        "References and compiled paths (compile time measured on the warm-up call, excluded from tokens/s):",
        "",
        "| run | tok/s | ours (fast) / this | first call (s) | second call (s) | compile (s) | compilations | while timed |",  # noqa: E501 (a table's header row)
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    warm = payload.get("warm_up", {})
    for r in payload["rows"]:
        if r["impl"] == "ours" and r["path"] != "compiled":
            continue
        ours = rows.get(f"{r['method']} fast")
        w = warm.get(r["label"], {})
        lines.append(
            f"| {r['label']} | {r['tokens_per_s']:.2f} | {_fmt(ours and ours['tokens_per_s'] / r['tokens_per_s'])} | "
            f"{_fmt(w.get('first_call_s'), '{:.1f}')} | {_fmt(w.get('second_call_s'), '{:.1f}')} | "
            f"{_fmt(w.get('compile_s'), '{:.1f}')} | {_fmt(w.get('compiles'), '{}')} | {r['compiles_while_timed']} |"
        )
    lines += _sampling_lines(payload)
    curve = payload.get("curve")
    if curve:
        widths = sorted({int(w) for c in curve["curves"] for w in c["ms"]})
        lines += [
            "",
            f"Cost of one forward (ms, median) on a {curve['context']}-token cache, by number of new tokens; "
            f"floor = weight bytes / copy bandwidth ({curve['copy_bandwidth_gb_s']:.1f} GB/s). A row whose products "
            "take longer than its forward, or whose wider forward costs over 10% less than a narrower one, is "
            "timed again twice and, if it still does, named in the last column: timing noise, or a kernel that "
            "changes with the width (oneDNN picks one per shape):",
            "",
            "| model | dtype | path | threads | "
            + " | ".join(f"{w} tok" for w in widths)
            + " | floor | 1 tok / floor | 5 tok / 1 tok | contradicts itself (after two more timings) |",
            "|---|---|---|---:|" + "---:|" * (len(widths) + 3) + "---|",
        ]
        for c in curve["curves"]:
            ms = {int(k): v for k, v in c["ms"].items()}
            cells = " | ".join(_fmt(ms.get(w), "{:.1f}") for w in widths)
            five = ms.get(5) / ms[1] if ms.get(5) else None
            linear = {int(k): v for k, v in (c.get("linear_ms") or {}).items()}
            noise = c.get("noise", contradictions(ms, linear))  # a stored row from before the check: checked here
            lines.append(
                f"| {c['model']} | {c['dtype']} | {c['path']} | {c['threads']} | {cells} | {c['floor_ms']:.1f} | "
                f"{ms[1] / c['floor_ms']:.2f} | {_fmt(five)} | {'; '.join(noise)} |"
            )
        lines += _products_lines(curve)
    if payload.get("predicted"):
        p = payload["predicted"]
        lines += [
            "",
            f"SpS speed-up over sampling that these costs predict (fast path, γ = {setup['gamma']}, "
            f"target {p['dtype']}): "
            + ", ".join(f"α = {a}: {v:.2f}x" for a, v in p["by_alpha"].items())
            + f"; at the α implied by the measured block efficiency ({_fmt(p.get('measured_alpha'))}): "
            f"{_fmt(p.get('at_measured'))}x predicted, "
            f"{_fmt(p.get('measured'))}x measured.",
        ]
    lines += _modelled_lines(payload)
    lines += _goals_lines(payload)
    if payload.get("notes"):
        lines += ["", "## Notes", "", *payload["notes"]]
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")


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
