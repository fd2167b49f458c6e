"""HumanEval: the task (``task.py``), its code sandbox (``sandbox.py`` + the child program
``sandbox_child.py``) and the unbiased pass@k estimator (``passk.py``)."""

from mtad.tasks.humaneval.passk import pass_at_k, pass_at_k_by_problem
from mtad.tasks.humaneval.sandbox import Limits, SandboxResult, run_many, run_python
from mtad.tasks.humaneval.task import HumanEvalTask, extract_completion, load_problems, program

__all__ = [
    "HumanEvalTask",
    "Limits",
    "SandboxResult",
    "extract_completion",
    "load_problems",
    "pass_at_k",
    "pass_at_k_by_problem",
    "program",
    "run_many",
    "run_python",
]
