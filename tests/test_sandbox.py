"""The code sandbox: each attack ends as a failed sample, quickly, leaving nothing running."""

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from mtad.tasks.humaneval.sandbox import Limits, live_group_members, run_python

FAST = Limits(timeout_s=3.0, cpu_s=3, memory_mb=512, file_size_mb=0.5, max_procs=32)


def run(code: str, **kwargs):
    result = run_python(code, FAST, **kwargs)
    assert not live_group_members(result.pid), "sandboxed processes survived the run"
    assert result.seconds < FAST.timeout_s + 3, "the sandbox did not stop the child in time"
    return result


def test_plain_program_passes_and_output_is_kept():
    result = run("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('done')")
    assert result.passed, result.stderr
    assert result.stdout == "done"


def test_failing_assertion_fails():
    result = run("assert 1 == 2, 'wrong answer'")
    assert result.status == "failed"
    assert "AssertionError" in result.reason


def test_infinite_loop_times_out():
    result = run("while True:\n    pass")
    assert result.status == "timeout"


def test_sleeping_forever_times_out():
    result = run("import time\ntime.sleep(600)")
    assert result.status == "timeout"


def test_fork_bomb_is_refused():
    result = run("import os\nwhile True:\n    os.fork()")
    assert result.status == "failed"
    assert "not allowed" in result.reason


def test_fork_bomb_is_bounded_by_rlimits_alone():
    # without the audit hook, RLIMIT_NPROC (as an unprivileged user) and the group kill must hold
    result = run("import os\nwhile True:\n    os.fork()", guard=False)
    assert result.status in ("failed", "timeout")
    assert not result.passed


def test_subprocess_and_shell_are_refused():
    for code in (
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
        "import multiprocessing as mp\np = mp.Process(target=print)\np.start()\np.join()",
    ):
        result = run(code)
        assert result.status == "failed", code


def test_huge_allocation_fails():
    result = run("block = bytearray(16 * 1024**3)")
    assert result.status == "failed"
    assert "MemoryError" in result.reason


def test_growing_list_fails_on_memory():
    result = run("xs = []\nwhile True:\n    xs.append(' ' * 10**6)")
    assert result.status in ("failed", "timeout")
    assert not result.passed


@pytest.mark.parametrize("code", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"])
def test_early_exit_is_not_a_pass(code):
    # the program stops before the tests that follow it could run: a failure, not a pass
    result = run(code + "\nassert False, 'tests would fail here'")
    assert result.status == "failed"


def test_write_outside_its_directory_fails(tmp_path):
    targets = [tmp_path / "escaped.txt", f"/tmp/mtad-escape-{uuid.uuid4().hex}.txt"]
    for target in targets:
        result = run(f"with open({str(target)!r}, 'w') as f:\n    f.write('escaped')")
        assert result.status == "failed"
        assert not os.path.exists(target), f"the sandbox wrote {target}"


def test_delete_outside_its_directory_fails(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    result = run(f"import os\nos.remove({str(victim)!r})")
    assert result.status == "failed"
    assert victim.read_text() == "precious"


def test_write_inside_its_directory_is_allowed():
    result = run("open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'")
    assert result.passed, result.stderr


def test_syntax_error_fails():
    result = run("def broken(:\n    return 1")
    assert result.status == "failed"
    assert "SyntaxError" in result.reason


def test_output_flood_is_capped():
    result = run("while True:\n    print('x' * 1000)")
    assert not result.passed
    assert len(result.stdout) <= FAST.output_chars


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("MTAD_TEST_SECRET", "hunter2")
    result = run("import os\nprint(sorted(os.environ))\nprint(os.getcwd())")
    assert result.passed, result.stderr
    assert "MTAD_TEST_SECRET" not in result.stdout and "hunter2" not in result.stdout
    cwd = result.stdout.splitlines()[-1]
    assert "mtad-sandbox-" in cwd and not os.path.exists(cwd), "the temporary directory was not removed"


def test_killing_the_parent_is_refused():
    result = run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert result.status == "failed"


def test_write_outside_fails_without_privilege_drop(tmp_path):
    # the path a non-root CI runner takes: same user, so only the guard stops the write
    target = tmp_path / "escaped.txt"
    result = run(f"open({str(target)!r}, 'w').write('escaped')", drop_privileges=False)
    assert result.status == "failed"
    assert not target.exists()


def test_run_many_keeps_the_input_order():
    from mtad.tasks.humaneval.sandbox import run_many

    codes = [f"print({i})" if i % 2 else "raise SystemExit(1)" for i in range(6)]
    results = run_many(codes, FAST, workers=2)
    assert [r.passed for r in results] == [bool(i % 2) for i in range(6)]
    assert [r.stdout for r in results if r.passed] == ["1", "3", "5"]


def test_cpu_limit_before_the_wall_clock_is_a_timeout():
    # the CPU rlimit (1 s) fires well before the wall clock (3 s): still reported as a timeout
    result = run_python(
        "while True:\n    pass", Limits(timeout_s=3.0, cpu_s=1, memory_mb=512, file_size_mb=0.5, max_procs=32)
    )
    assert result.status == "timeout" and "CPU limit" in result.reason, (result.status, result.reason)


def test_child_guard_is_a_plain_module(tmp_path):
    """The child program is an importable module; its guard decides by path and event."""
    from mtad.tasks.humaneval import sandbox_child

    guard = sandbox_child.make_guard(str(tmp_path.resolve()))
    guard("open", (str(tmp_path / "out.txt"), "w", 0))  # inside: allowed
    guard("open", ("/etc/hostname", "r", os.O_RDONLY))  # reading outside: allowed
    for event, args in (
        ("open", ("/tmp/elsewhere.txt", "w", 0)),
        ("os.remove", ("/tmp/x",)),
        ("subprocess.Popen", ("ls",)),
        ("ctypes.dlopen", ("libc",)),
    ):
        with pytest.raises(PermissionError):
            guard(event, args)


def private_venv_python(tmp_path: Path) -> Path:
    """A venv-style ``bin/python`` link to a world-executable interpreter, inside a folder of mode
    0700 (a checkout in a ``mktemp -d`` folder, or under /root)."""
    private = tmp_path / "private"
    (private / "venv" / "bin").mkdir(parents=True)
    private.chmod(0o700)
    link = private / "venv" / "bin" / "python"
    link.symlink_to("/usr/bin/python3" if Path("/usr/bin/python3").exists() else shutil.which("python3"))
    return link


def test_an_interpreter_inside_a_private_folder_is_not_offered_to_the_sandbox_user(tmp_path, monkeypatch):
    from mtad.tasks.humaneval import sandbox

    link = private_venv_python(tmp_path)
    blocked = sandbox._unreachable_parent(link)  # the private folder, or one above it (pytest's own is 0700)
    assert blocked is not None and (blocked == tmp_path / "private" or blocked in (tmp_path / "private").parents)
    assert not sandbox._world_executable(link)
    monkeypatch.setattr(sandbox.sys, "executable", str(link))
    chosen = sandbox._interpreter(sandbox.UNPRIVILEGED_UID, strict=False)
    assert chosen != str(link)  # another interpreter the unprivileged user can reach, or none


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop happens only when running as root")
def test_as_root_from_a_private_folder_the_sandbox_still_runs_code_or_says_what_to_change(tmp_path, monkeypatch):
    from mtad.tasks.humaneval import sandbox

    monkeypatch.setattr(sandbox.sys, "executable", str(private_venv_python(tmp_path)))
    if sandbox._interpreter(sandbox.UNPRIVILEGED_UID, strict=False) is None:  # no system python either
        with pytest.raises(sandbox.SandboxUnavailable, match="chmod o\\+x"):
            sandbox.check_sandbox()
        return
    python = sandbox.check_sandbox()
    assert python != sys.executable
    assert run_python("print('ok')").stdout == "ok"
