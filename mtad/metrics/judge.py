"""MT-Bench single-answer grading (1-10) with the FastChat judge prompts and a pluggable judge.

Kinds: ``none`` (no judge: the score is reported missing, never guessed), ``hf`` (a local
Hugging Face causal LM and tokenizer, e.g. a pair's target) and ``openai`` (any
OpenAI-compatible chat-completions endpoint; base URL, model, API key from an env var).
"""
from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

JUDGE_KINDS = ("none", "hf", "openai")
NEED_REFERENCE = ("math", "reasoning", "coding")  # FastChat's NEED_REF_CATS for MT-Bench
DEFAULTS = {"kind": "none", "model": None, "base_url": None, "api_key_env": "OPENAI_API_KEY",
            "max_new_tokens": 512, "temperature": 0.0, "timeout_s": 120.0, "retries": 3}

RATING_DOUBLE = re.compile(r"\[\[\s*(\d+(?:\.\d+)?)\s*(?:/\s*10\s*)?\]\]")  # [[7]], [[ 7.5 ]], [[7/10]]
RATING_SINGLE = re.compile(r"\[\s*(\d+(?:\.\d+)?)\s*(?:/\s*10\s*)?\]")  # FastChat's fallback: [7]


def parse_rating(text: str) -> float | None:
    """The judge's 1-10 rating from ``[[N]]`` (FastChat's format), else ``[N]``; the last match
    in range wins (a judge that echoes the format example "Rating: [[5]]" first still gets its
    own verdict); None when there is no valid rating."""
    if not isinstance(text, str):
        return None
    for pattern in (RATING_DOUBLE, RATING_SINGLE):
        values = [float(m) for m in pattern.findall(text)]
        values = [v for v in values if 1.0 <= v <= 10.0]
        if values:
            return values[-1]
    return None


@dataclass
class Verdict:
    score: float | None  # None: no judge, or its output had no valid rating
    raw: str = ""
    error: str | None = None


def judge_messages(prompts: Mapping[str, dict], example: dict, answers: list[str], turn: int) -> list[dict]:
    """FastChat's single-answer grading conversation for ``turn`` (1 or 2) of an MT-Bench question.

    ``example`` has ``turns`` (questions), ``category`` and ``reference`` (GPT-4 answers or None).
    """
    reference = example.get("reference") if example.get("category") in NEED_REFERENCE else None
    name = ("single-math-v1" if reference else "single-v1") + ("-multi-turn" if turn == 2 else "")
    prompt = prompts[name]
    questions = example["turns"]
    if turn == 1:
        fields = {"question": questions[0], "answer": answers[0]}
        if reference:
            fields["ref_answer_1"] = reference[0]
    else:
        fields = {"question_1": questions[0], "question_2": questions[1],
                  "answer_1": answers[0], "answer_2": answers[1]}
        if reference:
            fields.update(ref_answer_1=reference[0], ref_answer_2=reference[1])
    return [{"role": "system", "content": prompt["system_prompt"]},
            {"role": "user", "content": prompt["prompt_template"].format(**fields)}]


class Judge(ABC):
    kind: str = "abstract"

    @abstractmethod
    def complete(self, messages: list[dict]) -> str:
        """The judge model's reply to a system + user conversation."""

    def grade(self, prompts: Mapping[str, dict], example: dict, answers: list[str], turn: int) -> Verdict:
        try:
            raw = self.complete(judge_messages(prompts, example, answers, turn))
        except Exception as exc:  # a failed call is a missing score, not a crash of the run
            return Verdict(None, "", f"{type(exc).__name__}: {exc}")
        score = parse_rating(raw)
        return Verdict(score, raw, None if score is not None else "no [[rating]] in the judge output")


class NoJudge(Judge):
    kind = "none"
    reason = "no judge configured (task.judge.kind: none); set kind hf or openai to grade MT-Bench"

    def complete(self, messages):
        raise RuntimeError(self.reason)

    def grade(self, prompts, example, answers, turn):
        return Verdict(None, "", self.reason)


class HFJudge(Judge):
    """A local causal LM, greedy. ``generate_fn(messages) -> str`` replaces the model (tests)."""

    kind = "hf"

    def __init__(self, model=None, tokenizer=None, max_new_tokens: int = 512,
                 generate_fn: Callable[[list[dict]], str] | None = None):
        if generate_fn is None and (model is None or tokenizer is None):
            raise ValueError("the hf judge needs a model and its tokenizer (judge.model: a local path or "
                             "hub id, or pass model=/tokenizer= objects, e.g. a pair's target)")
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.generate_fn = generate_fn

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        text = "\n\n".join(m["content"] for m in messages) + "\n\nEvaluation:"
        return list(self.tokenizer(text)["input_ids"])

    def complete(self, messages):
        if self.generate_fn is not None:
            return self.generate_fn(messages)
        import torch

        ids = torch.tensor([self.prompt_ids(messages)], device=self.model.device)  # [1, L]
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=self.max_new_tokens,
                                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


class OpenAIJudge(Judge):
    """An OpenAI-compatible ``/chat/completions`` endpoint through urllib."""

    kind = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", max_new_tokens: int = 512,
                 temperature: float = 0.0, timeout_s: float = 120.0, retries: int = 3):
        if not base_url or not model:
            raise ValueError("the openai judge needs judge.base_url (e.g. https://api.openai.com/v1) and judge.model")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key_env = model, api_key_env
        self.max_new_tokens, self.temperature = int(max_new_tokens), float(temperature)
        self.timeout_s, self.retries = float(timeout_s), max(1, int(retries))

    def complete(self, messages):
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature,
                           "max_tokens": self.max_new_tokens}).encode()
        for attempt in range(self.retries):
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read().decode("utf-8"))
                return payload["choices"][0]["message"]["content"] or ""
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429 or attempt == self.retries - 1:
                    raise RuntimeError(f"judge endpoint {self.url} answered HTTP {exc.code}") from exc
            except urllib.error.URLError:
                if attempt == self.retries - 1:
                    raise
            time.sleep(2 ** attempt)  # back off before retrying 429/5xx/connection errors
        raise RuntimeError("unreachable")


def judge_config(cfg: Mapping[str, Any] | None) -> dict:
    """The judge settings with defaults filled in; unknown keys are an error."""
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown judge option(s) {unknown}; valid: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **cfg}
    if merged["kind"] not in JUDGE_KINDS:
        raise ValueError(f"unknown judge kind {merged['kind']!r}; valid: {', '.join(JUDGE_KINDS)}")
    return merged


def get_judge(cfg: Mapping[str, Any] | None = None, model=None, tokenizer=None,
              generate_fn: Callable[[list[dict]], str] | None = None) -> Judge:
    """Build the judge named by ``cfg['kind']``; ``model``/``tokenizer`` objects (e.g. a loaded pair's
    target) or ``generate_fn`` take precedence over ``cfg['model']`` for the ``hf`` kind."""
    cfg = judge_config(cfg)
    if cfg["kind"] == "none":
        return NoJudge()
    if cfg["kind"] == "hf":
        if model is None and generate_fn is None and cfg["model"] == "target":
            raise ValueError("judge.model: target means the pair's target model; pass it as "
                             "get_judge(cfg, model=target, tokenizer=tokenizer) (or task.set_judge)")
        return HFJudge(model if model is not None else cfg["model"], tokenizer, cfg["max_new_tokens"], generate_fn)
    return OpenAIJudge(cfg["base_url"], cfg["model"], cfg["api_key_env"], cfg["max_new_tokens"],
                       cfg["temperature"], cfg["timeout_s"], cfg["retries"])
