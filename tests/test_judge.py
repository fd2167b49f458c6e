"""The MT-Bench judge: rating parser, FastChat prompts, local HF and OpenAI-compatible judges."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mtad.data import load_mtbench
from mtad.metrics.judge import HFJudge, NoJudge, OpenAIJudge, get_judge, judge_messages, parse_rating


@pytest.mark.parametrize("text, rating", [
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
])
def test_parse_rating(text, rating):
    assert parse_rating(text) == rating


@pytest.fixture(scope="module")
def bench(wheel_data):
    data = load_mtbench(wheel_data)
    examples = {q["question_id"]: {"id": str(q["question_id"]), "category": q["category"], "turns": q["turns"],
                                   "reference": data["references"].get(q["question_id"])} for q in data["questions"]}
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
    config = LlamaConfig(vocab_size=len(chat_tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=32, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).eval()
    judge = get_judge({"kind": "hf", "max_new_tokens": 6}, model=model, tokenizer=chat_tokenizer)
    assert isinstance(judge, HFJudge)
    prompt = judge.prompt_ids(judge_messages(prompts, examples[81], ["short answer", "b"], 1))
    assert chat_tokenizer.decode(prompt).startswith("<|system|>")
    verdict = judge.grade(prompts, examples[81], ["short answer", "b"], 1)
    assert verdict.error is None or "no [[rating]]" in verdict.error  # random weights: text, maybe no rating
    assert verdict.score is None or 1 <= verdict.score <= 10


def test_hf_judge_target_needs_the_model():
    with pytest.raises(ValueError, match="target"):
        get_judge({"kind": "hf", "model": "target"})


class _Endpoint(BaseHTTPRequestHandler):
    replies: list = []
    requests: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, self.headers.get("Authorization"), body))
        status, content = type(self).replies.pop(0)
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Endpoint.replies, _Endpoint.requests = [], []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_compatible_judge(bench, endpoint, monkeypatch):
    prompts, examples = bench
    monkeypatch.setenv("MTAD_TEST_JUDGE_KEY", "sk-test")
    judge = get_judge({"kind": "openai", "base_url": endpoint, "model": "judge-model",
                       "api_key_env": "MTAD_TEST_JUDGE_KEY", "retries": 2})
    assert isinstance(judge, OpenAIJudge)
    _Endpoint.replies = [(500, "oops"), (200, "Solid. Rating: [[6]]")]  # one retry after a server error
    verdict = judge.grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score == 6.0
    path, auth, body = _Endpoint.requests[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["messages"][0]["role"] == "system"


def test_openai_judge_failure_is_a_missing_score(bench, endpoint):
    prompts, examples = bench
    judge = get_judge({"kind": "openai", "base_url": endpoint, "model": "m", "retries": 1})
    _Endpoint.replies = [(401, "unauthorised")]
    verdict = judge.grade(prompts, examples[81], ["a", "b"], 1)
    assert verdict.score is None and "401" in verdict.error


def test_openai_judge_needs_url_and_model():
    with pytest.raises(ValueError, match="base_url"):
        get_judge({"kind": "openai"})


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
