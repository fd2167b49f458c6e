"""The report of a run: gpu_check.json (the payload as it is) and gpu_check.md (the machine, a
table of the checks, then each check's section as its record renders it)."""

from __future__ import annotations

import json
from pathlib import Path

from .check_records import CHECKS
from .markdown_cells import cell, table


def write_report(payload: dict, out: Path) -> tuple[Path, Path]:
    """gpu_check.json and gpu_check.md under `out`; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu_check.json", out / "gpu_check.md"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(markdown(payload))
    return json_path, md_path


def markdown(payload: dict) -> str:
    """The report as Markdown: how and where it ran, the checks' table, then a section per check."""
    lines = header_lines(payload)
    rows = [
        [
            f"{i}. {c['name']}",
            c["status"],
            cell(c.get("seconds"), ".1f"),
            c.get("reason") or c.get("data", {}).get("incomplete", ""),
        ]
        for i, c in enumerate(payload["checks"], 1)
    ]
    lines += table(["check", "status", "s", "reason / note"], rows)
    for i, c in enumerate(payload["checks"], 1):
        lines += check_lines(i, c)
    return "\n".join(lines).rstrip() + "\n"


def header_lines(payload: dict) -> list[str]:
    """Dry run or where it ran, the machine, the code, the options and the summary."""
    m = payload["machine"]
    lines = ["# GPU check", ""]
    if payload["dry_run"]:
        lines += [
            f"**Dry run**: nothing ran ({payload['dry_run_reason']}). Each check below is what a run on a GPU does.",
            "",
        ]
    else:
        where = payload["device"] + (f" ({payload['device_name']})" if payload.get("device_name") else "")
        lines += [f"Ran on {where}.", ""]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in m.get("gpus", [])) or "none"
    git = m.get("git")
    git_text = f"{git.get('commit')}{' (dirty)' if git.get('dirty') else ''}" if isinstance(git, dict) else git
    lines += [
        f"- started: {payload['started']}; wall time: {cell(payload.get('wall_s'), '.1f')} s",
        f"- machine: {m.get('cpu')} ({m.get('cpu_count')} CPUs), {m.get('platform')}; GPUs: {gpus}"
        + (f"; driver {m['driver']}" if m.get("driver") else ""),
        f"- python {m.get('python')}, torch {m.get('torch')} (CUDA build {m.get('cuda_build')}), "
        f"transformers {m.get('transformers')}, pynvml {'importable' if m.get('pynvml') else 'not importable'}",
        f"- code: {git_text}",
        f"- options: {json.dumps(payload['options'])}",
        "",
    ]
    summary = payload.get("summary")
    if summary:
        lines += [f"Checks: {summary['ran']} ran, {summary['skipped']} skipped, {summary['failed']} failed.", ""]
    return lines


def check_lines(i: int, entry: dict) -> list[str]:
    """The section of the `i`-th check: its plan, why it was skipped or failed, its data."""
    lines = [f"## {i}. {entry['title']}: {entry['status']}", "", f"What it runs: {entry['plan']}.", ""]
    if entry.get("reason"):
        lines += [f"{'Skipped' if entry['status'] == 'skipped' else 'Failed'}: {entry['reason']}", ""]
    if entry.get("traceback"):
        lines += ["```", entry["traceback"].rstrip(), "```", ""]
    data = entry.get("data") or {}
    if data:
        try:
            lines += CHECKS[entry["name"]].section(data)
        except (KeyError, TypeError, ValueError):  # a check stopped part-way: its data as recorded
            lines += ["```json", json.dumps(data, indent=1, default=str)[:6000], "```", ""]
    return lines
