"""`make results`: every committed result regenerated step by step, resumable across sittings and machines.

A step is a make target (the Makefile's ``RESULT_STEPS``), run as ``make <step> RESULTS=results/runs
REGENERATE=1``. A finished step leaves a stamp, ``results/.stamps/<step>`` (JSON, read by
`mtad.provenance.read_stamp`): the code state it ran (`mtad.provenance.code_state`, so that results
or tests committed between sittings leave it the same), the commit, the machine
(`mtad.provenance.machine_key`), the pinned target dtype, the kernels bf16 products could choose
from there and when it finished. A step is done while the code stays that state and the
regeneration's pin is the dtype it ran.

Machines: a regeneration takes several sittings, and a sitting's machine may be another CPU type.
Each step names its own machine; only steps that read each other's timings (`GROUPS`) must share
one: a group whose earlier step was stamped on another machine is redone here.

The target dtype: a regeneration pins it when it begins (``TARGET_DTYPE``, else what `auto` means
for the reference pair here, measured now if no load has measured it), records it in
``results/.stamps/regeneration`` and runs every step with ``MTAD_TARGET_DTYPE`` set to it, which
every pair whose target dtype is `auto` follows (`mtad.models.dtype_choice.pinned_choice`).

One code state: a regeneration under way (a step stamped at this code state or result files changed,
a step still to do) goes on only at the code state it began at and with its pin; ``RESTART=1``
discards it (the step outputs back to HEAD, the stamps removed) and begins again here.

python -m mtad.regeneration --steps "reproduce-table2 sweeps ..." --pair smollm2_135m_head
    [--target-dtype bfloat16] [--allow-dirty] [--restart] [--dry-run] [--machine NAME]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import takewhile
from pathlib import Path

from mtad.provenance import STAMPS, STEP_OUTPUTS, code_state, machine_key, read_stamp, run_git, uncommitted_code
from mtad.records import write_json

# steps that read each other's timings, in the order they run, and why: one sitting on one machine
GROUPS = {("profiles", "bench"): "the bench's cost model reads the profiles' host timings"}
RECORD = "regeneration"  # the regeneration's own record among the stamps
OUTPUT_SPECS = tuple(f":(glob){pattern}" for pattern in STEP_OUTPUTS)  # as git pathspecs


@dataclass
class Request:
    """What `make results` asks: the steps in order, the reference pair, the make arguments of every
    step, and the Makefile's switches (ALLOW_DIRTY, RESTART, `make -n`, TARGET_DTYPE, a machine name)."""

    root: Path
    steps: list[str]
    pair: str
    step_args: list[str] = field(default_factory=list)
    make: str = "make"
    allow_dirty: bool = False
    restart: bool = False
    dry_run: bool = False
    target_dtype: str | None = None
    machine: str | None = None


class Refused(Exception):
    """A regeneration that may not go on here: its message is the one line `make results` prints."""


def say(line: str) -> None:
    print(f"results: {line}", flush=True)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def head_commit(root: Path) -> str:
    return run_git("rev-parse", "HEAD", root=root).stdout.decode().strip()


def kernels_here() -> str:
    """The kernels a bf16 product may choose from here (`mtad.decoding.kernels.available`), and the
    ``MTAD_KERNELS`` setting where one is made."""
    from mtad.decoding.kernels import available

    setting = os.environ.get("MTAD_KERNELS")
    return "+".join(available()) + (f" (MTAD_KERNELS={setting})" if setting else "")


def is_done(stamp: dict | None, code: str, pin: str | None) -> bool:
    """A step's stamp at this code state, run with the regeneration's pinned dtype."""
    return bool(stamp) and pin is not None and stamp.get("code") == code and stamp.get("target_dtype") == pin


def changed_outputs(root: Path) -> int:
    """How many step outputs (results, the drafts' model cards) differ from HEAD, untracked ones included."""
    status = run_git("status", "--porcelain", "--untracked-files=all", "--", *OUTPUT_SPECS, root=root)
    return len(status.stdout.decode().splitlines())


def write_stamp(root: Path, name: str, record: dict) -> None:
    """A stamp written atomically (`records.write_json`): an interrupted write leaves the old one."""
    path = root / "results" / STAMPS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def discard(root: Path) -> None:
    """The step outputs back to HEAD, untracked results removed (ignored ones, results/local, kept),
    the stamps removed: what RESTART=1 does before a regeneration begins again."""
    tracked = [p for p in run_git("ls-files", "-z", "--", *OUTPUT_SPECS, root=root).stdout.decode().split("\0") if p]
    for args in (["checkout", "HEAD", "--", *tracked] if tracked else None, ["clean", "-fdq", "--", "results"]):
        if args and run_git(*args, root=root).returncode != 0:
            raise Refused(f"RESTART=1: git {args[0]} failed; the results were not discarded")
    for stamp in (root / "results" / STAMPS).glob("*"):
        stamp.unlink()


def every_stamp(root: Path) -> dict[str, dict]:
    """The steps' stamps under results/ by step name (the regeneration's own record left out)."""
    names = [path.name for path in (root / "results" / STAMPS).glob("*") if path.name != RECORD]
    return {name: stamp for name in names if (stamp := read_stamp(root / "results", name))}


def check_may_go_on(req: Request, code: str, record: dict | None, stamps: dict[str, dict | None]) -> bool:
    """Whether the regeneration recorded goes on (True: its steps done stay done) or one begins (False:
    nothing of one at this code state, no step stamped at it and no step output changed); Refused
    where one is there but may not go on as asked: begun at another code state, or pinned to another
    dtype than TARGET_DTYPE names."""
    current = record if record and record.get("code") == code else None
    pin = (current or {}).get("target_dtype")
    other_pin = bool(req.target_dtype) and req.target_dtype != pin
    if current and not other_pin and all(is_done(stamps[step], code, pin) for step in req.steps):
        return True
    # every step stamped at this code, not only those asked for: `RESULT_STEPS` may name the rest alone
    stamped = sorted(name for name, stamp in every_stamp(req.root).items() if stamp.get("code") == code)
    changed = changed_outputs(req.root)
    if not stamped and not changed:
        return False
    if current is None:
        why = f"this is code {code}. One regeneration runs on one code state"
    elif other_pin:
        why = f"TARGET_DTYPE={req.target_dtype} would mix dtypes. One regeneration runs the target in one dtype"
    else:
        return True
    record = record or {}
    began = f"code {record.get('code', 'unrecorded')}, target {record.get('target_dtype') or 'not pinned'}"
    raise Refused(
        f"a regeneration is under way (steps stamped at this code: {' '.join(stamped) or 'none'}; {changed} "
        f"uncommitted result files), begun at {began}; {why}: finish it, or RESTART=1 to discard its results "
        "and begin again here"
    )


def resolve_pin(req: Request, machine: str) -> tuple[str | None, str]:
    """The target dtype a regeneration beginning now pins, and why: TARGET_DTYPE, else what `auto`
    means for the reference pair here (``MTAD_TARGET_DTYPE``, this machine's stored measurement, or
    one now; a dry run measures nothing and pins nothing)."""
    from mtad.models.pairs import AUTO_DTYPE, load_target_and_tokenizer, pair_config

    if req.target_dtype:
        return req.target_dtype, "TARGET_DTYPE"
    cfg = pair_config(req.pair, target_dtype=AUTO_DTYPE)
    if cfg["target_dtype"] != AUTO_DTYPE:
        source = (cfg.get("dtype_choice") or {}).get("source", "the device's rule")
        return cfg["target_dtype"], f"`auto` of {req.pair} on {machine} ({source})"
    if req.dry_run:
        return None, f"`auto` of {req.pair} on {machine}, measured when the regeneration begins"
    model, _ = load_target_and_tokenizer(cfg)  # measures float32 against bf16 here, and keeps the choice
    return model.mtad_dtype_choice["target_dtype"], f"`auto` of {req.pair} on {machine} (measured)"


def begin(req: Request, code: str, machine: str) -> dict:
    """A new regeneration's record: its code state, commit, machine, pinned dtype and why; written
    (not under a dry run) before its first step runs."""
    pin, why = resolve_pin(req, machine)
    record = {"code": code, "commit": head_commit(req.root), "machine": machine, "target_dtype": pin}
    record |= {"pinned_by": why, "began": now()}
    begins = "would begin" if req.dry_run else "begins"
    say(f"{begins} at code {code} on {machine}: the target's dtype pinned to {pin or '(not yet known)'} by {why}")
    if not req.dry_run:
        write_stamp(req.root, RECORD, record)
    return record


def group_redo(req: Request, stamps: dict, code: str, pin: str | None, machine: str) -> set[str]:
    """The steps done but to be redone here because their group (`GROUPS`) did not run in one sitting:
    a group is kept as done only when all its steps are, on one machine; else its steps are redone
    here from the first that is not done on this machine. Says so in one line per group."""
    redo: set[str] = set()
    for group, why in GROUPS.items():
        members = [step for step in group if step in req.steps]
        done = [step for step in members if is_done(stamps[step], code, pin)]
        if len(done) == len(members) and len({stamps[step].get("machine") for step in done}) <= 1:
            continue
        kept = list(takewhile(lambda step: step in done and stamps[step].get("machine") == machine, members))
        again = [step for step in members[len(kept) :] if step in done]
        if again:
            stamped = ", ".join(f"{step} stamped on {stamps[step].get('machine')}" for step in again)
            say(f"{' -> '.join(members)} run in one sitting on one machine ({why}): {stamped}; redone here")
        redo |= set(again)
    return redo


def make_command(req: Request, target: str) -> list[str]:
    """`make <target>`; a dry run asked by DRY_RUN=1 (not `make -n`) has no -n in MAKEFLAGS for the
    sub-make to inherit, so it is given one."""
    return [req.make, "--no-print-directory", *(["-n"] if req.dry_run else []), target]


def run_step(req: Request, step: str, pin: str | None) -> None:
    """`make <step>` with the step arguments, every process it starts under the pinned dtype; under a
    dry run (`make -n results` or DRY_RUN=1) the step's make only prints its commands."""
    command = [*make_command(req, step), *req.step_args]
    say(f"{step} (make {shlex.join(command[2:])}{f', MTAD_TARGET_DTYPE={pin}' if pin else ''})")
    env = os.environ | ({"MTAD_TARGET_DTYPE": pin} if pin else {})
    status = subprocess.run(command, cwd=req.root, env=env).returncode
    if status:
        raise Refused(f"{step} failed (exit {status}); `make results` resumes it")


def stamp_step(req: Request, step: str, code: str, commit: str, machine: str, pin: str | None) -> None:
    if req.dry_run:
        say(f"would stamp {step}")
        return
    record = {"step": step, "code": code, "commit": commit, "machine": machine, "target_dtype": pin}
    record |= {"kernels": kernels_here(), "dirty": bool(uncommitted_code(req.root)), "finished": now()}
    write_stamp(req.root, step, record)


def settle(req: Request, code: str, machine: str) -> tuple[dict, dict[str, dict | None]]:
    """The record of the regeneration that goes on here and the steps' stamps: the one recorded where
    it may go on, else a new one (after RESTART=1 discards one that may not)."""
    stamps = {step: read_stamp(req.root / "results", step) for step in req.steps}
    record = read_stamp(req.root / "results", RECORD)
    try:
        if check_may_go_on(req, code, record, stamps):
            return record, stamps
    except Refused:
        if not req.restart:
            raise
        say(f"RESTART=1: {'would discard' if req.dry_run else 'discarding'} the regeneration under way")
        if not req.dry_run:
            discard(req.root)
        stamps = dict.fromkeys(req.steps)
    return begin(req, code, machine), stamps


def regenerate(req: Request) -> None:
    """Every step not done run and stamped in order, then results/README.md rendered; Refused with one
    line where the tree or a regeneration under way forbids it."""
    from mtad.models.dtype_choice import check_pin

    if uncommitted_code(req.root) and not req.allow_dirty:
        raise Refused("the tree has uncommitted changes; commit them first (or ALLOW_DIRTY=1)")
    if req.target_dtype:
        check_pin(req.target_dtype, "TARGET_DTYPE")
    code, machine = code_state(req.root), req.machine or machine_key()
    record, stamps = settle(req, code, machine)
    pin = record["target_dtype"]
    redo = group_redo(req, stamps, code, pin, machine)
    for step in req.steps:
        if is_done(stamps[step], code, pin) and step not in redo:
            say(f"{step} already done at code {code} on {stamps[step].get('machine')}, target {pin}")
            continue
        commit = head_commit(req.root)
        run_step(req, step, pin)
        stamp_step(req, step, code, commit, machine, pin)
    if subprocess.run(make_command(req, "results-readme"), cwd=req.root).returncode:
        raise Refused("every step done, but `make results-readme` failed")
    if req.dry_run:
        say("dry run: no step was run or stamped")
        return
    short = head_commit(req.root)[:7]
    say(f"every step done at code {code}, target {pin} (commit {short} and any after it that change only results/)")


def parse(argv: list[str] | None) -> Request:
    ap = argparse.ArgumentParser(prog="python -m mtad.regeneration", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", required=True, help="the make targets, in order, space-separated")
    ap.add_argument("--pair", required=True, help="the reference pair whose `auto` target dtype is pinned")
    ap.add_argument("--step-args", default="", help="make arguments of every step (RESULTS=... REGENERATE=1)")
    ap.add_argument("--make", default="make", help="the make that runs the steps ($(MAKE))")
    ap.add_argument("--target-dtype", help="pin this target dtype instead of what `auto` means here")
    ap.add_argument("--machine", help="the machine the stamps name (default: python -m mtad.provenance machine)")
    for flag in ("--allow-dirty", "--restart", "--dry-run"):
        ap.add_argument(flag, action="store_true")
    args = ap.parse_args(argv)
    return Request(
        root=Path.cwd(),
        steps=args.steps.split(),
        pair=args.pair,
        step_args=shlex.split(args.step_args),
        make=args.make,
        allow_dirty=args.allow_dirty,
        restart=args.restart,
        dry_run=args.dry_run,
        target_dtype=args.target_dtype,
        machine=args.machine,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        regenerate(parse(argv))
    except (Refused, ValueError) as err:
        say(str(err))
        return 1
    except KeyboardInterrupt:
        say("interrupted: the steps stamped stay done, and `make results` resumes the rest")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
