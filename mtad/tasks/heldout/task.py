"""The ``heldout`` task: held-out requests of every kind a draft is distilled on, and of the kinds it never saw.

The requests come from this folder's generators (``kinds.draw``, ``held=True``): for each kind,
``per_kind`` items drawn with held-out subjects (the 1-in-5 split by subject that training never
touches), kind by kind in ``kinds.ALL_KINDS`` order from one generator seeded by ``prompt_seed``,
listed in rounds (the first request of every kind, then the second, ...). Each
example names its ``kind`` and its ``group`` (``trained``: a kind the draft trained on, with
subjects it never saw; ``unseen``: a kind it never trained on), so a report of these cells can
group its figures by kind. There is no reference answer: the cells measure perplexity, speed and
acceptance only. A multi-turn request carries its earlier turns; the prompt keeps its last
``max_prompt_tokens`` ids, as the draft's training corpus encodes a request.
"""

from __future__ import annotations

import random

from mtad.tasks.base import Task


class HeldoutTask(Task):
    name = "heldout"
    label = "held-out requests of every kind"
    defaults = {"limit": None, "per_kind": 10, "max_new_tokens": 48, "prompt_seed": 1234, "max_prompt_tokens": 512}
    needs_data = False

    def load_examples(self) -> list[dict]:
        """``per_kind`` requests of each kind (ids ``<kind>-<i>``), drawn kind by kind, listed in rounds."""
        # imported here, not with the task registry: the generators read installed text on first use
        from .kinds import ALL_KINDS, UNSEEN_KINDS, draw
        from .requests import messages

        rng = random.Random(int(self.options["prompt_seed"]))
        per_kind = int(self.options["per_kind"])
        drawn = {kind: [draw(kind, rng, held=True) for _ in range(per_kind)] for kind in ALL_KINDS}
        return [  # request i of every kind, then i + 1: a limit keeps every kind's share
            {
                "id": f"{kind}-{i:03d}",
                "kind": kind,
                "group": "unseen" if kind in UNSEEN_KINDS else "trained",
                "messages": messages(items[i]),
            }
            for i in range(per_kind)
            for kind, items in drawn.items()
        ]

    def more_examples_hint(self) -> str:
        return f"{self.options['per_kind']} requests of each kind; raise task.per_kind for more"

    def chat_messages(self, example, history, tokenizer):
        return list(example["messages"])

    def plain_prompt(self, example, history, tokenizer):
        return "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in example["messages"]) + "\nAssistant:"

    def build_prompt(self, example, tokenizer, history=()) -> list[int]:
        return super().build_prompt(example, tokenizer, history)[-int(self.options["max_prompt_tokens"]) :]

    def score(self, example, completions):
        return {}  # no reference answer: perplexity and speed only

    def aggregate(self, example_scores, example_ids):
        return {"examples": len(example_scores)}
