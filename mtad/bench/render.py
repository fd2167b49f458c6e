"""The benchmark's report: `write_report` writes the payload as the ``timings`` section of the bench
result file (`mtad.result_files`) and bench.md (the tables of every method on both paths, the
references and compiled paths, sampling by target, the forward-cost curve, whole forwards beside
their matrix products, the predicted speed-up, the goals and the calibration), each table from its
own line builder; `rendered` prepares a stored payload (`read_timings`) for rendering again;
`readme_speed_lines` is what results/README.md shows of it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from mtad.bench.block_profile import read_profile
from mtad.bench.calibrate import calibration
from mtad.bench.curves import contradictions, curve_from_json
from mtad.bench.goal_checks import _by_width, default_dtype, goals
from mtad.bench.goal_shortfall import left_lines
from mtad.bench.llama_cpp import llama_cpp_unmeasured
from mtad.bench.modelled import attach_host_profile, modelled_rows
from mtad.bench.rows import find_row, tokens_per_s
from mtad.decoding import SamplingParams
from mtad.decoding.registry import REFERENCE, specs
from mtad.markdown import fmt_number, fmt_ratio, md_row, md_rule, md_table
from mtad.metrics.acceptance_terms import ACCEPTANCE_TERMS, terms_markdown
from mtad.result_files import BENCH, read_section, write_section

BLANK = ""  # what the bench's tables show where a figure is absent


def _fmt(value, pattern: str = "{:.2f}") -> str:
    """A figure through `pattern`, blank where absent."""
    return fmt_number(value, pattern, missing=BLANK)


def _products_lines(curve: dict) -> list[str]:
    """The table of whole forwards beside their matrix products, per dtype, path and threads."""
    rows = [c for c in curve["curves"] if c["model"] == "target" and c.get("linear_ms")]
    if not rows:
        return []
    widths = sorted({int(w) for c in rows for w in c["linear_ms"]})
    header = ["dtype", "path", "threads", *(f"{k} {w}" for w in widths for k in ("fwd", "mm", "fwd/mm"))]
    int8 = [{**c, "dtype": "int8 per row", "ms": {}} for c in curve.get("int8_products", [])]
    return [
        "",
        "Whole forward vs its matrix products (ms, median): a forward of n new tokens on the cache above, beside "
        "its matrix products alone, back to back on inputs [n, in_features] through the same modules and kernels "
        "(fast: q|k|v and gate|up fused for dense weights; q4_1: the int4 kernel, its head the int8 one; "
        "int8: every product one call of the int8 kernel; "
        "the LM head on n rows). fwd/mm is what a forward costs beyond its products. int8 per row: the float32 "
        "fast path's products requantized to one int8 scale per row in `_weight_int8pack_mm` (a kernel "
        "measured, not a target dtype).",
        "",
        *md_table(
            [*header, *(f"mm {w} / mm 1" for w in widths if w > 1)],
            (_products_row(c, widths) for c in [*rows, *int8]),
            "llr" + "r" * (4 * len(widths) - 1),
        ),
    ]


def _products_row(c: dict, widths: list[int]) -> list:
    """One curve's forward, products and their ratio per width, then its products' growth from 1 token."""
    ms, linear = _by_width(c["ms"]), _by_width(c["linear_ms"])
    cells = [
        cell
        for w in widths
        for cell in (
            _fmt(ms.get(w), "{:.1f}"),
            _fmt(linear.get(w), "{:.2f}"),
            _fmt(ms[w] / linear[w] if w in ms and w in linear else None),
        )
    ]
    growth = [_fmt(linear[w] / linear[1] if w in linear and 1 in linear else None) for w in widths if w > 1]
    return [c["dtype"], c["path"], c["threads"], *cells, *growth]


def _method_settings(rows: list[dict]) -> str:
    """The settings beyond γ in which the methods' rows differ from their defaults (the configs'),
    read from their rows."""
    parts = []
    for method, spec in specs().items():
        params = (find_row(rows, method) or {}).get("params") or {}
        defaults = asdict(spec.settings())
        shown = [
            f"{key} = {_setting(value)}"
            for key, value in params.items()
            if key != "gamma" and key in defaults and _setting(value) != _setting(defaults[key])
        ]
        if shown:
            parts.append(f"{spec.label} {', '.join(shown)}")
    return "".join(f", {p}" for p in parts) + ", the other settings at their defaults"


def _setting(value) -> str:
    """A setting as the report prints it: a tree's k_config as a tuple (a row stores a list)."""
    return str(tuple(value)) if isinstance(value, list) else f"{value:g}" if isinstance(value, float) else str(value)


def _per_block(row: dict, key: str) -> str:
    """A bench row's count `key` per target call (per block)."""
    counts = row.get("counts") or {}
    return _fmt(counts[key] / counts["target_calls"] if counts.get("target_calls") else None, "{:.2f}")


VARIANT_SETTING = {"adaptive": "stop_below", "budget": "node_budget"}  # the setting each variant row changes


def _fixed(rows: list[dict], variant: dict) -> dict:
    """The fixed method's row on the variant row's path ({} if the run has none)."""
    return find_row(rows, variant["method"], variant["path"]) or {}


def _adaptive_lines(payload: dict) -> list[str]:
    """Each method with adaptive drafting (and the tree methods at the calibrated node budget) beside
    its fixed self on the fast path (none where `--only` left them out)."""
    variants = [r for r in payload["rows"] if r.get("variant") in VARIANT_SETTING]
    if not variants:
        return []
    header = ["method", "setting", "tok/s", "vs fixed", "vs sampling", "block eff. (fixed)"]
    header += ["drafted per block (fixed)", "tree nodes per block (fixed)", "other % (fixed)"]
    return [
        "",
        "Adaptive drafting (`stop_below`: drafting ends where the draft is unsure; `node_budget`: the tree "
        "keeps the nodes of highest draft path probability, as many as the calibration below allows; "
        "`mtad/decoding/README.md`), fast path, beside the same method drafting its fixed γ or tree:",
        "",
        *md_table(header, (_adaptive_row(r, _fixed(payload["rows"], r)) for r in variants), "ll" + "r" * 7),
    ]


def _adaptive_row(r: dict, fixed: dict) -> list:
    """A variant row's figures, its fixed self's in brackets."""
    setting = VARIANT_SETTING[r["variant"]]
    return [
        r["method"],
        f"{setting} {r['params'].get(setting)}",
        f"{r['tokens_per_s']:.2f}",
        _fmt(r.get("vs_fixed")),
        _fmt(r.get("speedup_vs_sampling")),
        f"{_fmt(r.get('block_efficiency'))} ({_fmt(fixed.get('block_efficiency'))})",
        f"{_per_block(r, 'drafted')} ({_per_block(fixed, 'drafted')})",
        f"{_per_block(r, 'tree_nodes')} ({_per_block(fixed, 'tree_nodes')})",
        f"{_fmt(100 * r['other_frac'], '{:.1f}')} ({_fmt(100 * fixed['other_frac'] if fixed else None, '{:.1f}')})",
    ]


def _long_lines(payload: dict) -> list[str]:
    """Our fast-path rows again on long prompts at one thread (absent from a run without them)."""
    long = payload.get("long")
    if not long:
        return []
    header = ["row", "tok/s", "vs sampling", "block eff.", "accepted / drafted", "target %", "draft %", "other %"]
    body = [
        [
            r["label"].removesuffix(" fast"),
            f"{r['tokens_per_s']:.2f}",
            _fmt(r.get("speedup_vs_sampling")),
            _fmt(r.get("block_efficiency")),
            _fmt(r.get("acceptance_rate")),
            _fmt(100 * r["target_frac"], "{:.0f}"),
            _fmt(100 * r["draft_frac"] if r["draft_frac"] else None, "{:.0f}"),
            _fmt(100 * r["other_frac"], "{:.1f}"),
        ]
        for r in long["rows"]
    ]
    return [
        "",
        f"Long prompts: the fast-path rows on {long['prompts']} CNN/DailyMail articles through the summary task's "
        f"prompt (mean {long['mean_prompt_tokens']:.0f} tokens) at {long['threads']} thread, same new tokens, "
        "repetitions and seeds (other % is host work: everything outside the two models' forwards):",
        "",
        *md_table(header, body, "l" + "r" * 7),
    ]


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
    rows = payload["rows"]
    hf = tokens_per_s(rows, REFERENCE, "eager", impl="hf")
    other_targets = [r for r in rows if r.get("target_dtype")]
    runs = [
        (find_row(rows, REFERENCE), f"ours, fast path, target {default_dtype(payload)}"),
        *((r, f"ours, fast path, target {r['target_dtype']}") for r in other_targets if r["impl"] == "ours"),
        (find_row(rows, REFERENCE, "eager", impl="hf"), f"HF eager generate(), target {default_dtype(payload)}"),
        *((r, f"HF eager generate(), target {r['target_dtype']}") for r in other_targets if r["impl"] == "hf"),
    ]
    measured = [(text, r["tokens_per_s"]) for r, text in runs if r]
    llama = payload.get("llama_cpp")
    if not llama_cpp_unmeasured(llama):
        measured += [
            (f"llama.cpp {kind}, q4_1 GGUF, {llama['threads']} threads", llama[f"{kind}_tokens_per_s"])
            for kind in ("sampled", "greedy")
        ]
    rows = [[text, f"{tps:.2f}", _fmt(hf and tps / hf)] for text, tps in measured]
    return [
        "",
        "Sampling by target (tokens/s, same prompts and budget):",
        "",
        *md_table(["run", "tok/s", "/ HF generate"], rows, "lrr"),
        "",
        _llama_cpp_line(payload),
    ]


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
            f" one-token step: SpecInfer's and MMTAD's `method.node_budget={budget['nodes']}` on this machine."
        )
    if auto:
        dense = {v["dtype"] for v in cal.values()}
        verdict = "agrees" if dense == {auto} else "differs: set the pair's dtypes explicitly to follow it"
        line += f" A pair's `auto` dtype is {auto} on this machine; the calibration {verdict}."
    return line


def _predicted_lines(payload: dict) -> list[str]:
    """SpS's speed-up over sampling that the cost curve predicts, by α and at the measured one."""
    p = payload.get("predicted")
    if not p:
        return []
    return [
        "",
        f"SpS speed-up over sampling that these costs predict (fast path, γ = {payload['setup']['gamma']}, "
        f"target {p['dtype']}): "
        + ", ".join(f"α = {a}: {v:.2f}x" for a, v in p["by_alpha"].items())
        + f"; at the α implied by the measured block efficiency ({_fmt(p.get('measured_alpha'))}): "
        f"{_fmt(p.get('at_measured'))}x predicted, "
        f"{_fmt(p.get('measured'))}x measured.",
    ]


def _modelled_lines(payload: dict) -> list[str]:
    """Measured and modelled speed-ups over sampling, from each row's counts (mtad.metrics.cost_model)."""
    rows = modelled_rows(payload)
    if not rows:
        return []
    device = rows[0]["accelerator"]
    return [
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
        *md_table(
            ["method", "path", "measured", "per repetition", "measured, pooled", "modelled here", "host term"]
            + ["modelled / pooled", "one host term", "isolated forwards", f"modelled, {device}"],
            map(_modelled_row, rows),
            "llrrrrlrrrr",
        ),
    ]


def _modelled_row(r: dict) -> list:
    """A method's measured speed-ups over sampling beside those its counts give each way they are modelled."""
    ratio = r["modelled"] / r["measured_pooled"] if r["measured_pooled"] and r["modelled"] else None
    spread = "–".join(f"{v:.2f}" for v in r["measured_range"]) if r.get("measured_range") else ""
    return [
        r["method"],
        r["path"],
        _fmt(r["measured"]),
        spread,
        _fmt(r["measured_pooled"]),
        _fmt(r["modelled"]),
        r["host_term"],
        _fmt(ratio),
        _fmt(r["modelled_by_host"].get("shared")),
        _fmt(r["modelled_isolated"]),
        _fmt(r["modelled_on_accelerator"]),
    ]


def _goals_lines(payload: dict) -> list[str]:
    marks = {True: "met", False: "not met", None: "n/a"}
    lines = ["", "## Goals", "", "| | goal | measured | met |", md_rule("llll")]  # written out: its empty cell is `| |`
    lines += [md_row([f"({g['key']})", g["goal"], g["measured"], marks[g["met"]]]) for g in goals(payload)]
    if payload.get("calibration"):
        lines += ["", _calibration_line(payload["calibration"], payload["environment"].get("auto_dtype"))]
    return lines


def _methods_table(rows: list[dict]) -> list[str]:
    """Every method of ours on the eager and fast paths: speed, counts and where the fast path's time goes."""
    header = ["method", "eager tok/s", "fast tok/s", "fast / eager", "vs sampling (fast)", "block eff."]
    header += ["accepted / drafted", "target %", "draft %", "other %"]
    methods = dict.fromkeys(r["method"] for r in rows if r["impl"] == "ours")
    paths = [(find_row(rows, m, "eager"), find_row(rows, m, "fast")) for m in methods]
    body = [_method_row(m, e, f) for m, (e, f) in zip(methods, paths) if e and f]
    return md_table(header, body, "l" + "r" * 9)


def _method_row(method: str, e: dict, f: dict) -> list:
    """A method's tokens/s on both paths; its fast path's ratios, counts and shares of time (in %)."""
    return [
        method,
        f"{e['tokens_per_s']:.2f}",
        f"{f['tokens_per_s']:.2f}",
        _fmt(f.get("vs_eager")),
        _fmt(f.get("speedup_vs_sampling")),
        _fmt(f.get("block_efficiency")),
        _fmt(f.get("acceptance_rate")),
        _fmt(100 * f["target_frac"], "{:.0f}"),
        _fmt(100 * f["draft_frac"] if f["draft_frac"] else None, "{:.0f}"),
        _fmt(100 * f["other_frac"], "{:.1f}"),
    ]


def _references_lines(payload: dict) -> list[str]:
    """The Hugging Face references and the compiled paths, with what their warm-up call cost."""
    warm = payload.get("warm_up", {})
    header = ["run", "tok/s", "ours (fast) / this", "first call (s)", "second call (s)", "compile (s)"]
    header += ["compilations", "while timed"]
    body = [
        _reference_row(r, find_row(payload["rows"], r["method"]), warm.get(r["label"], {}))
        for r in payload["rows"]
        if r["impl"] != "ours" or r["path"] == "compiled"
    ]
    return [
        "",
        "References and compiled paths (compile time measured on the warm-up call, excluded from tokens/s):",
        "",
        *md_table(header, body, "l" + "r" * 7),
    ]


def _reference_row(r: dict, ours: dict | None, w: dict) -> list:
    """A reference's tokens/s, ours over it, and its warm-up timings and compilations."""
    return [
        r["label"],
        f"{r['tokens_per_s']:.2f}",
        _fmt(ours and ours["tokens_per_s"] / r["tokens_per_s"]),
        _fmt(w.get("first_call_s"), "{:.1f}"),
        _fmt(w.get("second_call_s"), "{:.1f}"),
        _fmt(w.get("compile_s"), "{:.1f}"),
        _fmt(w.get("compiles"), "{}"),
        r["compiles_while_timed"],
    ]


def _curve_lines(curve: dict | None) -> list[str]:
    """The cost of one forward by width per model, dtype, path and threads, then its matrix products."""
    if not curve:
        return []
    widths = sorted({int(w) for c in curve["curves"] for w in c["ms"]})
    header = ["model", "dtype", "path", "threads", *(f"{w} tok" for w in widths), "floor", "1 tok / floor"]
    header += ["5 tok / 1 tok", "contradicts itself (after two more timings)"]
    return [
        "",
        f"Cost of one forward (ms, median) on a {curve['context']}-token cache, by number of new tokens; "
        f"floor = weight bytes / copy bandwidth ({curve['copy_bandwidth_gb_s']:.1f} GB/s). A row whose products "
        "take longer than its forward, or whose wider forward costs over 10% less than a narrower one, is "
        "timed again twice and, if it still does, named in the last column: timing noise, or a kernel that "
        "changes with the width (oneDNN picks one per shape):",
        "",
        *md_table(header, (_curve_row(c, widths) for c in curve["curves"]), "lllr" + "r" * (len(widths) + 3) + "l"),
        *_products_lines(curve),
    ]


def _kernel_lines(kernels: dict | None) -> list[str]:
    """The bf16 product kernel each model's fast-path forwards ran under, by width (absent from a
    run on float32 models, or from a run before the choice was recorded)."""
    chosen = {role: choice for role, choice in (kernels or {}).items() if choice}
    if not chosen:
        return []
    return [
        "",
        "Product kernel per forward width on the fast path (`mtad/decoding/kernels.py`: the fastest for the "
        "model's weight shapes on this machine, `MTAD_KERNELS` overrides): "
        + "; ".join(
            f"{role}: "
            + ", ".join(f"{width} {kernel}" for width, kernel in choice["by_width"].items())
            + f" ({choice['source']})"
            for role, choice in chosen.items()
        )
        + ".",
    ]


def _curve_row(c: dict, widths: list[int]) -> list:
    """One curve's forward per width, its floor, and the contradictions its timings kept."""
    ms = {int(k): v for k, v in c["ms"].items()}
    linear = {int(k): v for k, v in (c.get("linear_ms") or {}).items()}
    noise = c.get("noise", contradictions(ms, linear))  # a stored row from before the check: checked here
    return [
        c["model"],
        c["dtype"],
        c["path"],
        c["threads"],
        *(_fmt(ms.get(w), "{:.1f}") for w in widths),
        f"{c['floor_ms']:.1f}",
        f"{ms[1] / c['floor_ms']:.2f}",
        _fmt(ms.get(5) / ms[1] if ms.get(5) else None),
        "; ".join(noise),
    ]


def write_report(out_dir: Path, payload: dict) -> None:
    """`payload` as the ``timings`` section of the bench result file in `out_dir`, and bench.md beside it."""
    profile = read_profile(out_dir)
    attach_host_profile(payload, profile)  # the cost model's host term, where measured here
    write_section(BENCH, out_dir, "timings", payload)
    env, setup = payload["environment"], payload["setup"]
    sampling = SamplingParams()
    rows = payload["rows"]
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
        *_methods_table(rows),
        "",
        *terms_markdown(("block_efficiency", "acceptance_rate", "alpha")),
    ]
    lines += _adaptive_lines(payload)
    lines += _long_lines(payload)
    lines += _references_lines(payload)
    lines += _sampling_lines(payload)
    lines += _curve_lines(payload.get("curve"))
    lines += _kernel_lines(env.get("kernels"))
    lines += _predicted_lines(payload)
    lines += _modelled_lines(payload)
    lines += _goals_lines(payload)
    lines += left_lines(payload, profile)
    if payload.get("notes"):
        lines += ["", "## Notes", "", *payload["notes"]]
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")


def read_timings(folder: Path) -> dict | None:
    """The bench payload stored in `folder`'s bench result file (None when it holds none)."""
    return read_section(BENCH, folder, "timings")


def rendered(payload: dict) -> dict:
    """A stored payload with its curves' widths as ints again (JSON made them strings) and the
    calibration derived anew from its measurements."""
    if payload.get("curve"):
        payload["calibration"] = calibration(curve_from_json(payload["curve"]), payload["setup"]["gamma"])
    return payload


def readme_speed_lines(folder: Path) -> list[str] | None:
    """What results/README.md shows of the bench stored in `folder` (links relative to that page): every
    method on the fast path, the references, the reduced targets' sampling and llama.cpp; None when
    `folder` holds no bench."""
    payload = read_timings(folder)
    if not payload:
        return None
    env, setup = payload["environment"], payload["setup"]
    ours = [r for r in payload["rows"] if r["impl"] == "ours" and r["path"] == "fast" and not r["target_dtype"]]
    table = [
        [
            r["method"] + _variant_suffix(r),
            f"{r['tokens_per_s']:.1f}",
            fmt_ratio(r.get("speedup_vs_sampling")),
            f"{r.get('block_efficiency') or 1:.2f}",
            "–" if not r.get("acceptance_rate") else f"{r['acceptance_rate']:.2f}",
        ]
        for r in ours
    ]
    lines = [
        f"From [`bench/bench.md`](bench/bench.md) (pair `{setup['pair']}`, {setup['prompts']} prompts × "
        f"{setup['max_new_tokens']} new tokens, median of {setup['reps']} alternating repetitions, "
        f"{env['machine']}, {env['threads']} torch threads, target {env['target_dtype']}; the goals, the "
        "verification-cost curve and the cost model's held-out test are there; where a block's time goes: "
        "[`bench/profile.md`](bench/profile.md)). Every method on the fast path:",
        "",
        *md_table(["method", "tok/s", "vs sampling", "block eff.", ACCEPTANCE_TERMS["acceptance_rate"].label], table),
        "",
    ]
    return lines + _readme_reference_lines(payload)


def _readme_reference_lines(payload: dict) -> list[str]:
    """The README's lines on the references (Hugging Face's generate() on every path and target, our
    sampling off the fast path), sampling with the reduced targets and llama.cpp, tok/s."""
    rows = payload["rows"]
    references = [
        f"{r['label']} {r['tokens_per_s']:.1f}"
        for r in rows
        if r["method"] == REFERENCE
        and (r["impl"] == "hf" or r["path"] != "fast" and not (r["variant"] or r["target_dtype"]))
    ]
    reduced = [f"{r['label']} {r['tokens_per_s']:.1f}" for r in rows if r["impl"] == "ours" and r["target_dtype"]]
    lines = ["The references, tok/s: " + ", ".join(references) + "."]
    if reduced:
        lines += ["Sampling with the 4-bit targets (see below), tok/s: " + ", ".join(reduced) + "."]
    llama = payload.get("llama_cpp") or {}
    if llama.get("sampled_tokens_per_s"):
        lines += [
            f"llama.cpp on the same GGUF, {llama['threads']} threads: sampled {llama['sampled_tokens_per_s']:.1f}, "
            f"greedy {llama['greedy_tokens_per_s']:.1f} tok/s."
        ]
    return lines


def _variant_suffix(row: dict) -> str:
    """How a variant row differs from its fixed method: adaptive drafting, or a node budget."""
    if row["variant"] == "adaptive":
        return " (adaptive)"
    if row["variant"] == "budget":
        return f" (node budget {row['params']['node_budget']})"
    return ""
