"""The held-out split, the one rule that keeps evaluation prompts out of training.

A subject (a topic, a table, a passage, a product: whatever a request is about) is held out when
its key hashes into one fifth of the space. The chat task's evaluation prompts (`tasks.prompts`)
draw only held-out subjects; the distillation corpus (`tasks.heldout.requests`, `tasks.heldout.sources`)
draws only the others, so no evaluation prompt can be drawn for training.
"""

from __future__ import annotations

import hashlib

HELD_OUT_SHARE = 5  # one subject in five


def held_out(key: str) -> bool:
    """Whether the subject `key` belongs to the held-out fifth (sha1, deterministic everywhere)."""
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % HELD_OUT_SHARE == 0
