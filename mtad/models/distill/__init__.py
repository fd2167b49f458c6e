"""Distilling a layer-subset draft from its target (see `pipeline` for the two processes).

- `sources`: the text of the four task families, in the tasks' prompt formats;
- `corpus`: answering (real, target-sampled, draft-sampled) and scoring with the target;
- `objectives`: the losses (KL on raw or processed p, TV on processed p and q) and agreement stats;
- `training`: batches, one optimiser step, held-out evaluation per family;
- `pipeline`: the producer and trainer loops (resumable, checkpointed).
"""
from .objectives import LOSSES, pair_stats
from .pipeline import DistillConfig, Trainer, produce

__all__ = ["LOSSES", "DistillConfig", "Trainer", "pair_stats", "produce"]
