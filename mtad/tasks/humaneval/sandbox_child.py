"""The sandbox's child program: limits first, then the audit guard, then the generated program.

``sandbox.py`` runs this file's source with ``python -I -B -c <source> CPU_S MEM FSIZE NPROC
GUARD`` in a fresh directory holding ``program.py``; the first line of stdin is a random token
that is printed only after the program ran to its end. It imports nothing from ``mtad`` (it
runs as another user, in isolated mode, from its source text alone).
"""

import os
import resource
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events refused outright: process creation, signals, rlimit changes, sockets, ...
DENIED = {
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "resource.setrlimit",
    "resource.prlimit",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "os.setuid",
    "os.chroot",
    "pty.spawn",
}
# audit events whose path arguments must lie inside the sandbox directory
PATH_EVENTS = {
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "os.mkfifo",
    "os.mknod",
    "shutil.rmtree",
    "os.listxattr",
    "os.setxattr",
    "os.removexattr",
}


def set_limits(cpu_s: int, memory: int, file_size: int, procs: int) -> None:
    # CPU: soft < hard, so the kernel sends SIGXCPU at the limit (reported as a CPU timeout);
    # with soft == hard it sends SIGKILL instead, which reads as an unexplained kill.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    for what, value in (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, file_size),
        (resource.RLIMIT_NPROC, procs),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(what, (value, value))


def make_guard(root: str):
    """An audit hook (PEP 578; Python code cannot remove it) that refuses the DENIED events,
    ctypes, and writes or path changes outside ``root``."""

    def inside(path) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(os.fspath(path)))
        except TypeError:
            return True
        return real == root or real.startswith(root + os.sep)

    def guard(event, args):
        if event in DENIED or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes and not inside(path):
                raise PermissionError(f"sandbox: write outside the sandbox directory: {path!r}")
        elif event in PATH_EVENTS:
            for arg in args:
                if isinstance(arg, (str, bytes, os.PathLike)) and not inside(arg):
                    raise PermissionError(f"sandbox: {event} outside the sandbox directory: {arg!r}")

    return guard


def main(argv: list[str]) -> None:
    token = sys.stdin.readline().strip()
    cpu_s, memory, file_size, procs, guard = (int(x) for x in argv[1:6])
    set_limits(cpu_s, memory, file_size, procs)
    with open("program.py", encoding="utf-8") as f:
        source = f.read()
    if guard:
        sys.addaudithook(make_guard(os.path.realpath(os.getcwd())))
    try:
        code = compile(source, "program.py", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        sys.stderr.write(f"sandbox: program exited early with SystemExit({exc.code!r})\n")
        sys.stderr.flush()
        os._exit(3)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os.write(1, ("\n" + token + "\n").encode())  # the program ran to its end
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
