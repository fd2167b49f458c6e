"""Which CPU kernel multiplies a bf16 model's matrices, chosen per forward width on this machine.

torch has two bf16 matrix products on a CPU: oneDNN's (the default) and its own (oneDNN turned
off). Their costs cross over: torch's own GEMV reads a one-row product's weights near the memory
bandwidth and is the faster one there on some CPUs, but it does not block for several rows, so
at 5 rows it costs ~3x and at 17 rows ~10x oneDNN's, which stays nearly flat in the rows. A
third is AMD's ZenDNN through ``zentorch`` (the optional extra ``mtad[zen]``, built for one torch
release), whose bf16 product is near the bandwidth at one row and nearly flat in the rows; it is
a candidate wherever it imports (it runs on Intel CPUs with AVX-512 too, where calibration
decides whether it wins). A decode step is one row, a verification several, a prefill many: each
width bucket gets the kernel timed fastest for it on this machine (`calibrate`, kept in
``$MTAD_CACHE/kernels.json`` per CPU, thread count, weight shapes and the kernels it could
choose from), and a forward runs under its bucket's kernel (`KernelChoice.scope`). The kernels
round bf16 products alike to within one bf16 unit.

Only bf16 models on a CPU are concerned; float32 and float64 forwards (the reproduction
reference, the exactness tests) keep oneDNN. ``MTAD_KERNELS`` = ``auto`` (the default:
the stored calibration, else one now), ``calibrate`` (time the kernels now and replace the stored
choice: a calibration made while other work ran can pick a kernel that loses on a quiet machine;
`make bench` does this), ``onednn`` (oneDNN everywhere), ``native`` (torch's own everywhere) or
``zentorch`` (where it imports) overrides.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import statistics
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

BUILT_IN = ("onednn", "native")
# forward widths (new positions) by bucket, and the width each bucket is timed at; wider
# forwards (prefills) always take oneDNN, torch's own product does not block for many rows
BUCKETS = ((1, 1), (2, 4), (5, 17))
TIMED_WIDTH = {(1, 1): 1, (2, 4): 3, (5, 17): 9}
REPS = 7  # rounds of the kernels taking turns (median), after one warm-up round


@dataclass(frozen=True)
class KernelChoice:
    """The kernel of each width bucket (`BUCKETS`; wider: oneDNN) and how it was chosen."""

    by_bucket: tuple[str, ...]
    source: str  # "calibrated", "cached" or "MTAD_KERNELS=<value>"

    def kernel(self, width: int) -> str:
        for (low, high), kernel in zip(BUCKETS, self.by_bucket):
            if low <= width <= high:
                return kernel
        return "onednn"

    def scope(self, width: int) -> contextlib.AbstractContextManager:
        """The forward of `width` new positions under its bucket's kernel."""
        return products_under(self.kernel(width))

    def as_dict(self) -> dict:
        names = [f"{low}" if low == high else f"{low}-{high}" for low, high in BUCKETS]
        return {"by_width": dict(zip(names, self.by_bucket)) | {"wider": "onednn"}, "source": self.source}


@functools.cache
def zentorch_available() -> bool:
    """Whether ZenDNN's products can run here (``zentorch`` imports and registers its op)."""
    try:
        import zentorch  # noqa: F401 (registers torch.ops.zentorch)
    except Exception:  # not installed, or built for another torch: the other kernels stay
        return False
    return hasattr(torch.ops.zentorch, "zentorch_linear_unary")


def available() -> tuple[str, ...]:
    """The kernels this process can choose from."""
    return BUILT_IN + (("zentorch",) if zentorch_available() else ())


TIMED_NOW = ("auto", "calibrate")  # the settings that choose by timing (stored, or anew)


def choices() -> tuple[str, ...]:
    """What ``MTAD_KERNELS`` may name here."""
    return (*TIMED_NOW, *available())


def products_under(kernel: str) -> contextlib.AbstractContextManager:
    """A block whose bf16 products run under `kernel`."""
    if kernel == "native":
        return native_products()
    if kernel == "zentorch":
        return zentorch_products()
    return contextlib.nullcontext()


_SEEN: dict[int, torch.Tensor] = {}  # address -> the weight ZenDNN has cached there (held: never freed)


@contextlib.contextmanager
def zentorch_products():
    """``F.linear`` on bf16 CPU tensors through ZenDNN within the block (``nn.Linear`` calls it too).

    The function is swapped, not intercepted by a ``TorchFunctionMode``: a mode would route every
    operator of the forward through Python, costing more than the products save.

    ZenDNN keeps each weight it has seen reordered into its blocked layout, found again by the
    weight's address (its speed at one row depends on it: without the cache a product costs ~3x).
    A weight freed and another allocated at the same address would be multiplied as the old one,
    so every weight passed here is held for the life of the process (`_SEEN`), and a tensor of
    another shape at a held address takes oneDNN. Only a weight that is its whole storage is
    taken: a module's rows of a fused matrix (`layer_math.fused_weights` points q, k, v, gate and
    up into one) share the fused matrix's address, and were such a view seen first (a path
    multiplying the modules one by one: eager or compiled), the fused products of the fast path
    would fall to oneDNN for the life of the process. Weights must not change in place after
    their first product here."""
    original = F.linear

    def linear(x, weight, bias=None):
        if torch.compiler.is_compiling():  # a traced graph: its weights are inductor's to lay out
            return original(x, weight, bias)
        if x.dtype is torch.bfloat16 and weight.dtype is torch.bfloat16 and x.device.type == "cpu":
            seen = _SEEN.get(weight.data_ptr())
            if seen is None and _whole(weight):
                seen = _SEEN[weight.data_ptr()] = weight
            if seen is weight or (seen is not None and seen.shape == weight.shape and seen.stride() == weight.stride()):
                return torch.ops.zentorch.zentorch_linear_unary(x, weight, bias)
        return original(x, weight, bias)

    F.linear = linear
    try:
        yield
    finally:
        F.linear = original


def _whole(weight: torch.Tensor) -> bool:
    """Whether `weight` is all of its storage (not rows of a larger matrix)."""
    return weight.storage_offset() == 0 and weight.untyped_storage().nbytes() == weight.numel() * weight.element_size()


@contextlib.contextmanager
def native_products():
    """torch's own matrix products (oneDNN off) within the block."""
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def concerned(model: torch.nn.Module) -> bool:
    """Whether the model's products have a kernel to choose: bf16 weights on a CPU."""
    weight = next(model.parameters(), None)
    return weight is not None and weight.dtype == torch.bfloat16 and weight.device.type == "cpu"


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The [N, K] matrices a forward multiplies by: every Linear's, the (restricted) LM head's included."""
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _products_once(mats: list[torch.Tensor], inputs: dict[int, torch.Tensor], kernel: str) -> float:
    """Ms of one product by each of `mats` under `kernel` (`inputs`: a [width, K] input per K)."""
    with products_under(kernel):
        start = time.perf_counter()
        for m in mats:
            F.linear(inputs[m.shape[1]], m)
        return 1e3 * (time.perf_counter() - start)


def calibrate(model: torch.nn.Module) -> tuple[str, ...]:
    """Per bucket, the kernel whose products of `model`'s weights ran fastest just now."""
    mats = weights(model)
    return tuple(fastest(mats, TIMED_WIDTH[b]) for b in BUCKETS)


def fastest(mats: list[torch.Tensor], width: int) -> str:
    """The kernel of least median time for `mats` at `width` rows. The kernels take turns on every
    repetition: a calibration is kept for good, and timing them one after another lets a burst of
    other work (another process, a frequency change) land on one kernel alone and pick it wrongly."""
    kernels = available()
    inputs = {k: torch.randn(width, k, dtype=torch.bfloat16) for k in {m.shape[1] for m in mats}}
    times: dict[str, list[float]] = {kernel: [] for kernel in kernels}
    for rep in range(REPS + 1):
        for kernel in kernels:
            ms = _products_once(mats, inputs, kernel)
            if rep:  # the first round is a warm-up
                times[kernel].append(ms)
    return min(kernels, key=lambda kernel: statistics.median(times[kernel]))


@functools.cache
def machine_key() -> str:
    """The CPU and its core count: part of every stored calibration's key."""
    from mtad.provenance import cpu_model

    return f"{cpu_model()}|{os.cpu_count()} CPUs"


_shapes_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> digest of its weight shapes


def _cache_key(model: torch.nn.Module) -> str:
    """The machine, its thread count, the model's weight shapes and the kernels there were to
    choose from: what a calibration holds for (installing ``zentorch`` calibrates anew; the shapes
    are read once per model: every generation builds its caches anew)."""
    if model not in _shapes_of:
        _shapes_of[model] = _shapes_digest(model)
    return f"{machine_key()}|{torch.get_num_threads()} threads|{_shapes_of[model]}|{'+'.join(available())}"


def _shapes_digest(model: torch.nn.Module) -> str:
    shapes = ",".join("x".join(map(str, m.shape)) for m in weights(model))
    return hashlib.sha1(shapes.encode()).hexdigest()[:12]


def _read(path) -> dict:
    """The machine's stored calibrations (none when the file is missing or unreadable)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


_chosen: dict[str, KernelChoice] = {}  # this process's choices by cache key


def choose(model: torch.nn.Module) -> KernelChoice | None:
    """The model's kernels per width bucket (None: not a bf16 model on a CPU): MTAD_KERNELS if it
    names one, else this process's or (unless MTAD_KERNELS=calibrate) the machine's earlier
    calibration, else a calibration now, stored for the machine's later processes."""
    if not concerned(model):
        return None
    setting = os.environ.get("MTAD_KERNELS", "auto")
    if setting not in choices():
        hint = " (zentorch: pip install 'mtad[zen]')" if setting == "zentorch" else ""
        raise ValueError(f"MTAD_KERNELS={setting!r}; valid here: {', '.join(choices())}{hint}")
    key = _cache_key(model)
    if setting not in TIMED_NOW:
        _chosen[key] = KernelChoice((setting,) * len(BUCKETS), f"MTAD_KERNELS={setting}")
        return _chosen[key]
    if key in _chosen and not _chosen[key].source.startswith("MTAD_KERNELS"):
        return _chosen[key]
    from mtad.data import cache_root

    path = cache_root() / "kernels.json"
    stored = _read(path)
    if setting == "auto" and key in stored and set(stored[key]) <= set(available()):
        choice = KernelChoice(tuple(stored[key]), "cached")
    else:
        if "zentorch" not in available():
            say_zentorch_missing()
        choice = KernelChoice(calibrate(model), "calibrated")
        stored = _read(path) | {key: list(choice.by_bucket)}  # another process may have added its own
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1) + "\n")
        tmp.replace(path)  # atomic: a process reading it meanwhile sees the old file or the new one
    _chosen[key] = choice
    return choice


@functools.cache
def say_zentorch_missing() -> None:
    """One line per process: the calibration chooses without ZenDNN's products, and how to add them."""
    log.info(
        "kernels: zentorch is not installed, so bf16 forwards choose between torch's own products; "
        "`pip install 'mtad[zen]'` adds ZenDNN's (x86-64 Linux, the CPU torch the suite pins; `make install` does)"
    )


def chosen() -> dict[str, dict]:
    """This process's kernel choices (what the run's environment record names)."""
    return {key: choice.as_dict() for key, choice in _chosen.items()}
