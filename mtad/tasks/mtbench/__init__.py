"""MT-Bench: the task (``task.py``) and its judge (``judge.py``: FastChat's single-answer
grading prompts over a local model or an OpenAI-compatible endpoint)."""

from mtad.tasks.mtbench.judge import HFJudge, Judge, NoJudge, OpenAIJudge, Verdict, get_judge, judge_config
from mtad.tasks.mtbench.task import MTBenchTask, load_bench

__all__ = [
    "HFJudge",
    "Judge",
    "MTBenchTask",
    "NoJudge",
    "OpenAIJudge",
    "Verdict",
    "get_judge",
    "judge_config",
    "load_bench",
]
