"""Held-out chat prompts: perplexity and speed on text that is no task's evaluation data.

The prompts come from ``mtad.tasks.prompts`` (templates x topics) restricted to the held-out
topics, which the draft never saw in training, and they are none of Spider, CNN/DailyMail,
MT-Bench or HumanEval. There is no reference answer, so there is no task score: the cells of
this task measure the output's perplexity under the target, speed and acceptance only. Short
prompts and many of them make these comparisons cheap per prompt (little prefill).
"""

from __future__ import annotations

import random

from mtad.tasks.base import Task
from mtad.tasks.prompts import make_prompt

PLAIN_USER, PLAIN_ASSISTANT = "User: ", "\nAssistant:"


class ChatTask(Task):
    name = "chat"
    label = "held-out chat"
    defaults = {"limit": 64, "max_new_tokens": 32, "prompt_seed": 0, "pool": 256, "samples_per_example": 1}
    needs_data = False

    def load_examples(self) -> list[dict]:
        """``pool`` distinct held-out prompts in a fixed order (a limit must not exceed ``pool``)."""
        rng = random.Random(int(self.options["prompt_seed"]))
        prompts: list[str] = []
        for _ in range(100 * int(self.options["pool"])):  # draws repeat; keep the first of each
            prompt = make_prompt(rng, held_out=True)
            if prompt not in prompts:
                prompts.append(prompt)
            if len(prompts) == int(self.options["pool"]):
                break
        return [{"id": f"chat-{i:04d}", "prompt": p} for i, p in enumerate(prompts)]

    def more_examples_hint(self) -> str:
        return f"a pool of {self.options['pool']} distinct held-out prompts; raise task.pool for more"

    def chat_messages(self, example, history, tokenizer):
        return [{"role": "user", "content": example["prompt"]}]

    def plain_prompt(self, example, history, tokenizer):
        return f"{PLAIN_USER}{example['prompt']}{PLAIN_ASSISTANT}"

    def score(self, example, completions):
        return {}  # no reference answer: perplexity and speed only

    def aggregate(self, example_scores, example_ids):
        return {"examples": len(example_scores)}
