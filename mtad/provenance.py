"""The environment record of a run: machine, versions, and the code it ran.

The code's state (commit, a dirty flag and a hash of the uncommitted changes) is read once per
process: each entry point calls ``capture()`` first thing, and every cell the process writes
records that state, even if the checkout changes while it runs (a library user who never calls
it gets the state read at the first record). Results under ``results/`` are outputs, not code:
they never make the tree dirty.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# What is not the code a result ran (git globs: "**" spans folders, "*" does not): the results, what a
# step writes outside them (the drafts' model cards, whose Measured sections measure-draft renders)
# and what no step runs or reads (the tests, CI, the Markdown documentation). One rule for the dirty
# flag every run records and the code state `make results` stamps its steps with, so committing a
# finished step's outputs, a test or a README between sittings leaves the code the later steps run
# the same.
STEP_OUTPUTS = ("results/**", "mtad/assets/drafts/*.md")  # what the steps of `make results` write
NOT_CODE = (*STEP_OUTPUTS, "tests/**", ".ci/**", "*.md", "**/*.md")
NOT_CODE_SPECS = tuple(f":(exclude,glob){pattern}" for pattern in NOT_CODE)  # as git pathspecs
_NOT_CODE_RE = re.compile(
    "|".join(".*".join(re.escape(part).replace(r"\*", "[^/]*") for part in p.split("**")) for p in NOT_CODE)
)


def is_code(path: str) -> bool:
    """Whether a repository path (relative, "/"-separated) is code by `NOT_CODE`."""
    return _NOT_CODE_RE.fullmatch(path) is None


def run_git(*args: str, root: Path | None = None) -> subprocess.CompletedProcess:
    """git with `args` in the checkout `root` (this one by default), its output captured as bytes."""
    return subprocess.run(["git", *args], cwd=root or REPO_ROOT, capture_output=True, timeout=30)


def code_state(root: Path | None = None) -> str:
    """A hash of HEAD's code files (path, mode and blob of each), the rest (`NOT_CODE`) left out."""
    listing = run_git("ls-tree", "-r", "-z", "HEAD", root=root)
    if listing.returncode != 0:
        raise RuntimeError(f"git ls-tree in {root or REPO_ROOT}: {listing.stderr.decode().strip()}")
    entries = [e for e in listing.stdout.decode().split("\0") if e and is_code(e.split("\t", 1)[1])]
    return hashlib.sha1("\n".join(entries).encode()).hexdigest()


def uncommitted_code(root: Path | None = None) -> list[str]:
    """The code paths (`NOT_CODE` aside) with uncommitted changes, untracked files that git does not
    ignore included."""
    status = run_git("status", "--porcelain=v1", "-z", "--untracked-files=all", root=root).stdout.decode()
    entries, paths = iter(status.split("\0")), []
    for entry in entries:
        if not entry:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":
            next(entries, None)  # a rename's or copy's source follows it
    return [path for path in paths if is_code(path)]


def read_git_state() -> dict:
    """``{commit, dirty, diff_sha256}`` of the checkout now (None values outside a git checkout).

    ``diff_sha256`` hashes the binary diff against HEAD plus the untracked files (names and
    contents), so two dirty trees with the same hash ran the same code; None when clean."""
    try:
        head = run_git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "dirty": None, "diff_sha256": None}
        diff = run_git("diff", "HEAD", "--binary", "--", ".", *NOT_CODE_SPECS).stdout
        untracked = run_git("ls-files", "--others", "--exclude-standard", "-z", "--", ".", *NOT_CODE_SPECS).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "diff_sha256": None}
    names = [n for n in untracked.decode().split("\0") if n]
    digest = hashlib.sha256(diff)
    for name in sorted(names):
        digest.update(b"\0untracked\0" + name.encode())
        try:
            digest.update((REPO_ROOT / name).read_bytes())
        except OSError:
            pass
    dirty = bool(diff) or bool(names)
    return {
        "commit": head.stdout.decode().strip(),
        "dirty": dirty,
        "diff_sha256": digest.hexdigest() if dirty else None,
    }


_process_state: dict | None = None  # the code state this process runs, once captured


def capture() -> dict:
    """Read the code state of this process once (idempotent): entry points call it before they
    run anything, so a checkout edited while they run does not change what their records say."""
    global _process_state
    if _process_state is None:
        _process_state = read_git_state()
    return dict(_process_state)


def git_commit() -> dict:
    """The code state this process runs (captured at start-up, or now if nobody did)."""
    return capture()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the instruction sets that decide which CPU kernels run (and so the figures' speed and rounding)
CPU_ISA = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def cpu_isa() -> list[str]:
    """Which of `CPU_ISA` this CPU has ([] where /proc/cpuinfo is not readable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [f for f in CPU_ISA if f in flags]


def isa_label(isa: list[str]) -> str:
    """Instruction sets as a label names them: `avx2/avx512f`, "no AVX2" for none of `CPU_ISA`."""
    return "/".join(isa) or "no AVX2"


def cpu_label(model: str, count: int | None, isa: list[str] | None) -> str:
    """`AMD EPYC (2 CPUs, avx2)`: a CPU's model, count and instruction sets (``isa_label``)."""
    return f"{model} ({count} CPUs, {isa_label(isa)})"


def machine_key() -> str:
    """The machine as one line: CPU model, count and instruction sets, and the visible GPUs. Each step
    of a regeneration of the committed results (`make results`) names the machine it ran on thus."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return cpu_label(cpu_model(), os.cpu_count(), cpu_isa()) + (f" + {len(gpus)}x {gpus[0]}" if gpus else "")


def recorded_machine_name(record: dict) -> str:
    """A recorded machine (an ``environment_record``, e.g. a cell's env.json) with what decides its
    rounding beside its name: `AMD EPYC (2 CPUs, avx2)`, or its GPUs where it has some. The record's
    "machine" field stays its bare name: runs and profiles are matched on it."""
    if record["gpus"]:
        return record["machine"]
    return cpu_label(record["cpu"], record["cpu_count"], record["cpu_isa"])


def machine_label(record: dict, target_dtype: str | None = None) -> str:
    """A recorded machine as a comparison names it: ``recorded_machine_name`` and the dtype
    (`AMD EPYC (2 CPUs, avx2), target bfloat16`). ``target_dtype``: the target's, where the caller
    knows it (else the dtypes the record's models ran in)."""
    dtype = f"target {target_dtype}" if target_dtype else f"dtype {record.get('dtype') or 'not recorded'}"
    if record.get("dtype_choice"):  # `auto` measured on the machine, or pinned (mtad.models.dtype_choice)
        dtype += " (auto: pinned)" if record["dtype_choice"].get("source") == "pinned" else " (auto: measured)"
    kernels = kernels_label(record)
    return f"{recorded_machine_name(record)}, {dtype}" + (f", kernels {kernels}" if kernels else "")


def kernels_label(record: dict) -> str | None:
    """The target's recorded product kernel per forward width, equal neighbours merged
    (`1 native, 2-17 zentorch, wider onednn`); None where the record has none (oneDNN throughout)."""
    by_width = (((record.get("kernels") or {}).get("target")) or {}).get("by_width")
    if not by_width:
        return None
    spans: list[list[str]] = []  # [first width, last width, kernel]
    for widths, kernel in by_width.items():
        low, _, high = widths.partition("-")
        if spans and spans[-1][2] == kernel and widths != "wider":
            spans[-1][1] = high or low
        else:
            spans.append([low, high or low, kernel])
    return ", ".join(f"{a if a == b else f'{a}-{b}'} {kernel}" for a, b, kernel in spans)


def dtype_name(model_or_dtype) -> str:
    """A dtype as every record spells it: a quantized model's format (its `mtad_dtype`, e.g.
    "q4_1"), else torch's name without its module ("bfloat16", not "torch.bfloat16"); a model is
    read through its first parameter, a string is taken as a dtype's name."""
    named = getattr(model_or_dtype, "mtad_dtype", None)
    if named:
        return named
    if hasattr(model_or_dtype, "parameters"):
        model_or_dtype = next(model_or_dtype.parameters()).dtype
    return str(model_or_dtype).removeprefix("torch.")


def environment_record(models=(), devices=None) -> dict:
    """Machine, devices, dtypes, threads, library versions and the code state; the one record
    written by the runner (env.json), the benchmark and the draft measurement."""
    import torch
    import transformers

    from mtad.devices import model_devices

    models = [m for m in models if m is not None]
    devices = list(devices) if devices is not None else model_devices(*models)
    gpus = [torch.cuda.get_device_name(d) for d in devices if d.type == "cuda"]
    cpu = cpu_model()
    # a quantized model names its format (mtad_dtype, e.g. "q4_1"): its parameters hold only the float parts
    named = [dtype_name(m) for m in models if list(m.parameters())[:1]]
    dtypes = sorted(set(named))
    try:
        import hydra

        hydra_version = hydra.__version__
    except ImportError:
        hydra_version = None
    return {
        "machine": f"{len(gpus)}x {gpus[0]}" if gpus else f"{cpu} ({os.cpu_count()} CPUs)",
        "cpu": cpu,
        "cpu_isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "devices": [str(d) for d in devices],
        "dtype": ",".join(dtypes),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "hydra": hydra_version,
            "cuda": torch.version.cuda,
        },
        "git": git_commit(),
    }


STAMPS = ".stamps"  # under results/: `make results`' records, one per finished step and one of the regeneration


def read_stamp(results: Path, name: str) -> dict | None:
    """The record `make results` (`mtad.regeneration`) left for a step, or for the regeneration
    ("regeneration"), under ``results/.stamps``: None where there is none or it is not a JSON object."""
    try:
        stamp = json.loads((results / STAMPS / name).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def stamp_label(stamp: dict) -> str:
    """A step's stamp as one clause: where and in what it ran and when it finished (`AMD EPYC (2 CPUs,
    avx2), target float32, commit fdcbcfb2 (code state b5573f3d), finished 2026-12-05`)."""
    kernels = f", kernels {stamp['kernels']}" if stamp.get("kernels") else ""
    return (
        f"{stamp.get('machine') or 'machine not recorded'}, target {stamp.get('target_dtype') or 'not pinned'}"
        f"{kernels}, commit {(stamp.get('commit') or 'unknown')[:8]} (code state {(stamp.get('code') or '?')[:8]}), "
        f"finished {(stamp.get('finished') or 'unknown')[:10]}"
    )


def provenance_key(git: dict | None) -> str:
    """One string per code state: ``<commit>`` or ``<commit>+dirty:<hash12>`` ("unknown" without git)."""
    git = git or {}
    if not git.get("commit"):
        return "unknown"
    if git.get("dirty"):
        return f"{git['commit']}+dirty:{(git.get('diff_sha256') or '?')[:12]}"
    return git["commit"]


COMMANDS = {
    "machine": lambda root: machine_key(),
    "code-state": code_state,
    "uncommitted-code": lambda root: "\n".join(uncommitted_code(root)),
}

if __name__ == "__main__":  # `python -m mtad.provenance COMMAND`, in the checkout it reads: what `make results` asks
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python -m mtad.provenance {{{'|'.join(COMMANDS)}}}")
    printed = COMMANDS[sys.argv[1]](Path.cwd())
    if printed:
        print(printed)
