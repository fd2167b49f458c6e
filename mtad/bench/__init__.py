"""Speed of our decoders on their decode paths against the reference implementations.

Every method on the eager path (the model's own forward, DynamicCache) and the fast one
(static KV cache, lean forward; static_kv.py), beside Hugging Face's `generate()` (eager, and
with its static cache + torch.compile) and assisted generation: the same pair, prompts and
token budget, in one process, alternating runs, medians over repetitions. Compilation is
timed on the warm-up call and reported apart from tokens/s. Then the cost of verifying
1, 2, 3, 5, 9 tokens in one target forward per dtype and path, against the floor of a decode
step (weight bytes / measured copy bandwidth), the time of the same forwards' matrix products
alone (`linear_only_ms`: what a forward costs beyond its products), and the speed-ups those
costs predict; optionally llama.cpp on the same GGUF (`llama_cpp_reference`); the goals table.

- ``timings``: the rows (configurations), the warm-up that times compilation, each row's summary of
  its repetitions, the machine's record; the repetitions themselves are cells, and the whole
  benchmark of one pair runs them (`mtad.experiments.bench_cells.measure_pair`);
- ``curves``: the verification-cost curve, the bandwidth floor, a forward's matrix products timed
  alone (and requantized to per-row int8); one forward is timed by
  `mtad.generation.forward_ms`, which the draft measurement uses too;
- ``calibrate``: the cheapest dense dtype and thread count per model and work, and the SpS
  speed-ups the measured costs predict;
- ``llama_cpp``: llama.cpp on the same GGUF, the optional reference;
- ``goal_checks``: the goals (a)-(l), their thresholds and whether a payload meets them;
- ``render``: bench.json's timings section and bench.md from a payload, a stored payload made ready to
  render, and what results/README.md shows of it;
- ``modelled``: the cost model's speed-ups from each row's counts, held against the measured ones;
- ``gpu_check``: ``make gpu-check``, the GPU paths in one run on tiny random-weight models (exactness
  against the CPU, every method on every decode path, NVML energy, the target cost curve and copy
  bandwidth, the embedded pair when its files are here); a dry run without CUDA;
- ``target_distance``: how far each reduced target's distribution is from the float32 target's
  (``--q4-tv``), and the rounding of the carry over the GGUF's Q4_1 blocks.
"""

from mtad.bench.calibrate import calibration, predicted_sps_speedup, predictions
from mtad.bench.curves import (
    curve_model,
    int8_products,
    linear_only_ms,
    matrix_products,
    products_ms,
    verification_curve,
)
from mtad.bench.goal_checks import goals
from mtad.bench.llama_cpp import LLAMA_CPP_MISSING, llama_cpp_on_pair, llama_cpp_reference
from mtad.bench.render import rendered, write_report
from mtad.bench.timings import (
    Config,
    default_configs,
    environment,
    method_params,
    other_targets,
    summarise,
    warm_up,
)
from mtad.generation import forward_ms

__all__ = [
    "LLAMA_CPP_MISSING",
    "Config",
    "calibration",
    "curve_model",
    "default_configs",
    "environment",
    "forward_ms",
    "goals",
    "int8_products",
    "linear_only_ms",
    "llama_cpp_on_pair",
    "llama_cpp_reference",
    "matrix_products",
    "method_params",
    "other_targets",
    "predicted_sps_speedup",
    "predictions",
    "products_ms",
    "rendered",
    "summarise",
    "verification_curve",
    "warm_up",
    "write_report",
]
