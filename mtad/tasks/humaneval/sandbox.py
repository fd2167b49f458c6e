"""Run model-generated Python in an isolated child process.

Layers, outermost first:
  * a separate process in its own session (process group), killed as a group at a wall-clock limit;
  * when the caller is root, the child runs as an unprivileged user (``nobody``), so file
    permissions and RLIMIT_NPROC apply to it (the kernel ignores RLIMIT_NPROC for root);
  * resource limits set in the child before the program runs: RLIMIT_CPU, RLIMIT_AS (memory),
    RLIMIT_FSIZE (files it writes, and its stdout/stderr, which go to files), RLIMIT_NPROC
    (fork bombs), RLIMIT_CORE = 0;
  * a fresh temporary directory as cwd/HOME/TMPDIR and a scrubbed environment (no inherited
    secrets), ``python -I -B`` (no user site, no PYTHON* variables, no bytecode writes);
  * an audit hook (PEP 578, cannot be removed from Python code) that refuses process creation,
    signals, ctypes, sockets, rlimit changes and any write/delete outside the temporary directory.

A program passes only if it runs to its end: the child prints a random token (sent on stdin,
unknown to the program's text) after the program finishes, so ``sys.exit(0)`` or ``os._exit(0)``
before the tests ran is a failure. This is a guard for evaluation runs, not a security boundary
against a determined attacker (use a container or VM for untrusted code at scale).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
UNPRIVILEGED_UID = 65534  # nobody / nogroup on Debian and most distributions
UNPRIVILEGED_GID = 65534


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock for the whole child
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS: address space
    file_size_mb: float = 1.0  # RLIMIT_FSIZE: every file it writes, stdout/stderr included
    max_procs: int = 64  # RLIMIT_NPROC: processes/threads of the (sandbox) user
    output_chars: int = 4000  # kept of stdout and of stderr


@dataclass
class SandboxResult:
    status: str  # "passed" | "failed" | "timeout"
    reason: str  # short human-readable cause
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    pid: int  # also the process-group id of everything the child started

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# The child program (sandbox_child.py), run from its source text with `python -I -B -c`: it
# runs as another user that may not be able to read this package's files.
CHILD = Path(__file__).parent / "sandbox_child.py"  # the program the sandboxed interpreter runs


def run_python(code: str, limits: Limits = Limits(), drop_privileges: bool = True, guard: bool = True) -> SandboxResult:
    """Run ``code`` in an isolated child; see the module docstring for what isolates it.

    ``guard=False`` turns off only the audit hook (tests use it to check the rlimits alone).
    """
    uid = _sandbox_uid(drop_privileges)
    python = _interpreter(uid)
    _check_sandbox_works(python, uid)
    workdir = Path(tempfile.mkdtemp(prefix="mtad-sandbox-"))
    outdir = Path(tempfile.mkdtemp(prefix="mtad-sandbox-out-"))  # not writable by the child
    try:
        (workdir / "program.py").write_text(code, encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, UNPRIVILEGED_GID)
            os.chown(workdir / "program.py", uid, UNPRIVILEGED_GID)
        return _run_child(python, workdir, outdir, limits, uid, guard)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def _check_sandbox_works(python: str, uid: int | None) -> None:
    """Run an empty program once per (interpreter, user): a sandbox that cannot even start
    (unreadable interpreter or stdlib, ...) must not pass off every sample as failed."""
    workdir = Path(tempfile.mkdtemp(prefix="mtad-sandbox-"))
    outdir = Path(tempfile.mkdtemp(prefix="mtad-sandbox-out-"))
    try:
        (workdir / "program.py").write_text("pass\n", encoding="utf-8")
        if uid is not None:
            os.chown(workdir, uid, UNPRIVILEGED_GID)
            os.chown(workdir / "program.py", uid, UNPRIVILEGED_GID)
        result = _run_child(python, workdir, outdir, Limits(timeout_s=60, cpu_s=30), uid, True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)
    if not result.passed:
        raise RuntimeError(
            f"the code sandbox cannot run an empty program with {python} as uid "
            f"{uid if uid is not None else os.getuid()}: {result.reason}\n{result.stderr}"
        )


class SandboxUnavailable(RuntimeError):
    """Generated code cannot be run here; the message says what to change."""


def check_sandbox() -> str:
    """Before any example: the sandbox can run a program here (as ``nobody`` when we are root);
    returns the interpreter it uses, else raises ``SandboxUnavailable`` saying what to change."""
    uid = _sandbox_uid(True)
    try:
        python = _interpreter(uid)
        _check_sandbox_works(python, uid)
    except (RuntimeError, OSError) as exc:
        blocked = _unreachable_parent(Path(sys.executable))
        hint = (
            f"; {blocked} (on the way to {sys.executable}) is closed to other users: `chmod o+x {blocked}`, "
            "or put the checkout in a folder others may enter"
            if blocked
            else ""
        )
        raise SandboxUnavailable(
            f"the HumanEval code sandbox cannot run a program as uid "
            f"{uid if uid is not None else os.getuid()} ({exc}){hint}"
        ) from None
    return python


def run_many(codes: list[str], limits: Limits = Limits(), workers: int = 2, **kwargs) -> list[SandboxResult]:
    """Run several programs, ``workers`` at a time; results in input order."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda c: run_python(c, limits, **kwargs), codes))


def _run_child(python: str, workdir: Path, outdir: Path, limits: Limits, uid: int | None, guard: bool) -> SandboxResult:
    token = secrets.token_hex(16)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
    }
    fsize = max(1, int(limits.file_size_mb * 1024 * 1024))
    argv = [
        python,
        "-I",
        "-B",
        "-c",
        CHILD.read_text(encoding="utf-8"),
        str(int(limits.cpu_s)),
        str(limits.memory_mb * 1024 * 1024),
        str(fsize),
        str(limits.max_procs),
        str(int(guard)),
    ]
    ids = {"user": uid, "group": UNPRIVILEGED_GID, "extra_groups": []} if uid is not None else {}
    start = time.monotonic()
    with open(outdir / "stdout", "wb") as out, open(outdir / "stderr", "wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            cwd=workdir,
            env=env,
            start_new_session=True,
            close_fds=True,
            **ids,
        )
        try:
            proc.stdin.write((token + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc.pid)  # the child and anything it managed to start
        proc.wait()
    seconds = time.monotonic() - start
    stdout = _read_capped(outdir / "stdout", limits.output_chars)
    stderr = _read_capped(outdir / "stderr", limits.output_chars)
    finished = proc.returncode == 0 and _tail(outdir / "stdout").rstrip().endswith(token)
    status, reason = _classify(proc.returncode, timed_out, finished, stderr, limits)
    stdout = stdout.replace(token, "").rstrip("\n")
    return SandboxResult(status, reason, proc.returncode, stdout, stderr, seconds, proc.pid)


def _classify(returncode: int, timed_out: bool, finished: bool, stderr: str, limits: Limits) -> tuple[str, str]:
    if timed_out:
        return "timeout", f"wall-clock limit of {limits.timeout_s}s"
    if finished:
        return "passed", "ran to completion"
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        if sig == "SIGXCPU":
            return "timeout", f"CPU limit of {limits.cpu_s}s"
        if sig == "SIGXFSZ":
            return "failed", f"file/output size limit of {limits.file_size_mb} MB"
        return "failed", f"killed by {sig}"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return "failed", last[:200] or f"exit status {returncode} before the end of the program"


def _kill_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGKILL the whole process group and wait until none of it is still running (zombies
    left for init to reap do not count)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        if not live_group_members(pgid) or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies (Linux /proc; empty elsewhere)."""
    members = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after "(comm)": state ppid pgrp ...
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry.name))
    return members


def _read_capped(path: Path, chars: int) -> str:
    with open(path, "rb") as f:
        return f.read(chars * 4).decode("utf-8", "replace")[:chars]


def _tail(path: Path, size: int = 256) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - size))
        return f.read().decode("utf-8", "replace")


def _sandbox_uid(drop_privileges: bool) -> int | None:
    """The uid to run as: ``nobody`` when we are root (and may drop), else our own (None)."""
    if not drop_privileges or os.geteuid() != 0:
        return None
    if _interpreter(UNPRIVILEGED_UID, strict=False):
        return UNPRIVILEGED_UID
    _warn_running_as_root()
    return None


@functools.lru_cache(maxsize=1)
def _warn_running_as_root() -> None:
    log.warning(
        "code sandbox: no Python interpreter is executable by uid %d, so generated code runs as "
        "root (RLIMIT_NPROC does not bind root; the audit guard and the other limits still do)",
        UNPRIVILEGED_UID,
    )


def _interpreter(uid: int | None, strict: bool = True) -> str | None:
    """A Python the sandbox user can execute: ours if reachable by others, else the system one."""
    if uid is None:
        return sys.executable
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and os.path.exists(candidate) and _world_executable(Path(candidate)):
            return candidate
    if strict:
        raise RuntimeError("no Python interpreter is executable by the unprivileged sandbox user")
    return None


def _unreachable_parent(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that 'other' users may not enter, or None. Both
    the path as invoked (a venv's ``bin/python`` link inside a private checkout) and its real
    file count: exec follows the first, the loader reads the second."""
    for way in (Path(os.path.abspath(path)), path.resolve()):
        for parent in reversed(way.parents):
            if not parent.stat().st_mode & stat.S_IXOTH:
                return parent
    return None


def _world_executable(path: Path) -> bool:
    """Whether 'other' users can reach and execute ``path`` (the path, its real file, every parent)."""
    if _unreachable_parent(path) is not None:
        return False
    real = path.resolve()
    mode = real.stat().st_mode
    # the interpreter's stdlib sits beside it (sys.prefix); a readable prefix is checked through parents
    return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)
