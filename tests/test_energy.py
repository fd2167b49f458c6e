"""Energy arithmetic on recorded counter sequences: deltas, wrap-around, several devices."""

from pathlib import Path

import pytest

from mtad.metrics.energy_meters import (
    CounterMeter,
    MissingMeter,
    accumulate,
    counter_delta,
    make_energy_meter,
    nvml_meter,
    rapl_meter,
)

RAPL_RANGE = 262143328850  # a real package's max_energy_range_uj


def test_counter_delta_plain_and_wrapped():
    assert counter_delta(1_000, 4_500, RAPL_RANGE) == 3_500
    # counter at 100 uJ below its range, wraps, reads 400: 100 + 400 uJ passed
    assert counter_delta(RAPL_RANGE - 100, 400, RAPL_RANGE) == 500
    with pytest.raises(ValueError, match="backwards"):
        counter_delta(10, 5, None)


def test_accumulate_sequence_with_a_wrap_in_the_middle():
    reads = [RAPL_RANGE - 3_000, RAPL_RANGE - 1_000, 2_000, 7_000]
    assert accumulate(reads, RAPL_RANGE) == 2_000 + 3_000 + 5_000
    with pytest.raises(ValueError):
        accumulate([5], RAPL_RANGE)


def _replay(sequences):
    """A read_counters() that replays recorded per-device sequences, one read per call."""
    calls = {"n": 0}

    def read():
        i = calls["n"]
        calls["n"] += 1
        return {dev: seq[i] for dev, seq in sequences.items()}

    return read


def test_counter_meter_sums_several_devices_with_units():
    # two GPUs in millijoules, cuda:1 wrapping its 64-bit counter during the window
    top = 2**64
    recorded = {"cuda:0": [50_000, 80_000, 110_000], "cuda:1": [top - 5_000, top - 1_000, 9_000]}
    meter = CounterMeter("nvml", _replay(recorded), 1e-3, {"cuda:0": top, "cuda:1": top})
    meter.start()
    meter.poll()
    reading = meter.stop()
    assert reading.per_device == pytest.approx({"cuda:0": 60.0, "cuda:1": 14.0})
    assert reading.joules == pytest.approx(74.0)
    assert reading.reason is None


def test_missing_meter_never_invents_a_number():
    reading = MissingMeter("no counter").stop()
    assert reading.joules is None and reading.reason == "no counter"
    meter, reason = make_energy_meter("none")
    assert meter.stop().joules is None and "energy=none" in reason
    with pytest.raises(ValueError, match="valid: auto, nvml, rapl, none"):
        make_energy_meter("watts")


def _fake_rapl(root: Path, packages: dict[str, tuple[str, int, int]]):
    for dirname, (name, value, max_range) in packages.items():
        d = root / dirname
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{value}\n")
        (d / "max_energy_range_uj").write_text(f"{max_range}\n")


def test_rapl_meter_reads_packages_only_and_handles_wrap(tmp_path):
    _fake_rapl(
        tmp_path,
        {
            "intel-rapl:0": ("package-0", RAPL_RANGE - 1_000_000, RAPL_RANGE),
            "intel-rapl:1": ("package-1", 5_000_000, RAPL_RANGE),
            "intel-rapl:0:0": ("core", 1, RAPL_RANGE),  # part of package-0
            "intel-rapl:2": ("psys", 1, RAPL_RANGE),
        },
    )  # whole platform
    meter = rapl_meter(tmp_path)
    meter.start()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("2000000\n")  # wrapped: 1 J + 2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("9000000\n")  # 4 J
    reading = meter.stop()
    assert sorted(reading.per_device) == ["intel-rapl:0:package-0", "intel-rapl:1:package-1"]
    assert reading.joules == pytest.approx(7.0)


def test_auto_without_counters_is_missing_with_reason(tmp_path):
    meter, reason = make_energy_meter("auto", devices=["cpu"], rapl_root=tmp_path)
    assert isinstance(meter, MissingMeter)
    assert reason.startswith("rapl unavailable") and str(tmp_path) in reason


class _FakeNvml:
    """pynvml stand-in replaying a recorded millijoule sequence per handle."""

    def __init__(self, sequences):
        self.sequences = {h: list(seq) for h, seq in sequences.items()}

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.sequences[handle].pop(0)


def test_nvml_meter_with_recorded_sequences():
    nvml = _FakeNvml({"h0": [0, 1_000, 3_500], "h1": [10, 10, 2_010]})  # first read is the probe
    meter = nvml_meter([0, 1], nvml=nvml, handles={"cuda:0": "h0", "cuda:1": "h1"})
    meter.start()
    reading = meter.stop()
    assert reading.per_device == pytest.approx({"cuda:0": 2.5, "cuda:1": 2.0})
    assert reading.joules == pytest.approx(4.5)


def test_why_energy_is_missing_is_said_once_per_process_not_once_per_cell(tmp_path, caplog):
    """Two cells of one run (a multirun's jobs share the process) log the energy meter's reason once."""
    import logging

    from tiny_cells import run_tiny_cell

    from mtad.runner.session import log_once

    log_once.cache_clear()  # a cell run earlier in this process said it already
    with caplog.at_level(logging.INFO, logger="mtad.run"):
        for method in ("sampling", "sps"):
            run_tiny_cell(tmp_path / "runs", method)
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("energy:")]
        assert said == ["energy: energy metering switched off (energy=none)"]
        log_once(logging.INFO, "energy: another reason")  # another message is said in its turn
        assert caplog.records[-1].getMessage() == "energy: another reason"
