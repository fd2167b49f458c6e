"""`make gpu-check`: the GPU paths checked in one prepared run (at most 8 minutes on one GPU) on tiny
random-weight models built from configs, with nothing downloaded (HF_HUB_OFFLINE=1). The checks, in
the order they run (`CHECKS`, one `Check` record each, in `check_records.py`):

- ``exactness`` (`checks/exactness.py`): tree attention through the public forward, every method's tokens
  on the device against the same decode on the CPU (float64 models, the same CPU generator), and a
  chi-square test of the lossless methods' draws against the target distribution enumerated on the
  CPU; the exactness tests' cases (`mtad.models.check_cases`), which those tests run on the CPU only;
- ``decode_paths`` (`checks/decode_paths.py`): every method on every decode path of the engine with the
  tiny pairs: tokens/s, block efficiency, the path it resolved to, warm-up (compilation) time, and
  whether its tokens are the eager path's;
- ``energy`` (`checks/energy.py`): an NVML energy meter around a short decode;
- ``cost_curve`` (`checks/cost_curve.py`): ms of one target forward per width over a 256-token cache on a
  random Llama whose weights dwarf the cache, its parameter bytes and the copy bandwidth, hence the
  floor of a decode step;
- ``embedded_pair`` (`checks/embedded_pair.py`): the embedded pair's methods and their speed-ups over
  sampling, when its files are on this machine (skipped with the reason otherwise).

Without a CUDA device (unless asked for ``device="cpu"``) it is a dry run: every check is listed
with what it would run and the reason it is skipped (`runner.py`). Every check is recorded as ran,
skipped (with the reason) or failed (with the error); the report (gpu_check.json, gpu_check.md,
`report.py`) is rewritten after each one. What the checks are given and raise is in `context.py`,
the machine's record in `machine.py`, the engine's methods and paths in `engine.py`, the options in
`options.py`, the timed decodes and tiny pairs in `timed_decodes.py`, Markdown cells and tables in
`markdown_cells.py`. Importing this package needs only the standard library, so the dry run works with a
python that has no torch (scripts/gpu_check.py then loads it by its folder; the methods and decode
paths are then read from the engine's source, `engine.py`).
"""

from .check_records import CHECKS, Check
from .checks.cost_curve import CURVE_CONTEXT, CURVE_MODELS, CURVE_PATHS, CURVE_WIDTHS
from .checks.embedded_pair import EMBEDDED_PAIR, embedded_pair_problem
from .context import Context, Failed, Skipped
from .engine import COMPILING_PATHS, UNCOMPILED_PATHS, decode_paths, methods
from .machine import NO_CUDA, cuda_problem, machine_record
from .options import DEFAULT_MINUTES, DEFAULT_OUT, Options
from .report import markdown, write_report
from .runner import exit_code, run

__all__ = [
    "CHECKS",
    "COMPILING_PATHS",
    "CURVE_CONTEXT",
    "CURVE_MODELS",
    "CURVE_PATHS",
    "CURVE_WIDTHS",
    "Check",
    "Context",
    "DEFAULT_MINUTES",
    "DEFAULT_OUT",
    "EMBEDDED_PAIR",
    "Failed",
    "NO_CUDA",
    "Options",
    "Skipped",
    "UNCOMPILED_PATHS",
    "cuda_problem",
    "decode_paths",
    "embedded_pair_problem",
    "exit_code",
    "machine_record",
    "markdown",
    "methods",
    "run",
    "write_report",
]
