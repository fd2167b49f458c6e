"""MT-Bench single-answer grading (1-10) with the FastChat judge prompts and a pluggable judge.

Kinds: ``none`` (no judge: the score is reported missing, never guessed), ``hf`` (a local
Hugging Face causal LM and tokenizer, e.g. a pair's target) and ``openai`` (any
OpenAI-compatible chat-completions endpoint; base URL, model, API key from an env var, sent
as a bearer token).

A judge that cannot rate an answer (HTTP error, DNS failure, timeout, unparsable reply, no
``[[rating]]`` in its text) returns a ``Verdict`` without a score and with the cause in
``error``; the task records it and the runner marks the cell incomplete and re-judges on
the next run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

JUDGE_KINDS = ("none", "hf", "openai")
NEED_REFERENCE = ("math", "reasoning", "coding")  # FastChat's NEED_REF_CATS for MT-Bench
# kind: none (score reported missing) | hf (a local model: judge.model = a local path, a hub id, or
#   "target", the pair's target) | openai (an HTTP endpoint: base_url, e.g. http://localhost:8000/v1,
#   and model, the served model name); api_key_env: the variable holding the key (sent as a bearer
#   token; must be set; null for an endpoint that needs no key); timeout_s: the deadline for one
#   whole request (a slow or trickling reply is cut off); retries: attempts per request (timeouts,
#   connection errors, 429 and 5xx are retried), waiting backoff_s * 2**attempt between them. The
#   defaults give up on a dead or hung endpoint within a minute (2 x 25 s + 1 s); a slow judge
#   model may need a longer timeout_s. How the judge is reached is not part of a cell's identity.
DEFAULTS = {
    "kind": "none",
    "model": None,
    "base_url": None,
    "api_key_env": "OPENAI_API_KEY",
    "max_new_tokens": 512,
    "temperature": 0.0,
    "timeout_s": 25.0,
    "retries": 2,
    "backoff_s": 1.0,
}

log = logging.getLogger("mtad.judge")

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
        fields = {
            "question_1": questions[0],
            "question_2": questions[1],
            "answer_1": answers[0],
            "answer_2": answers[1],
        }
        if reference:
            fields.update(ref_answer_1=reference[0], ref_answer_2=reference[1])
    return [
        {"role": "system", "content": prompt["system_prompt"]},
        {"role": "user", "content": prompt["prompt_template"].format(**fields)},
    ]


class Judge(ABC):
    kind: str = "abstract"

    @abstractmethod
    def complete(self, messages: list[dict]) -> str:
        """The judge model's reply to a system + user conversation."""

    def grade(self, prompts: Mapping[str, dict], example: dict, answers: list[str], turn: int) -> Verdict:
        try:
            raw = self.complete(judge_messages(prompts, example, answers, turn))
        except JudgeCallError as exc:  # a failed call is a missing score with its cause, not a crash
            return Verdict(None, "", str(exc))
        except Exception as exc:
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

    def __init__(
        self,
        model=None,
        tokenizer=None,
        max_new_tokens: int = 512,
        generate_fn: Callable[[list[dict]], str] | None = None,
    ):
        if generate_fn is None and (model is None or tokenizer is None):
            raise ValueError(
                "the hf judge needs a model and its tokenizer (judge.model: a local path or "
                "hub id, or pass model=/tokenizer= objects, e.g. a pair's target)"
            )
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
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


class JudgeCallError(RuntimeError):
    """The judge endpoint gave no usable reply; the message is the cause (status, DNS, timeout, ...)."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


class OpenAIJudge(Judge):
    """An OpenAI-compatible ``/chat/completions`` endpoint through httpx.

    ``timeout_s`` is a deadline for one whole request (connect, send, every byte of the
    reply): the call runs in a worker thread that the caller stops waiting for at the
    deadline, so a server that trickles bytes cannot hold the run. Timeouts, connection
    errors, 429 and 5xx are retried (``retries`` attempts in all, backoff ``backoff_s * 2**i``);
    other statuses and unparsable replies are not.
    """

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        timeout_s: float = DEFAULTS["timeout_s"],
        retries: int = DEFAULTS["retries"],
        backoff_s: float = DEFAULTS["backoff_s"],
    ):
        check_openai_settings(
            {
                "base_url": base_url,
                "model": model,
                "api_key_env": api_key_env,
                "timeout_s": timeout_s,
                "retries": retries,
            }
        )
        import httpx

        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key_env = model, api_key_env
        self.max_new_tokens, self.temperature = int(max_new_tokens), float(temperature)
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        key = os.environ.get(api_key_env) if api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(headers=headers, timeout=httpx.Timeout(self.timeout_s), follow_redirects=False)

    def complete(self, messages):
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_new_tokens,
        }
        for attempt in range(self.retries):
            try:
                return self._call_with_deadline(body)
            except JudgeCallError as exc:
                if not exc.retryable:
                    raise
                if attempt == self.retries - 1:
                    raise JudgeCallError(f"{exc} (after {self.retries} attempts)", retryable=True) from exc
                wait = self.backoff_s * 2**attempt
                log.warning(
                    "judge %s: attempt %d of %d failed (%s); retrying in %g s",
                    self.url,
                    attempt + 1,
                    self.retries,
                    exc,
                    wait,
                )
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _call_with_deadline(self, body: dict) -> str:
        """One attempt, abandoned at ``timeout_s`` whatever the server does."""
        outcome: dict = {}
        finished = threading.Event()
        deadline = time.monotonic() + self.timeout_s

        def call():
            try:
                outcome["reply"] = self._post(body, deadline)
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc
            finally:
                finished.set()

        threading.Thread(target=call, name="mtad-judge-request", daemon=True).start()
        if not finished.wait(self.timeout_s):
            raise JudgeCallError(
                f"judge endpoint {self.url} timed out: no complete reply within {self.timeout_s:g} s (judge.timeout_s)",
                retryable=True,
            )
        if "error" in outcome:
            raise outcome["error"]
        return outcome["reply"]

    def _post(self, body: dict, deadline: float) -> str:
        import httpx

        try:
            with self.client.stream("POST", self.url, json=body) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:  # the waiting thread has given up: stop reading
                        raise JudgeCallError(f"judge endpoint {self.url} timed out", retryable=True)
                content = b"".join(chunks)
        except httpx.TimeoutException as exc:
            raise JudgeCallError(f"judge endpoint {self.url} timed out ({type(exc).__name__})", retryable=True) from exc
        except httpx.TransportError as exc:  # DNS failure, refused connection, reset, ...
            raise JudgeCallError(
                f"could not connect to the judge endpoint {self.url}: {type(exc).__name__}: {exc}", retryable=True
            ) from exc
        text = content.decode("utf-8", errors="replace")
        if response.status_code != 200:
            retryable = response.status_code == 429 or response.status_code >= 500
            raise JudgeCallError(
                f"judge endpoint {self.url} answered HTTP {response.status_code}: {_snippet(text)}", retryable=retryable
            )
        try:
            reply = json.loads(text)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeCallError(
                f"unparsable reply from the judge endpoint {self.url} (expected a chat completion): {_snippet(text)}",
                retryable=False,
            ) from exc
        return reply or ""


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def check_openai_settings(cfg: Mapping[str, Any]) -> None:
    """Configuration errors of the openai judge, caught before any generation."""
    base_url, model = cfg.get("base_url"), cfg.get("model")
    if not base_url or not model:
        raise ValueError(
            "the openai judge needs judge.base_url (e.g. https://api.openai.com/v1) and judge.model "
            f"(got base_url={base_url!r}, model={model!r})"
        )
    if not re.match(r"^https?://[^/\s]+", str(base_url)):
        raise ValueError(f"judge.base_url must be an http:// or https:// URL, got {base_url!r}")
    key_env = cfg.get("api_key_env")
    if key_env and not os.environ.get(key_env):
        raise ValueError(
            f"the openai judge reads its API key from the environment variable {key_env} "
            f"(judge.api_key_env), which is not set; export it, or set judge.api_key_env: null "
            "for an endpoint that needs no key"
        )
    if not float(cfg.get("timeout_s", 1)) > 0:
        raise ValueError(f"judge.timeout_s must be > 0 seconds, got {cfg.get('timeout_s')!r}")
    retries = cfg.get("retries", 1)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
        raise ValueError(f"judge.retries (attempts per request) must be an integer >= 1, got {retries!r}")


def judge_config(cfg: Mapping[str, Any] | None, require_model: bool = False) -> dict:
    """The judge settings with defaults filled in, checked: unknown keys, an unknown kind and the
    openai judge's missing URL/model/key are errors. ``require_model``: the ``hf`` kind must
    name its model (a path, hub id or ``target``); off where the caller passes the model itself."""
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown judge option(s) {unknown}; valid: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **cfg}
    if merged["kind"] not in JUDGE_KINDS:
        raise ValueError(f"unknown judge kind {merged['kind']!r}; valid: {', '.join(JUDGE_KINDS)}")
    if merged["kind"] == "openai":
        check_openai_settings(merged)
    if merged["kind"] == "hf" and require_model and not merged["model"]:
        raise ValueError("the hf judge needs judge.model: a local path, a hub id, or target (the pair's target)")
    return merged


def get_judge(
    cfg: Mapping[str, Any] | None = None,
    model=None,
    tokenizer=None,
    generate_fn: Callable[[list[dict]], str] | None = None,
) -> Judge:
    """Build the judge named by ``cfg['kind']``; ``model``/``tokenizer`` objects (e.g. a loaded pair's
    target) or ``generate_fn`` take precedence over ``cfg['model']`` for the ``hf`` kind."""
    cfg = judge_config(cfg)
    if cfg["kind"] == "none":
        return NoJudge()
    if cfg["kind"] == "hf":
        if model is None and generate_fn is None and cfg["model"] == "target":
            raise ValueError(
                "judge.model: target means the pair's target model; pass it as "
                "get_judge(cfg, model=target, tokenizer=tokenizer) (or task.set_judge)"
            )
        return HFJudge(model if model is not None else cfg["model"], tokenizer, cfg["max_new_tokens"], generate_fn)
    return OpenAIJudge(
        cfg["base_url"],
        cfg["model"],
        cfg["api_key_env"],
        cfg["max_new_tokens"],
        cfg["temperature"],
        cfg["timeout_s"],
        cfg["retries"],
        cfg["backoff_s"],
    )
