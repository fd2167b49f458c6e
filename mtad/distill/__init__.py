"""Distilling a draft from its target (see `pipeline` for the two processes): a layer-subset
draft (`training`) or a feature head (`head_training`); then measuring it and writing its card.

- `sources`: the text of the four task families, in the tasks' prompt formats;
- `corpus`: answering (real, target-sampled, draft-sampled) and scoring with the target;
- `objectives`: the losses (KL on raw or processed p, TV on processed p and q) and agreement stats;
- `training`: batches, one optimiser step, held-out evaluation per family;
- `head_training`: the same for a feature head, unrolled on its own predictions;
- `pipeline`: the producer and trainer loops (resumable, checkpointed);
- `measure`: a pair's drafts on held-out prompts of every family (acceptance, block efficiency, cost);
- `card`: the model card and training curve of an exported draft.
"""

from .head_training import HeadTrainConfig, HeadTrainer
from .objectives import LOSSES, pair_stats
from .pipeline import DistillConfig, Trainer, produce

__all__ = ["LOSSES", "DistillConfig", "HeadTrainConfig", "HeadTrainer", "Trainer", "pair_stats", "produce"]
