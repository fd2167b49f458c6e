"""The decode-path check: every method on every decode path of the engine with the tiny pairs (a
layer draft and a feature head): tokens/s, block efficiency, the path it resolved to, warm-up
(compilation) time, and whether its tokens are the eager path's."""

from __future__ import annotations

from ..context import Context, Failed
from ..engine import COMPILING_PATHS, decode_paths, methods
from ..markdown_cells import cell, table
from ..timed_decodes import timed_runs, tiny_prompt


def chosen_paths(options, device_type: str) -> tuple[str, ...]:
    """The paths asked for; else all of them, less compiled on a CPU (it compiles for tens of seconds per shape)."""
    if options.paths is not None:
        return tuple(options.paths)
    return tuple(p for p in decode_paths() if device_type == "cuda" or p != "compiled")


def plan(options, device_type: str) -> str:
    paths = ", ".join(chosen_paths(options, device_type))
    return (
        f"{', '.join(methods())} on the paths {paths} with tiny_llama and tiny_llama_head: tokens/s, block "
        "efficiency, resolved path, warm-up and compile time, same tokens as eager"
    )


def run_order(paths: tuple[str, ...], pairs: dict) -> list[tuple[str, str]]:
    """(pair, path) in the order they run: the uncompiled paths first, for every pair; then a pair at
    a time its compiling paths, so that a budget spent on compiling leaves whole pairs."""
    compiling = [p for p in paths if p in COMPILING_PATHS]
    order = [(pair, path) for path in paths if path not in compiling for pair in pairs]
    return order + [(pair, path) for pair in pairs for path in compiling]


def run(ctx: Context) -> dict:
    """A row per (pair, path, method); Failed when a run failed."""
    paths = chosen_paths(ctx.options, ctx.device.type)
    pairs = ctx.tiny_pairs()
    prompt = tiny_prompt()
    n_tokens, reps = (16, 1) if ctx.quick else (64, 3)
    rows, eager = [], {}
    for pair_name, path in run_order(paths, pairs):
        target, draft = pairs[pair_name]
        for method in methods():
            row = {"pair": pair_name, "path": path, "method": method}
            rows.append(row)
            if ctx.out_of_time():
                row.update(status="skipped", reason="out of this check's time")
                continue
            try:
                row.update(timed_runs(method, target, draft, path, prompt, n_tokens, reps), status="ran")
            except Exception as err:  # noqa: BLE001 - recorded per row, the other rows still run
                row.update(status="failed", reason=f"{type(err).__name__}: {err}")
                continue
            ctx.warm_paths.add((pair_name, path, method))
            tokens = row.pop("tokens")
            if path == "eager":
                eager[(pair_name, method)] = tokens
            if (pair_name, method) in eager:
                row["same_tokens_as_eager"] = tokens == eager[(pair_name, method)]
    data = {"paths": list(paths), "max_new_tokens": n_tokens, "reps": reps, "rows": rows}
    if ctx.device.type != "cuda" and ctx.options.paths is None:
        data["note"] = (
            "compiled left out on a CPU (torch.compile takes tens of seconds per shape there); --paths adds it"
        )
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        raise Failed(
            f"{len(failed)} of {len(rows)} runs failed, first: {failed[0]['pair']}/{failed[0]['path']}/"
            f"{failed[0]['method']}: {failed[0]['reason']}",
            data,
        )
    if any(r["status"] == "skipped" for r in rows):
        data["incomplete"] = f"{sum(r['status'] == 'skipped' for r in rows)} run(s) not made: out of this check's time"
    return data


def section(data: dict) -> list[str]:
    """The report's Markdown of the check's data: a row per run."""
    lines = [f"{data['max_new_tokens']} new tokens, median of {data['reps']} after a warm-up; seed 0.", ""]
    if data.get("note"):
        lines += [data["note"] + ".", ""]
    rows = []
    for r in data["rows"]:
        if r["status"] != "ran":
            rows.append([r["pair"], r["path"], r["method"], r["status"], "", "", "", "", r.get("reason", "")])
            continue
        rows.append(
            [
                r["pair"],
                r["path"],
                r["method"],
                r["resolved_path"],
                cell(r["tokens_per_s"], ".1f"),
                cell(r["block_efficiency"], ".2f"),
                f"{cell(r['warm_up_s'], '.2f')} ({r['warm_up_compiles']} compiles)",
                r["steady_compiles"],
                cell(r.get("same_tokens_as_eager")),
            ]
        )
    return lines + table(
        ["pair", "path", "method", "ran as", "tokens/s", "block eff.", "warm-up s", "steady compiles", "= eager"], rows
    )
