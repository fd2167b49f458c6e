"""Evaluation tasks: a registry of name -> Task class (``base.Task`` is the interface).

``spider`` (execution accuracy), ``cnndm`` (ROUGE-L), ``mtbench`` (judge score; ``mtbench.judge``),
``humaneval`` (pass@k in a sandbox), ``chat`` (held-out prompts, perplexity only; templates in
``prompts``), ``heldout`` (held-out requests of every kind a draft is measured on, perplexity only)."""

from __future__ import annotations

from mtad.tasks.base import Task
from mtad.tasks.chat import ChatTask
from mtad.tasks.cnndm import CnnDmTask
from mtad.tasks.heldout import HeldoutTask
from mtad.tasks.humaneval import HumanEvalTask
from mtad.tasks.mtbench import MTBenchTask
from mtad.tasks.spider import SpiderTask

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (SpiderTask, CnnDmTask, MTBenchTask, HumanEvalTask, ChatTask, HeldoutTask)
}


def list_tasks() -> list[str]:
    return list(TASKS)


def get_task(name: str, /, data_root=None, **options) -> Task:
    """The task ``name`` with ``options`` (the keys of conf/task/<name>.yaml; a ``name`` key
    among them must agree)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name](data_root=data_root, **options)


__all__ = ["TASKS", "Task", "get_task", "list_tasks"]
