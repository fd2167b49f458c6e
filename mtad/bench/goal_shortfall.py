"""What a bench run's unmet goals leave, named by the block profile of the same machine
(`make profile`): each method's block split into the target's forward, the draft's forwards and
host work, beside the block time its speed-up goal allows.

A method making `t` tokens per block beats sampling `g` times when its block costs at most
`t · s / g`, `s` being sampling's time per token on the same prompts and threads; the difference
between the measured block and that budget is what is left, and the split says where it sits.
"""

from __future__ import annotations

from mtad.bench.block_profile import HOST, host_ms, machine_rows
from mtad.bench.goal_checks import AT_LEAST, SPEEDUP_GOALS, goals
from mtad.decoding.registry import REFERENCE
from mtad.markdown import md_table

PROFILE_FILE = "profile.md"  # named in the text; the rows come from the profile section of bench.json beside it


def _allowed_speedup(method: str) -> float:
    """The speed-up over sampling a method's goal asks for: its own goal, or that of the method it
    must beat (`AT_LEAST`), else at least sampling."""
    return SPEEDUP_GOALS.get(AT_LEAST.get(method, method), 1.0)


def _largest_host_phases(ms: dict, n: int = 2) -> str:
    return ", ".join(f"{c} {ms[c]:.1f}" for c in sorted(HOST, key=lambda c: -ms[c])[:n])


def _row(r: dict, sampling_ms_per_token: float) -> list:
    ms, t = r["ms_per_block"], r["block_efficiency"]
    goal = _allowed_speedup(r["method"])
    allowed = t * sampling_ms_per_token / goal  # the block time at which the goal is just met
    return [
        r["method"],
        r["prompts"],
        f"{t:.2f}",
        f"{ms['total']:.1f}",
        f"{ms['target']:.1f}",
        f"{ms['draft']:.1f}",
        f"{host_ms(ms):.1f} ({_largest_host_phases(ms)})",
        f"{goal:g}x",
        f"{allowed:.1f}",
        f"{ms['total'] - allowed:+.1f}",
    ]


def left_lines(payload: dict, profile: dict | None) -> list[str]:
    """The report's "What is left" section: the unmet goals, and per method and prompt group the
    block's split against the block its goal allows (empty when every goal is met)."""
    unmet = [g for g in goals(payload) if g["met"] is False]
    if not unmet:
        return []
    env = payload["environment"]
    keys = dict.fromkeys(g["key"] for g in unmet)  # a goal per dtype shares its key
    lines = ["", "## What is left", "", "Goals not met: " + ", ".join(f"({k})" for k in keys) + "."]
    rows = machine_rows(profile, env["machine"], env["threads"]) if profile else None
    if rows is None:
        return [*lines, "", f"No block profile of this machine at {env['threads']} threads (`make profile`)."]
    lines += [
        "",
        f"Where a block's time goes ([`{PROFILE_FILE}`]({PROFILE_FILE}), this machine, {env['threads']} threads, "
        "milliseconds per block), against the block each method may cost to reach its speed-up over sampling: "
        "tokens per block × sampling's ms per token on the same prompts ÷ the goal. "
        "Over > 0: the block costs that much more than its goal allows; "
        "host: the two largest host phases in brackets.",
    ]
    table = []
    for group in ("short", "long"):
        in_group = [r for r in rows if r["prompts"] == group]
        sampling = next((r for r in in_group if r["method"] == REFERENCE), None)
        if sampling is not None:
            table += [_row(r, sampling["ms_per_token"]) for r in in_group if r["method"] != REFERENCE]
    header = ["method", "prompts", "tokens/block", "block", "target", "draft", "host", "goal", "allowed", "over"]
    lines += ["", *md_table(header, table, "llrrrrlrrr")]
    return lines
