"""What a pair's ``target_dtype: auto`` means on this CPU: the dtype whose decoding costs least,
measured once per machine and kept.

A decoding block pays one 1-token target step (sampling) or one (γ+1)-token verification
(speculative methods), so the target's dtype is chosen by the sum of both, timed on the fast path
over a cached context (`mtad.generation.forward_ms`), float32 against its bf16 rounding:
bf16 halves the bytes a memory-bound step reads, but whether its products beat float32's depends on
the CPU (native bf16 or converted on the fly), the thread count and the kernels installed
(``zentorch``), which is why it is timed and not read off the CPU's flags. The bf16 forward runs
under its calibrated kernels (`mtad.decoding.kernels.choose`, stored for the machine too), so one
first load calibrates both. The choice is kept in ``$MTAD_CACHE/dtypes.json`` per machine, thread
count, kernels available and target; ``MTAD_KERNELS=calibrate`` times it anew, as it does the
kernels. On CUDA ``auto`` is a rule (`mtad.models.pairs.auto_dtype`), not measured.

``MTAD_TARGET_DTYPE`` pins what ``auto`` means, on any machine and device, measuring nothing: `make
results` sets it for every step it runs (`mtad.regeneration`), so that each step of a regeneration
runs the target in one dtype whichever machine it runs on. A target that names its dtype keeps it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import statistics
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

# the dense dtypes a model may be loaded in, by the name configs and records give them
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
CANDIDATES = ("float32", "bfloat16")
STEP_WIDTH, VERIFY_WIDTH = 1, 5  # a sampling step; a γ = 4 verification (the pending token and 4 drafts)
CONTEXT, REPS, ROUNDS = 128, 8, 3  # cached positions; forwards per timing (median); rounds the dtypes alternate
PIN_VARIABLE = "MTAD_TARGET_DTYPE"  # the environment variable that pins `auto` (`pinned_choice`)


@dataclass(frozen=True)
class DtypeChoice:
    """The target dtype ``auto`` resolved to, how (``measured`` now, or ``stored`` from an earlier
    measurement on this machine) and the ms it was chosen by: {dtype: {width: ms}}."""

    dtype: str
    source: str
    ms: dict[str, dict[int, float]]

    def as_dict(self) -> dict:
        if self.source == "pinned":
            return {"target_dtype": self.dtype, "source": self.source, "by": PIN_VARIABLE}
        return {
            "target_dtype": self.dtype,
            "source": self.source,
            "ms": {d: {str(w): round(t, 3) for w, t in by_width.items()} for d, by_width in self.ms.items()},
            "widths": {"step": STEP_WIDTH, "verification": VERIFY_WIDTH},
        }

    def summary(self) -> str:
        """One line: the winner and both dtypes' step + verification cost."""
        costs = ", ".join(f"{d} {cost(self.ms[d]):.1f} ms" for d in self.ms)
        return f"target {self.dtype} ({self.source}: 1-token step + {VERIFY_WIDTH}-token verification: {costs})"


def cost(ms: dict[int, float]) -> float:
    """What a dtype is chosen by: a 1-token step plus a verification."""
    return ms[STEP_WIDTH] + ms[VERIFY_WIDTH]


def cache_key(target_spec: dict, decode_path: str | None) -> str:
    """The machine, its thread count, the kernels it can choose from, the target and the decode
    path: what a measurement holds for."""
    from mtad.decoding.kernels import available, machine_key

    spec = hashlib.sha1(json.dumps(target_spec, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{machine_key()}|{torch.get_num_threads()} threads|{'+'.join(available())}|{spec}|{decode_path or 'fast'}"


def _path():
    from mtad.data import cache_root

    return cache_root() / "dtypes.json"


def _read() -> dict:
    try:
        stored = json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def check_pin(value: str, name: str = PIN_VARIABLE) -> DtypeChoice:
    """`value` as the dtype `auto` is pinned to; a value that is not a dense dtype is refused with
    the valid ones (`name`: the setting that gave it)."""
    if value not in DTYPES:
        raise ValueError(f"{name}={value!r} is not a target dtype; valid: {', '.join(DTYPES)}")
    return DtypeChoice(value, "pinned", {})


def pinned_choice() -> DtypeChoice | None:
    """The dtype ``MTAD_TARGET_DTYPE`` pins `auto` to (None where it is unset or empty; `check_pin`)."""
    value = os.environ.get(PIN_VARIABLE, "").strip()
    return check_pin(value) if value else None


def stored_choice(target_spec: dict, decode_path: str | None) -> DtypeChoice | None:
    """This machine's earlier measurement for the target (None: none, or ``MTAD_KERNELS=calibrate``)."""
    if os.environ.get("MTAD_KERNELS") == "calibrate":
        return None
    record = _read().get(cache_key(target_spec, decode_path))
    if not isinstance(record, dict) or record.get("target_dtype") not in CANDIDATES:
        return None
    ms = {d: {int(w): t for w, t in by_width.items()} for d, by_width in record.get("ms", {}).items()}
    return DtypeChoice(record["target_dtype"], "stored", ms)


def _store(key: str, choice: DtypeChoice) -> None:
    path = _path()
    stored = _read() | {key: choice.as_dict() | {"source": "measured"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stored, indent=1) + "\n")
    tmp.replace(path)  # atomic: a process reading it meanwhile sees the old file or the new one


def time_dtypes(models: dict[str, torch.nn.Module], decode_path: str | None) -> dict[str, dict[int, float]]:
    """Median ms of a 1-token step and a verification per model ({dtype: model}), the dtypes taking
    turns every round so that a burst of other work cannot land on one of them alone."""
    from mtad.generation import forward_ms

    path = decode_path or "fast"
    times: dict[str, dict[int, list[float]]] = {d: {STEP_WIDTH: [], VERIFY_WIDTH: []} for d in models}
    for _ in range(ROUNDS):
        for dtype, model in models.items():
            for width in (STEP_WIDTH, VERIFY_WIDTH):
                times[dtype][width].append(forward_ms(model, path, width, CONTEXT, REPS))
    return {d: {w: statistics.median(ts) for w, ts in by_width.items()} for d, by_width in times.items()}


@torch.no_grad()
def measure(
    target_float32: torch.nn.Module, target_spec: dict, decode_path: str | None
) -> tuple[torch.nn.Module, DtypeChoice]:
    """Time the float32 target beside its bf16 copy, keep the choice for the machine, and return
    the cheaper model with the choice."""
    bf16 = copy.deepcopy(target_float32).to(torch.bfloat16).eval()
    models = {"float32": target_float32, "bfloat16": bf16}
    ms = time_dtypes(models, decode_path)
    winner = min(CANDIDATES, key=lambda d: cost(ms[d]))
    choice = DtypeChoice(winner, "measured", ms)
    _store(cache_key(target_spec, decode_path), choice)
    log.info("dtype: %s; kept in %s", choice.summary(), _path())
    return models[winner], choice
