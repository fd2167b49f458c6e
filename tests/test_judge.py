"""The MT-Bench judge: rating parser, FastChat prompts, local HF and OpenAI-compatible judges."""

import time

import pytest
import torch
from judge_stub import Endpoint as _Endpoint  # noqa: F401  (a fixture)
from judge_stub import endpoint  # noqa: F401  (a fixture)
from transformers import LlamaConfig, LlamaForCausalLM

from mtad.tasks.mtbench import load_bench
from mtad.tasks.mtbench.judge import (
    HFJudge,
    NoJudge,
    OpenAIJudge,
    get_judge,
    judge_config,
    judge_messages,
    parse_rating,
)


@pytest.mark.parametrize(
    "text, rating",
    [
        ("The answer is fine.\nRating: [[7]]", 7.0),
        ("Rating: [[ 8.5 ]]", 8.5),
        ("Rating: [[9/10]]", 9.0),
        ('Format: "Rating: [[5]]". My verdict: [[2]]', 2.0),  # the echoed example does not win
        ("Rating: [6]", 6.0),  # FastChat's single-bracket fallback
        ("[[10]]", 10.0),
        ("Rating: [[rating]]", None),
        ("Rating: [[11]]", None),
        ("Rating: [[0]]", None),
        ("Rating: 7/10", None),
        ("", None),
        (None, None),
        ("[[3]] then [[15]]", 3.0),
    ],
)
def test_parse_rating(text, rating):
    assert parse_rating(text) == rating


@pytest.fixture(scope="module")
def bench(wheel_data):
    data = load_bench(wheel_data)
    examples = {
        q["question_id"]: {
            "id": str(q["question_id"]),
            "category": q["category"],
            "turns": q["turns"],
            "reference": data["references"].get(q["question_id"]),
        }
        for q in data["questions"]
    }
    return data["judge_prompts"], examples


def test_fastchat_prompts_are_chosen_by_category_and_turn(bench):
    prompts, examples = bench
    writing = next(e for e in examples.values() if e["category"] == "writing")
    math = next(e for e in examples.values() if e["category"] == "math")
    one = judge_messages(prompts, writing, ["ANSWER-1", "ANSWER-2"], 1)
    assert one[0]["content"] == prompts["single-v1"]["system_prompt"]
    assert writing["turns"][0] in one[1]["content"] and "ANSWER-1" in one[1]["content"]
    assert "ANSWER-2" not in one[1]["content"]
    two = judge_messages(prompts, math, ["ANSWER-1", "ANSWER-2"], 2)
    assert two[0]["content"] == prompts["single-math-v1-multi-turn"]["system_prompt"]
    assert math["reference"][1] in two[1]["content"] and "ANSWER-2" in two[1]["content"]


def test_no_judge_never_guesses(bench):
    prompts, examples = bench
    verdict = get_judge({"kind": "none"}).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "no judge" in verdict.error
    assert isinstance(get_judge(None), NoJudge)


def test_local_hf_judge_runs_a_real_model(bench, chat_tokenizer):
    prompts, examples = bench
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(chat_tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=4096,
    )
    model = LlamaForCausalLM(config).eval()
    judge = get_judge({"kind": "hf", "max_new_tokens": 6}, model=model, tokenizer=chat_tokenizer)
    assert isinstance(judge, HFJudge)
    prompt = judge.prompt_ids(judge_messages(prompts, examples[81], ["short answer", "b"], 1))
    assert chat_tokenizer.decode(prompt).startswith("<|im_start|>system\n")
    verdict = judge.grade(prompts, examples[81], ["short answer", "b"], 1)
    assert verdict.error is None or "no [[rating]]" in verdict.error  # random weights: text, maybe no rating
    assert verdict.score is None or 1 <= verdict.score <= 10


def test_hf_judge_target_needs_the_model():
    with pytest.raises(ValueError, match="target"):
        get_judge({"kind": "hf", "model": "target"})


def openai_judge(endpoint, **options):
    return get_judge(
        {
            "kind": "openai",
            "base_url": endpoint,
            "model": "judge-model",
            "api_key_env": None,
            "backoff_s": 0.0,
            **options,
        }
    )


def test_openai_compatible_judge_sends_the_key_as_a_bearer_token(bench, endpoint, monkeypatch):
    prompts, examples = bench
    monkeypatch.setenv("MTAD_TEST_JUDGE_KEY", "sk-test")
    judge = openai_judge(endpoint, api_key_env="MTAD_TEST_JUDGE_KEY", retries=2)
    assert isinstance(judge, OpenAIJudge)
    _Endpoint.replies = [("status", 500), ("rating", "Solid. Rating: [[6]]")]  # one retry after a server error
    verdict = judge.grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score == 6.0 and verdict.error is None
    assert len(_Endpoint.requests) == 2
    path, auth, body = _Endpoint.requests[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["messages"][0]["role"] == "system"


def test_client_error_status_is_the_recorded_cause_and_not_retried(bench, endpoint):
    prompts, examples = bench
    _Endpoint.replies = [("status", 401), ("rating", "[[9]]")]
    verdict = openai_judge(endpoint, retries=3).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "HTTP 401" in verdict.error and "stub status 401" in verdict.error
    assert len(_Endpoint.requests) == 1


def test_server_errors_are_retried_then_reported(bench, endpoint, caplog):
    prompts, examples = bench
    _Endpoint.replies = [("status", 503)] * 3
    with caplog.at_level("WARNING", logger="mtad.judge"):
        verdict = openai_judge(endpoint, retries=3, backoff_s=0.01).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "HTTP 503" in verdict.error and "3 attempts" in verdict.error
    assert len(_Endpoint.requests) == 3
    retries = [r.message for r in caplog.records if "retrying" in r.message]  # one line per retry
    assert len(retries) == 2 and "attempt 1 of 3 failed" in retries[0] and "attempt 2 of 3" in retries[1]


def test_default_judge_settings_give_up_on_a_dead_endpoint_within_a_minute():
    from mtad.tasks.mtbench.judge import DEFAULTS

    worst = DEFAULTS["retries"] * DEFAULTS["timeout_s"] + sum(
        DEFAULTS["backoff_s"] * 2**i for i in range(DEFAULTS["retries"] - 1)
    )
    assert worst <= 60


def test_garbage_reply_is_reported_unparsable(bench, endpoint):
    prompts, examples = bench
    _Endpoint.replies = [("garbage", "<html>proxy error</html>")]
    verdict = openai_judge(endpoint, retries=1).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "unparsable reply" in verdict.error and "proxy error" in verdict.error


def test_reply_without_a_rating_is_a_failed_rating(bench, endpoint):
    prompts, examples = bench
    _Endpoint.replies = [("rating", "I would rather not rate this.")]
    verdict = openai_judge(endpoint, retries=1).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "no [[rating]]" in verdict.error and verdict.raw.startswith("I would")


def test_a_hanging_server_times_out_and_the_timeout_is_retried(bench, endpoint):
    prompts, examples = bench
    _Endpoint.replies = [("hang", 20), ("rating", "Rating: [[4]]")]
    start = time.monotonic()
    verdict = openai_judge(endpoint, timeout_s=0.5, retries=2).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score == 4.0 and len(_Endpoint.requests) == 2  # the timeout was retried
    assert time.monotonic() - start < 5
    _Endpoint.replies = [("hang", 20), ("hang", 20)]
    start = time.monotonic()
    verdict = openai_judge(endpoint, timeout_s=0.5, retries=2).grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "timed out" in verdict.error and "2 attempts" in verdict.error
    assert time.monotonic() - start < 5


def test_a_trickling_server_cannot_hold_the_request_past_its_deadline(bench, endpoint):
    prompts, examples = bench
    _Endpoint.replies = [("trickle", 20)]
    start = time.monotonic()
    verdict = openai_judge(endpoint, timeout_s=1.0, retries=1).grade(prompts, examples[81], ["a", "b"], 1)
    elapsed = time.monotonic() - start
    assert verdict.score is None and "timed out" in verdict.error
    assert elapsed < 3, f"the request ran {elapsed:.1f} s with a 1 s deadline"


def test_unreachable_host_names_the_dns_failure(bench):
    prompts, examples = bench
    judge = openai_judge("http://judge.invalid/v1", retries=1, timeout_s=5)
    verdict = judge.grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "judge.invalid" in verdict.error and "connect" in verdict.error.lower()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"base_url": None}, "judge.base_url"),
        ({"model": None}, "judge.model"),
        ({"base_url": "ftp://host/v1"}, "http"),
        ({"api_key_env": "MTAD_TEST_UNSET_KEY"}, "MTAD_TEST_UNSET_KEY"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"retries": 0}, "retries"),
    ],
)
def test_openai_judge_configuration_errors_are_caught_up_front(options, message, monkeypatch):
    monkeypatch.delenv("MTAD_TEST_UNSET_KEY", raising=False)
    cfg = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": None, **options}
    with pytest.raises(ValueError, match=message):
        judge_config(cfg)
    with pytest.raises(ValueError, match=message):
        get_judge(cfg)


def test_hf_judge_needs_a_model_up_front():
    with pytest.raises(ValueError, match="judge.model"):
        judge_config({"kind": "hf"}, require_model=True)


@pytest.mark.slow
def test_embedded_target_as_judge(bench):
    """The embedded pair's target grades a real MT-Bench answer end to end (a 135M judge may not
    produce a valid [[rating]]; then the score is missing, never invented)."""
    from mtad.models.pairs import load_target_and_tokenizer, pair_config

    prompts, examples = bench
    target, tokenizer = load_target_and_tokenizer(pair_config("smollm2_135m"), device="cpu")
    judge = get_judge({"kind": "hf", "model": "target", "max_new_tokens": 48}, model=target, tokenizer=tokenizer)
    question = examples[81]
    verdict = judge.grade(prompts, question, ["Hawaii was wonderful: beaches, luaus and volcanoes.", "A."], 1)
    assert verdict.raw.strip(), "the judge produced no text"
    assert verdict.score == parse_rating(verdict.raw)
    assert verdict.score is None or 1 <= verdict.score <= 10
