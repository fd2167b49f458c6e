"""The exactness check: on the device, tiny float64 models against the CPU. Tree attention through
the public forward (every node's logits against its path run alone), every method's tokens against
the same decode on the CPU (greedy, and seeded with the same CPU generator), and a chi-square test
of the lossless methods' draws against the target distribution enumerated on the CPU. Its cases are
the exactness tests' (`mtad.models.check_cases`), which build their models on the CPU."""

from __future__ import annotations

import importlib.util
import json
import time
import traceback

from ..context import Context, Failed
from ..engine import UNCOMPILED_PATHS, methods
from ..markdown_cells import cell, table

TREE_ATOL = 1e-9  # float64: a tree forward and a chain forward agree to ~1e-15
FALSE_ALARM = 1e-3  # each chi-square test rejects a correct method with this probability
TREE_PLAN = f"tree attention (llama eager/static, opt eager) node by node against the path alone (atol {TREE_ATOL})"


def plan(options, device_type: str) -> str:
    """What the check runs, in one line (its cases named when `mtad.models.tiny` imports)."""
    all_methods = ", ".join(methods())
    paths = " and ".join(UNCOMPILED_PATHS)
    try:
        from mtad.models.check_cases import DIST_TOKENS, FLOAT64_PAIRS, dist_cases
    except Exception as err:  # noqa: BLE001 - a python without torch: its dry run still says what runs
        return (
            f"{TREE_PLAN}; {all_methods} on float64 pairs ({paths} paths), greedy and seeded, tokens equal to the "
            f"CPU's; chi-square of the lossless methods' draws (false alarm {FALSE_ALARM}); the cases of "
            f"mtad.models.check_cases ({type(err).__name__}: {err})"
        )
    dist = ", ".join(f"{m} ({pair}, {path})" for pair, path, m, _, _ in dist_cases())
    return (
        f"{TREE_PLAN}; {all_methods} on the float64 pairs {', '.join(FLOAT64_PAIRS)} ({paths} paths), greedy and "
        f"seeded, tokens equal to the CPU's; chi-square of {DIST_TOKENS}-token draws (false alarm {FALSE_ALARM}) "
        f"for {dist}"
    )


def run(ctx: Context) -> dict:
    """Every part's rows; Failed naming the first few wrong ones (a part's error fails it too)."""
    data = {
        "reference": "cpu" if ctx.device.type != "cpu" else "cpu (the device itself: the comparison is trivial)",
        "dtype": "float64",
        "note": "the exactness tests build their models and prompts on the CPU; their cases run here on the device",
    }
    failures = []
    for part, cases in (
        ("tree_attention", tree_attention_cases),
        ("tokens", token_agreement),
        ("distribution", distribution_cases),
    ):
        try:
            data[part] = cases(ctx)
        except Exception as err:  # noqa: BLE001 - one part's error is recorded, the other parts still run
            data[part] = []
            data[f"{part}_error"] = f"{type(err).__name__}: {err}"
            data[f"{part}_traceback"] = traceback.format_exc(limit=12)[-4000:]
            failures.append(f"{part}: {data[f'{part}_error']}")
    failures += wrong_rows(data)
    skipped = [r for r in data["tokens"] + data["distribution"] if r.get("skipped")]
    if skipped:
        data["incomplete"] = f"{len(skipped)} case(s) not run: {skipped[0]['skipped']}"
    if failures:
        more = f" (+{len(failures) - 6} more)" if len(failures) > 6 else ""
        raise Failed("; ".join(failures[:6]) + more, data)
    return data


def wrong_rows(data: dict) -> list[str]:
    """One line per row of the three parts whose result is wrong."""
    wrong = [
        f"tree attention {r['arch']}/{r['path']}: max diff {r['max_abs_diff']:.2e}"
        for r in data["tree_attention"]
        if not r["ok"]
    ]
    wrong += [
        f"tokens {r['pair']}/{r['path']}/{r['method']}/{r['mode']}: differ from the CPU's at {r['first_difference']}"
        for r in data["tokens"]
        if r.get("same") is False
    ]
    wrong += [
        f"distribution {r['pair']}/{r['path']}/{r['method']}: p={r['pvalue']:.2e}, impossible draws {r['impossible']}"
        for r in data["distribution"]
        if r.get("ok") is False
    ]
    return wrong


def tree_attention_cases(ctx: Context) -> list[dict]:
    """tests/test_tree_attention.py's first case on the device: a two-level tree extended through the
    cache; each node's logits against its path run alone through the plain forward."""
    import torch

    from mtad.decoding.static_kv import cached_model, resolve_decode_path
    from mtad.models.check_cases import TREE_LEVELS, TREE_PREFIX
    from mtad.models.tiny import BUILDERS

    device, rows = ctx.device, []
    prefix = torch.tensor(TREE_PREFIX)
    (tok1, par1), (tok2, par2) = TREE_LEVELS
    tokens, parents = tok1 + tok2, par1 + par2
    for arch, build in BUILDERS.items():
        model = build(0, vocab=12).to(device)
        for path in UNCOMPILED_PATHS:
            if resolve_decode_path(path, model) != path:
                continue
            lm = cached_model(model, None, path)
            lm.prefill(prefix[:-1])
            out1 = lm.extend(prefix[-1:], nodes=torch.tensor(tok1), parents=par1)
            out2 = lm.extend(prefix[:0], nodes=torch.tensor(tok2), parents=par2)
            node_logits = torch.cat([out1[1:], out2]).to(device)
            diffs = []
            with torch.no_grad():
                root = model(input_ids=prefix[None].to(device)).logits[0, -1]
                diffs.append(float((out1[0].to(device) - root).abs().max()))
                for node in range(len(tokens)):
                    ids, n = [], node
                    while n >= 0:
                        ids.append(tokens[n])
                        n = parents[n]
                    alone_ids = torch.cat([prefix, torch.tensor(ids[::-1])])[None].to(device)
                    alone = model(input_ids=alone_ids).logits[0, -1]
                    diffs.append(float((node_logits[node] - alone).abs().max()))
            worst = max(diffs)
            rows.append(
                {"arch": arch, "path": path, "nodes": len(tokens), "max_abs_diff": worst, "ok": worst <= TREE_ATOL}
            )
    return rows


def token_agreement(ctx: Context) -> list[dict]:
    """Every method on the float64 pairs, device against CPU: greedy, then seeded sampling (the
    generator is a CPU one on both sides, so the draws are the same)."""
    import torch

    from mtad.decoding.registry import spec
    from mtad.decoding.static_kv import resolve_decode_path
    from mtad.generation import build_decoder
    from mtad.models.check_cases import FLOAT64_PAIRS, TOKEN_PROMPT, TOKEN_VOCAB
    from mtad.models.tiny import float64_pair

    cpu = torch.device("cpu")
    n_tokens = 16 if ctx.quick else 40
    modes = ("greedy", "seed 0") if ctx.quick else ("greedy", "seed 0", "seed 1")
    prompt = torch.tensor([TOKEN_PROMPT])
    rows = []
    for kind in FLOAT64_PAIRS:
        pairs = {d: float64_pair(kind, TOKEN_VOCAB, 2.0, d) for d in dict.fromkeys((ctx.device, cpu))}
        for path in UNCOMPILED_PATHS:
            if resolve_decode_path(path, pairs[cpu][0]) != path:
                continue
            for method in methods():
                for mode in modes:
                    row = {"pair": kind, "path": path, "method": method, "mode": mode}
                    rows.append(row)
                    if ctx.out_of_time():
                        row["skipped"] = "out of this check's time"
                        continue
                    params = dict(spec(method).test_settings, **({"temperature": 0} if mode == "greedy" else {}))
                    seed = 0 if mode == "greedy" else int(mode.split()[1])
                    got = {}
                    for d, (target, draft) in pairs.items():
                        decoder = build_decoder(method, target, draft, path, params)
                        out = decoder.generate(
                            prompt, max_new_tokens=n_tokens, generator=torch.Generator().manual_seed(seed)
                        )
                        got[d] = out.tokens
                    row["first_difference"] = first_difference(got[ctx.device], got[cpu])
                    row["same"] = row["first_difference"] is None
    return rows


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where `a` and `b` differ (None when they are equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def distribution_cases(ctx: Context) -> list[dict]:
    """Chi-square of the lossless methods' (and sampling's) draws on the device against the target
    distribution enumerated on the CPU (tests/test_decoding_exact.py's cases, fewer draws)."""
    from mtad.models.check_cases import DIST_PROMPT, DIST_TOKENS, DIST_VOCAB, dist_cases
    from mtad.models.tiny import float64_pair

    if importlib.util.find_spec("scipy") is None:
        return [
            {"method": m, "skipped": "scipy is not importable (the chi-square test)"} for _, _, m, _, _ in dist_cases()
        ]
    import torch

    from mtad.metrics.exact_enumeration import empirical_counts, sequence_probs
    from mtad.stats.goodness_of_fit import chisquare_exactness

    runs = 40 if ctx.quick else 1000
    prompt = torch.tensor([DIST_PROMPT])
    rows = []
    for kind, path, method, params, processing in dist_cases():
        row = {
            "pair": kind,
            "path": path,
            "method": method,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
            "processing": processing,
        }
        rows.append(row)
        if ctx.out_of_time():
            row["skipped"] = "out of this check's time"
            continue
        start = time.perf_counter()
        target, draft = float64_pair(kind, DIST_VOCAB, 3.0, ctx.device)
        cpu_target = float64_pair(kind, DIST_VOCAB, 3.0, torch.device("cpu"))[0]
        probs = sequence_probs(cpu_target, prompt, DIST_TOKENS, processing)
        counts = empirical_counts(
            method, target, draft, {**params, **processing}, prompt, DIST_TOKENS, runs, decode_path=path
        )
        test = chisquare_exactness(counts, probs)
        row.update(
            test.as_dict(),
            ok=test.impossible == 0 and test.pvalue > FALSE_ALARM,
            seconds=round(time.perf_counter() - start, 2),
        )
    return rows


def section(data: dict) -> list[str]:
    """The report's Markdown of the check's data: a table per part."""
    lines = [data.get("note", "") + ".", ""] if data.get("note") else []
    if data.get("tree_attention"):
        lines += ["Tree attention (each node's logits against its path alone):", ""]
        lines += table(
            ["arch", "path", "nodes", "max abs diff", "ok"],
            [
                [r["arch"], r["path"], r["nodes"], cell(r["max_abs_diff"], ".1e"), cell(r["ok"])]
                for r in data["tree_attention"]
            ],
        )
    return lines + tokens_table(data) + distribution_table(data)


def tokens_table(data: dict) -> list[str]:
    tokens = [r for r in data.get("tokens", []) if "same" in r]
    if not tokens:
        return []
    groups: dict = {}
    for r in tokens:
        groups.setdefault((r["pair"], r["path"], r["method"]), []).append(r)
    lines = ["Tokens on the device against the CPU (float64, same CPU generator):", ""]
    return lines + table(
        ["pair", "path", "method", "runs", "same", "first difference"],
        [
            [
                *key,
                len(rs),
                sum(r["same"] for r in rs),
                ", ".join(f"{r['mode']}: {r['first_difference']}" for r in rs if not r["same"]) or "—",
            ]
            for key, rs in groups.items()
        ],
    )


def distribution_table(data: dict) -> list[str]:
    dist = [r for r in data.get("distribution", []) if "pvalue" in r]
    if not dist:
        return []
    lines = [f"Draws on the device against the exact target distribution (chi-square, false alarm {FALSE_ALARM}):", ""]
    return lines + table(
        ["pair", "path", "method", "params", "draws", "TV", "p", "ok"],
        [
            [
                r["pair"],
                r["path"],
                r["method"],
                json.dumps(r["params"]),
                r["runs"],
                cell(r["tv"], ".3f"),
                cell(r["pvalue"], ".3g"),
                cell(r["ok"]),
            ]
            for r in dist
        ],
    )
