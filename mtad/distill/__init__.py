"""Distilling a draft from its target (see `pipeline` for the two processes): a layer-subset
draft (`training`) or a feature head (`head_training`); then measuring it and writing its card.

The requests it trains on are drawn from `mtad.tasks.heldout` (the kinds of request and their
generators) on the training side of the split; the drafts are measured on the other side (the
`heldout` task).

- `sampler`: slot-refilled batched sampling over one preallocated KV cache;
- `corpus`: answering (real, target-sampled, draft-sampled) and length-bucketed scoring with the target;
- `roofline`: the machine's rates for both kinds of teacher work, logged beside the producer's;
- `objectives`: the losses (KL on raw or processed p, TV on processed p and q) and agreement stats;
- `training`: batches, one optimiser step, held-out evaluation per family;
- `head_training`: the same for a feature head, unrolled on its own predictions, and its A/B runs;
- `training_loop`: the one resumable trainer loop (`train(arm)`) both draft kinds plug into;
- `pipeline`: the producer process and the layer draft's arm of the loop;
- `draft_measurement`: the figures of a pair's drafts on held-out requests of every kind, read from the
  cells `mtad.experiments.drafts` runs (acceptance, block efficiency, cost, goals);
- `card`: the model card (one writer, a section table per draft kind) and the training curve; its
  sections from the training work dir in `card_training`, from the measurement in `card_measured`;
- `head_reports`: the feature head's design choices and calibration as Markdown tables.
"""

from .head_training import HeadTrainConfig, HeadTrainer
from .objectives import LOSSES, pair_stats
from .pipeline import DistillConfig, Trainer, produce

__all__ = ["LOSSES", "DistillConfig", "HeadTrainConfig", "HeadTrainer", "Trainer", "pair_stats", "produce"]
