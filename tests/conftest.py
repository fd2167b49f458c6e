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
