"""Running the chosen checks: a dry run without a CUDA device (each check listed with what it would
run and why it is skipped), else each check in turn within its share of the time budget, recorded
as ran, skipped (with the reason) or failed (with the error); the report is rewritten after each."""

from __future__ import annotations

import datetime
import os
import time
import traceback
from pathlib import Path
from typing import Callable

from mtad.devices import torch_threads

from .check_records import CHECKS, Check
from .context import Context, Failed, Skipped
from .machine import NO_CUDA, cuda_problem, machine_record
from .options import DEFAULT_OUT, Options
from .report import write_report


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run(options: Options, out: str | os.PathLike = DEFAULT_OUT, log: Callable[[str], None] = print) -> dict:
    """Run the chosen checks (a dry run without a CUDA device unless `options.device` is cpu), writing
    gpu_check.json and gpu_check.md under `out` after each; returns the payload."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.monotonic()
    out = Path(out)
    problem = None if options.device == "cpu" else cuda_problem()
    payload = {
        "started": now(),
        "dry_run": problem is not None,
        "dry_run_reason": problem,
        "device": None,
        "options": options.as_dict(),
        "machine": machine_record(),
        "checks": [],
    }
    if problem is not None:
        payload["checks"] = [dry_run_entry(CHECKS[name], options, problem) for name in options.checks]
    else:
        run_checks(payload, options, started, out, log)
    return finish(payload, started, out, log)


def dry_run_entry(check: Check, options: Options, problem: str) -> dict:
    """A check skipped for `problem`: what it would run, and whether its files are here when torch
    imports (reading where they would be needs it)."""
    entry = {"name": check.name, "title": check.title, "plan": check.plan(options, "cuda"), "status": "skipped"}
    entry["reason"] = problem
    if check.missing_files is not None and problem.startswith(f"{NO_CUDA}: torch.cuda"):
        files = check.missing_files(options)
        entry["data"] = {"files": f"missing: {files}" if files else "present: it would run"}
    return entry


def run_checks(payload: dict, options: Options, started: float, out: Path, log) -> None:
    """Each chosen check on the device in turn, its entry added to `payload` and the report rewritten."""
    import torch

    device = torch.device("cuda" if options.device == "auto" else options.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    payload["device"] = str(device)
    if device.type == "cuda":
        payload["device_name"] = torch.cuda.get_device_name(device)
    ctx = Context(device=device, options=options, log=log)
    budget_s = 60 * options.max_minutes
    deadline = started + budget_s
    # a check that will only say why it is skipped keeps no time for itself
    instant = {n for n in options.checks if CHECKS[n].missing_files and CHECKS[n].missing_files(options)}
    for i, name in enumerate(options.checks):
        check = CHECKS[name]
        later = sum(CHECKS[n].share for n in options.checks[i + 1 :] if n not in instant) * budget_s
        ctx.until = deadline - later
        entry = {"name": name, "title": check.title, "plan": check.plan(options, device.type)}
        if time.monotonic() >= deadline:
            entry.update(status="skipped", reason=f"the time budget of {options.max_minutes:g} min is spent")
        else:
            log(f"[gpu-check] {name}: {entry['plan']}")
            entry.update(run_check(check, ctx))
            log(f"[gpu-check] {name}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else ""))
        payload["checks"].append(entry)
        write_report(payload, out)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def run_check(check: Check, ctx: Context) -> dict:
    """The check's status, data (or error) and seconds."""
    start = time.perf_counter()
    try:
        with torch_threads(1 if check.one_thread else None):
            data = check.run(ctx)
        result = {"status": "ran", "data": data}
    except Skipped as err:
        result = {"status": "skipped", "reason": str(err), "data": err.data}
    except Failed as err:
        result = {"status": "failed", "reason": str(err), "data": err.data}
    except Exception as err:  # noqa: BLE001 - one check's error is its result, the others still run
        result = {
            "status": "failed",
            "reason": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(limit=12)[-4000:],
        }
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def finish(payload: dict, started: float, out: Path, log) -> dict:
    payload["wall_s"] = round(time.monotonic() - started, 2)
    payload["summary"] = {s: sum(c["status"] == s for c in payload["checks"]) for s in ("ran", "skipped", "failed")}
    json_path, md_path = write_report(payload, out)
    log(f"[gpu-check] {'dry run: ' if payload['dry_run'] else ''}{payload['summary']} -> {json_path}, {md_path}")
    return payload


def exit_code(payload: dict) -> int:
    """0 unless a check failed (a dry run, or skipped checks, exit 0)."""
    return 1 if payload["summary"]["failed"] else 0
