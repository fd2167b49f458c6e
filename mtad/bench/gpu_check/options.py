"""What a run of the GPU check is asked for (`Options`, checked against the registry, the engine's
decode paths and the curve models) and its defaults."""

from __future__ import annotations

from dataclasses import dataclass

from .check_records import CHECKS
from .checks.cost_curve import CURVE_MODELS
from .checks.embedded_pair import EMBEDDED_PAIR
from .engine import decode_paths

DEFAULT_MINUTES = 8.0
DEFAULT_OUT = "results/local/gpu_check"


@dataclass
class Options:
    """What to run. `device`: auto (CUDA when there is one, else a dry run) | cuda | cuda:N | cpu
    (the checks on the CPU: their code paths, not a GPU's numbers); `paths`: decode paths of the
    decode-path check (None: all on CUDA, all but compiled on a CPU); `curve_model`: "gpu" | "small"
    (None: gpu on CUDA, small on a CPU); `quick`: fewer tokens, seeds, draws and repetitions."""

    device: str = "auto"
    checks: tuple[str, ...] = tuple(CHECKS)
    quick: bool = False
    paths: tuple[str, ...] | None = None
    max_minutes: float = DEFAULT_MINUTES
    curve_model: str | None = None
    embedded_pair: str = EMBEDDED_PAIR

    def __post_init__(self):
        unknown = sorted(set(self.checks) - set(CHECKS))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; valid: {', '.join(CHECKS)}")
        if self.paths is not None and set(self.paths) - set(decode_paths()):
            raise ValueError(f"unknown decode path(s) {sorted(set(self.paths) - set(decode_paths()))}")
        if self.curve_model is not None and self.curve_model not in CURVE_MODELS:
            raise ValueError(f"unknown curve model {self.curve_model!r}; valid: {', '.join(CURVE_MODELS)}")

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
