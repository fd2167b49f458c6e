"""Loggers: the W&B offline run directory holds what was logged; failures still close runs."""

import struct
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tiny_cells import run_tiny_cell

from mtad.tracking import NullLogger, WandbLogger, flatten_scalars

BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of 7-byte-headed chunks
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_wandb_records(path: Path) -> list:
    """Parse an offline ``run-*.wandb`` file into wandb protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    pos, records, pending = 7, [], b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # block trailer too small for a header: padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def finished_records(path: Path, timeout_s: float = 60.0) -> list:
    """The run's records once the transaction log holds its ``exit`` record: wandb's service
    writes the log through a buffer it may flush only after ``run.finish()`` has returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def logged_items(records) -> tuple[dict, dict]:
    """(history keys -> last value json, summary keys -> value json) of the records."""
    history, summary = {}, {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.update({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): item.value_json for item in record.summary.update})
    return history, summary


def test_flatten_scalars_keeps_plottable_values():
    flat = flatten_scalars({"a": 1, "b": {"c": 2.5, "d": None, "e": [1, 2]}, "f": "x", "g": float("nan")})
    assert flat == {"a": 1, "b/c": 2.5, "f": "x"}


def test_wandb_offline_run_directory_has_the_logged_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="mtad-test", name="exp/pair/task/method", run_config={"seed": 7}, dir=str(tmp_path))
    logger.log_example(0, {"scores": {"rougeL": 0.25}, "new_tokens": 11})
    logger.log_example(1, {"scores": {"rougeL": 0.5}, "new_tokens": 13})
    logger.log_metrics({"tokens_per_s": 42.5, "scores": {"rougeL": 0.375}, "energy_j_per_token": None})
    logger.finish()

    run_dirs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 1 and Path(logger.run_dir) == run_dirs[0]
    records = finished_records(next(run_dirs[0].glob("run-*.wandb")))
    history, summary = logged_items(records)
    assert float(summary["tokens_per_s"]) == 42.5
    assert float(summary["scores/rougeL"]) == 0.375
    assert "energy_j_per_token" not in summary  # missing stays missing
    assert float(history["example/scores/rougeL"]) == 0.5  # the last example row
    assert float(history["cell/tokens_per_s"]) == 42.5
    config_items = [item for r in records if r.WhichOneof("record_type") == "run" for item in r.run.config.update]
    config_items += [item for r in records if r.WhichOneof("record_type") == "config" for item in r.config.update]
    assert any(item.key == "seed" and "7" in item.value_json for item in config_items)


def test_failed_cell_still_finishes_the_logger(monkeypatch, tmp_path):
    import mtad.run as run

    finished = []

    class SpyLogger(NullLogger):
        def finish(self, failed=False):
            finished.append(failed)

    def boom(cfg, plan, logger):
        raise RuntimeError("model exploded")

    import hydra.utils
    from hydra.core.hydra_config import HydraConfig

    from mtad.runner.layout import CellAddress

    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: None))
    address = CellAddress("e", "p", "t", "m", "", tmp_path / "cell")
    monkeypatch.setattr(run, "resolve_cell", lambda cfg, hydra_config: address)
    monkeypatch.setattr(run, "plan_cell", lambda cfg, cell: None)
    monkeypatch.setattr(run, "run_cell", boom)
    monkeypatch.setattr(hydra.utils, "instantiate", lambda *a, **k: SpyLogger())
    with pytest.raises(RuntimeError, match="model exploded"):
        run.run_with_logger(OmegaConf.create({"logger": {}}))
    assert finished == [True]


def test_each_example_logs_its_speed_and_acceptance(tmp_path, monkeypatch):
    """A real (tiny) cell's examples reach the tracker with tokens/s, block efficiency and acceptance
    from their own decoder stats, and W&B's offline run holds them per example."""
    from mtad.metrics.speed import aggregate_speed
    from mtad.records import read_records
    from mtad.runner.layout import SAMPLES

    logged = []

    class SpyLogger(NullLogger):
        def log_example(self, step, row):
            logged.append((step, row))

    plan = run_tiny_cell(tmp_path / "runs", "sps", SpyLogger())
    records = read_records(plan.cell.directory / SAMPLES)
    assert [step for step, _ in logged] == [0, 1] and len(records) == 2
    for (_, row), record in zip(logged, records):
        speed = aggregate_speed(t["stats"] for s in record["samples"] for t in s["turns"])
        assert row["block_efficiency"] == speed["block_efficiency"] and row["block_efficiency"] >= 1
        assert row["acceptance_rate"] == speed["acceptance_rate"] and 0 <= row["acceptance_rate"] <= 1
        assert row["tokens_per_s"] == pytest.approx(record["new_tokens"] / record["decode_seconds"])

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="mtad-test", name=plan.cell.name, dir=str(tmp_path / "wandb_dir"))
    for step, row in logged:
        logger.log_example(step, row)
    logger.finish()
    history, _ = logged_items(finished_records(next((tmp_path / "wandb_dir" / "wandb").glob("offline-run-*/*.wandb"))))
    for key in ("tokens_per_s", "block_efficiency", "acceptance_rate"):
        assert float(history[f"example/{key}"]) == pytest.approx(logged[-1][1][key])
