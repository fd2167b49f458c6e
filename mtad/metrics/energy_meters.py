"""Energy meters over a decoding window: NVML (NVIDIA GPUs) and RAPL (CPU packages).

Both read a monotonically increasing hardware energy counter per device before and after
the window; energy = sum over devices of the counter increase times the counter's unit.
Nothing is estimated: when no counter can be read the reading carries ``joules=None`` and
the reason, and reports show the value as missing.

- NVML: ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded,
  Volta and newer) for the GPUs the models live on.
- RAPL: ``/sys/class/powercap/intel-rapl:N/energy_uj`` (microjoules, wraps at
  ``max_energy_range_uj``) for each CPU package; often root-only readable.

Usage::

    meter, reason = make_energy_meter("auto", devices=[torch.device("cuda:0")])
    meter.start(); ...decode...; reading = meter.stop()   # EnergyReading
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

METER_KINDS = ("auto", "nvml", "rapl", "none")
RAPL_ROOT = Path("/sys/class/powercap")
NVML_COUNTER_RANGE = 2**64  # unsigned long long millijoule counter


@dataclass
class EnergyReading:
    """Energy of one window; ``joules`` is None when it could not be measured."""

    meter: str
    joules: float | None
    per_device: dict[str, float] = field(default_factory=dict)
    reason: str | None = None

    def as_dict(self) -> dict:
        return {"meter": self.meter, "joules": self.joules, "per_device": dict(self.per_device), "reason": self.reason}


def counter_delta(start: int, end: int, max_range: int | None) -> int:
    """Increase of a wrapping counter between two reads (at most one wrap in between).

    A counter that counts up to ``max_range`` and restarts at 0 reads ``end < start``
    after a wrap; the increase is then the rest of the range above ``start`` plus ``end``.
    """
    if start < 0 or end < 0:
        raise ValueError(f"energy counters are non-negative, got start={start}, end={end}")
    if end >= start:
        return end - start
    if max_range is None:
        raise ValueError(f"energy counter went backwards ({start} -> {end}) and its range is unknown")
    if start > max_range:
        raise ValueError(f"counter value {start} exceeds its range {max_range}")
    return (max_range - start) + end


def accumulate(readings: Sequence[int], max_range: int | None) -> int:
    """Total increase over a sequence of reads of one counter (a wrap between any two)."""
    if len(readings) < 2:
        raise ValueError("need at least two counter reads to measure energy")
    return sum(counter_delta(a, b, max_range) for a, b in zip(readings[:-1], readings[1:]))


def window_joules(
    traces: Mapping[str, Sequence[int]], max_ranges: Mapping[str, int | None], joules_per_unit: float
) -> dict[str, float]:
    """Joules per device from each device's recorded counter reads."""
    return {dev: accumulate(reads, max_ranges.get(dev)) * joules_per_unit for dev, reads in traces.items()}


class CounterMeter:
    """A meter over named counters read by ``read_counters() -> {device: raw value}``.

    ``start()`` takes a first read, ``poll()`` may add reads inside a long window (so
    that a counter wrapping more than once is still counted), ``stop()`` takes the last
    read and returns the window's energy summed over devices.
    """

    def __init__(
        self,
        name: str,
        read_counters: Callable[[], dict[str, int]],
        joules_per_unit: float,
        max_ranges: Mapping[str, int | None],
    ):
        self.name = name
        self.read_counters = read_counters
        self.joules_per_unit = joules_per_unit
        self.max_ranges = dict(max_ranges)
        self._traces: dict[str, list[int]] | None = None

    def start(self) -> None:
        self._traces = {dev: [value] for dev, value in self.read_counters().items()}

    def poll(self) -> None:
        if self._traces is None:
            raise RuntimeError("poll() before start()")
        for dev, value in self.read_counters().items():
            self._traces[dev].append(value)

    def stop(self) -> EnergyReading:
        self.poll()
        per_device = window_joules(self._traces, self.max_ranges, self.joules_per_unit)
        self._traces = None
        return EnergyReading(self.name, sum(per_device.values()), per_device)


class MissingMeter:
    """Stands in when no counter is readable; every window is missing with the reason."""

    def __init__(self, reason: str):
        self.name = "none"
        self.reason = reason

    def start(self) -> None:
        pass

    def poll(self) -> None:
        pass

    def stop(self) -> EnergyReading:
        return EnergyReading(self.name, None, {}, self.reason)


# ---------------------------------------------------------------- NVML (GPUs)
def _nvml_handles(nvml, cuda_indices: Iterable[int]) -> dict[str, object]:
    """NVML handles of the given torch CUDA device indices (respecting CUDA_VISIBLE_DEVICES)."""
    import torch

    handles = {}
    for index in sorted(set(cuda_indices)):
        handle = None
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
            except Exception:  # noqa: BLE001 - fall back to the visible-device index below
                handle = None
        if handle is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            physical = int(ids[index]) if index < len(ids) and ids[index].isdigit() else index
            handle = nvml.nvmlDeviceGetHandleByIndex(physical)
        handles[f"cuda:{index}"] = handle
    return handles


def nvml_meter(cuda_indices: Iterable[int], nvml=None, handles: Mapping[str, object] | None = None) -> CounterMeter:
    """NVML total-energy meter for the given CUDA devices; raises with a reason if unusable."""
    if nvml is None:
        import pynvml as nvml  # nvidia-ml-py
    if handles is None:
        nvml.nvmlInit()
        handles = _nvml_handles(nvml, cuda_indices)
    if not handles:
        raise RuntimeError("no CUDA device in use, nothing for NVML to measure")

    def read() -> dict[str, int]:
        return {dev: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for dev, h in handles.items()}

    read()  # fails here (e.g. NotSupported before Volta) rather than mid-run
    return CounterMeter("nvml", read, 1e-3, {dev: NVML_COUNTER_RANGE for dev in handles})


# ---------------------------------------------------------------- RAPL (CPUs)
def rapl_domains(root: Path = RAPL_ROOT) -> list[Path]:
    """Top-level RAPL package domains (``intel-rapl:N``), not their sub-domains.

    Sub-domains (core, uncore, dram) are parts of a package and ``psys`` covers the whole
    platform including the packages; summing them with the packages would double count.
    """
    tops = sorted(p for p in root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
    packages = [p for p in tops if _read_text(p / "name", "").startswith("package")]
    return packages or [p for p in tops if _read_text(p / "name", "") != "psys"]


def _read_text(path: Path, default: str | None = None) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        if default is None:
            raise
        return default


def rapl_meter(root: Path = RAPL_ROOT) -> CounterMeter:
    """RAPL meter summing every CPU package; raises with a reason if unreadable."""
    domains = rapl_domains(root)
    if not domains:
        raise RuntimeError(f"no RAPL package domain under {root}")
    names = {f"{d.name}:{_read_text(d / 'name', d.name)}": d for d in domains}
    try:
        max_ranges = {name: int(_read_text(d / "max_energy_range_uj")) for name, d in names.items()}
        for d in names.values():
            _read_text(d / "energy_uj")
    except PermissionError as err:
        raise RuntimeError(
            f"RAPL counters are not readable ({err.filename}); they are root-only on "
            "most kernels: `sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj`"
        ) from err

    def read() -> dict[str, int]:
        return {name: int(_read_text(d / "energy_uj")) for name, d in names.items()}

    return CounterMeter("rapl", read, 1e-6, max_ranges)


# ---------------------------------------------------------------- choice
def make_energy_meter(kind: str, devices: Iterable = (), rapl_root: Path = RAPL_ROOT):
    """The meter for ``kind`` over the torch ``devices`` the models use.

    Returns ``(meter, reason)``: a ``CounterMeter`` and None, or a ``MissingMeter`` and
    the reason nothing can be measured (never an estimate). ``auto`` takes NVML when the
    models are on CUDA devices, RAPL when they are on the CPU.
    """
    if kind not in METER_KINDS:
        raise ValueError(f"unknown energy meter {kind!r}; valid: {', '.join(METER_KINDS)}")
    if kind == "none":
        reason = "energy metering switched off (energy=none)"
        return MissingMeter(reason), reason
    import torch

    cuda = sorted({d.index or 0 for d in map(torch.device, devices) if d.type == "cuda"})
    wanted = kind if kind != "auto" else ("nvml" if cuda else "rapl")
    try:
        meter = nvml_meter(cuda) if wanted == "nvml" else rapl_meter(rapl_root)
        return meter, None
    except Exception as err:  # noqa: BLE001 - any failure means "missing, with this reason"
        reason = f"{wanted} unavailable: {type(err).__name__}: {err}"
        return MissingMeter(reason), reason
