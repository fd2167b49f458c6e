#!/usr/bin/env python
"""The extras `make install` adds for this machine's kernels, run with the venv's python once torch is in.

    python scripts/kernel_extra.py     # prints ",zen" where the kernel extra can run, else nothing

`zen` (``zentorch``: AMD ZenDNN's bf16 matrix products, a kernel the calibration in
``mtad/decoding/kernels.py`` picks per forward width where it is the fastest) is built for one
torch release, as a CPU build, on x86-64 Linux, and helps only a bf16 target, which the pairs'
`auto` dtype picks on a CPU with native bf16 (AVX-512 BF16): it is added there, and elsewhere one
line on stderr says why it is skipped. Only torch is imported: mtad itself is not installed yet.
"""

from __future__ import annotations

import platform
import sys

ZEN_TORCH = "2.13.0"  # the torch release the zen extra's pin (pyproject.toml) is built for


def zen_problem(system: str, machine: str, torch_version: str, cuda: str | None, cpu_flags: set[str]) -> str | None:
    """Why the zen extra cannot run or help on this machine and torch, or None when it can."""
    if system != "Linux" or machine.lower() not in ("x86_64", "amd64"):
        return f"it is built for x86-64 Linux, not {system} on {machine}"
    if cuda:
        return f"it is built for torch's CPU build, not its CUDA {cuda} build"
    if torch_version.split("+")[0] != ZEN_TORCH:
        return f"it is built for torch {ZEN_TORCH}, not {torch_version}"
    if "avx512_bf16" not in cpu_flags:
        return "this CPU has no native bf16 (avx512_bf16), so targets run in float32, which it does not speed up"
    return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (none where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), set())
    except OSError:
        return set()


def main() -> int:
    import torch

    problem = zen_problem(platform.system(), platform.machine(), torch.__version__, torch.version.cuda, cpu_flags())
    if problem:
        print(
            f"install: the kernel extra zen (ZenDNN's bf16 products) is skipped: {problem}; "
            "bf16 forwards use torch's own kernels",
            file=sys.stderr,
        )
    print("" if problem else ",zen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
