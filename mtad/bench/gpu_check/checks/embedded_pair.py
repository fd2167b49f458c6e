"""The embedded-pair check: the embedded pair's methods and their speed-ups over sampling, when its
files are on this machine; skipped with the reason otherwise (it never downloads them)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from ..context import Context, Skipped
from ..engine import methods
from ..markdown_cells import cell, table
from ..timed_decodes import timed_runs

EMBEDDED_PAIR = "smollm2_135m_head"


def plan(options, device_type: str) -> str:
    return f"{', '.join(methods())} on {options.embedded_pair} (its files must be on this machine): tokens/s, speed-up"


def missing_files(options) -> str | None:
    """Why the files of the pair `options` asks for are not on this machine (None when they are)."""
    return embedded_pair_problem(options.embedded_pair)


def embedded_pair_problem(name: str) -> str | None:
    """Why the embedded pair cannot be loaded here without downloading anything (None when it can)."""
    try:
        from mtad.models.gguf_cache import CONVERTED_MARKER, converted_dir
        from mtad.models.pairs import draft_file, pair_config

        cfg = pair_config(name, device="cpu")
    except Exception as err:  # noqa: BLE001
        return f"cannot read the pair {name!r}: {type(err).__name__}: {err}"
    spec = cfg["target"]
    if spec["source"] == "gguf_package":
        from mtad.data import cache_root

        stem = Path(spec["file"]).stem
        converted = converted_dir(stem)
        module = spec["package"].replace("-", "_")
        extracted = cache_root() / "gguf" / f"{module}-{spec['version']}" / spec["file"]
        found = importlib.util.find_spec(module)
        installed = (
            found is not None
            and found.submodule_search_locations
            and (Path(list(found.submodule_search_locations)[0]) / spec["file"]).is_file()
        )
        if not ((converted / CONVERTED_MARKER).is_file() or extracted.is_file() or installed):
            return (
                f"its target's files are not on this machine: no converted target in {converted}, no {spec['file']} "
                f"from an installed {spec['package']} or under {extracted.parent}; getting them needs a download "
                f"(pip {spec['package']}=={spec['version']}), which this check never does"
            )
    elif spec["source"] == "hub":
        from mtad.models.pairs import hub_model_problem

        problem = hub_model_problem(spec["id"], "target")
        if problem:
            return problem
    if cfg["draft"]["source"] in ("distilled", "head") and cfg["draft"].get("file"):
        try:
            draft_file(cfg)
        except FileNotFoundError as err:
            return str(err)
    return None


def run(ctx: Context) -> dict:
    """A row per method, with its speed-up over sampling; Skipped when the pair's files are not here."""
    from mtad.decoding import SpSParams
    from mtad.models import load_pair
    from mtad.provenance import dtype_name
    from mtad.tasks.prompts import chat_ids, make_prompts

    name = ctx.options.embedded_pair
    problem = embedded_pair_problem(name)
    if problem:
        raise Skipped(f"{name}: {problem}")
    start = time.perf_counter()
    pair = load_pair(name, device=str(ctx.device))
    load_s = time.perf_counter() - start
    prompt = chat_ids(pair.tokenizer, make_prompts(1, seed=7, held_out=True)[0])
    n_tokens, reps = (16, 1) if ctx.quick else (64, 3)
    gamma = SpSParams().gamma
    data = {
        "pair": name,
        "path": pair.decode_path,
        "target_dtype": dtype_name(pair.target),
        "draft_dtype": dtype_name(pair.draft),
        "load_s": round(load_s, 2),
        "prompt_tokens": int(prompt.shape[1]),
        "max_new_tokens": n_tokens,
        "reps": reps,
        "gamma": gamma,
        "rows": [],
    }
    for method in methods():
        row = {"method": method}
        data["rows"].append(row)
        if ctx.out_of_time():
            row.update(status="skipped", reason="out of this check's time")
            data["incomplete"] = "out of this check's time"
            continue
        result = timed_runs(method, pair.target, pair.draft, pair.decode_path, prompt, n_tokens, reps)
        result.pop("tokens")
        row.update(result, status="ran")
    from mtad.decoding.registry import REFERENCE

    base = next((r for r in data["rows"] if r["method"] == REFERENCE and r["status"] == "ran"), None)
    for row in data["rows"]:
        if base and row["status"] == "ran":
            row["speedup_vs_sampling"] = row["tokens_per_s"] / base["tokens_per_s"]
    return data


def section(data: dict) -> list[str]:
    """The report's Markdown of the check's data: whether its files are here (a dry run), or a row per method."""
    if set(data) == {"files"}:
        return [f"The embedded pair's files: {data['files']}.", ""]
    lines = [
        f"- {data['pair']} on the {data['path']} path, target {data['target_dtype']}, draft {data['draft_dtype']}, "
        f"γ = {data['gamma']}; loaded in {data['load_s']} s; a {data['prompt_tokens']}-token prompt, "
        f"{data['max_new_tokens']} new tokens, median of {data['reps']}",
        "",
    ]
    rows = [
        [
            r["method"],
            r["status"],
            r.get("resolved_path", ""),
            cell(r.get("tokens_per_s"), ".1f"),
            cell(r.get("block_efficiency"), ".2f"),
            cell(r.get("speedup_vs_sampling"), ".2f"),
            cell(r.get("warm_up_s"), ".2f"),
        ]
        for r in data["rows"]
    ]
    return lines + table(["method", "status", "ran as", "tokens/s", "block eff.", "speed-up", "warm-up s"], rows)
