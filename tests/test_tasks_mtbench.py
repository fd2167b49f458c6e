"""MT-Bench: two turns on the real questions, the second conditioned on the first answer."""

import pytest

from mtad.tasks import get_task
from mtad.tasks.mtbench import get_judge


@pytest.fixture(scope="module")
def mtbench(wheel_data):
    return get_task("mtbench", data_root=wheel_data)


def test_questions(mtbench):
    examples = mtbench.examples()
    assert len(examples) == 80 and all(mtbench.num_turns(e) == 2 for e in examples)
    assert {e["category"] for e in examples} == {
        "writing",
        "roleplay",
        "reasoning",
        "math",
        "coding",
        "extraction",
        "stem",
        "humanities",
    }
    with_reference = {e["category"] for e in examples if e["reference"]}
    assert {"math", "reasoning", "coding"} <= with_reference


def test_second_turn_sees_the_first_answer(mtbench, chat_tokenizer, plain_tokenizer):
    example = mtbench.examples(limit=1)[0]
    first_answer = "Aloha! My trip began at the beach."
    for tokenizer in (chat_tokenizer, plain_tokenizer):
        turn1 = tokenizer.decode(mtbench.build_prompt(example, tokenizer), skip_special_tokens=True)
        turn2 = tokenizer.decode(
            mtbench.build_prompt(example, tokenizer, history=[first_answer]), skip_special_tokens=True
        )
        assert example["turns"][0] in turn1 and example["turns"][1] not in turn1
        assert turn2.index(example["turns"][0]) < turn2.index(first_answer) < turn2.index(example["turns"][1])
    with pytest.raises(ValueError, match="2 turn"):
        mtbench.build_prompt(example, chat_tokenizer, history=["a", "b"])


def test_plain_continuation_stops_at_the_next_user_turn(mtbench):
    example = mtbench.examples(limit=1)[0]
    assert mtbench.postprocess(example, "An answer.\n\n### User:\nmore") == "An answer."


def test_no_judge_reports_the_score_missing(mtbench):
    example = mtbench.examples(limit=1)[0]
    scores = mtbench.score(example, ["answer one", "answer two"])
    assert scores["judge_score"] is None and scores["judge_turn1"] is None and scores["judge_turn2"] is None
    metrics = mtbench.aggregate([scores], [example["id"]])
    assert metrics["judge_score"] is None and "no judge configured" in metrics["judge_missing_reason"]


def test_configured_judge_grades_both_turns(wheel_data):
    task = get_task("mtbench", data_root=wheel_data, judge={"kind": "hf", "model": "target"})
    seen = []

    def fake_judge(messages):
        seen.append(messages)
        return "Good answer. Rating: [[8]]" if len(seen) == 1 else "Weak follow-up. [[3]]"

    task.set_judge(get_judge({"kind": "hf"}, generate_fn=fake_judge))
    example = next(e for e in task.examples() if e["category"] == "math")
    scores = task.score(example, ["first", "second"])
    assert (scores["judge_turn1"], scores["judge_turn2"], scores["judge_score"]) == (8.0, 3.0, 5.5)
    assert "Reference Answer" in seen[0][1]["content"] and "second" in seen[1][1]["content"]
    metrics = task.aggregate([scores], [example["id"]])
    assert metrics["judge_score"] == 5.5 and metrics["judge_failures"] == 0 and metrics["judge"] == "hf"


def test_unparseable_judge_output_is_missing_not_guessed(wheel_data):
    task = get_task("mtbench", data_root=wheel_data)
    task.set_judge(get_judge({"kind": "hf"}, generate_fn=lambda messages: "I refuse to rate."))
    example = task.examples(limit=1)[0]
    scores = task.score(example, ["a", "b"])
    assert scores["judge_score"] is None and scores["judge_failed_turn1"] == 1
    metrics = task.aggregate([scores], [example["id"]])
    assert metrics["judge_score"] is None and metrics["judge_failures"] == 2


def test_bad_judge_settings_fail_fast(wheel_data):
    with pytest.raises(ValueError, match="valid: none, hf, openai"):
        get_task("mtbench", data_root=wheel_data, judge={"kind": "gpt5"})
    with pytest.raises(ValueError, match="unknown judge option"):
        get_task("mtbench", data_root=wheel_data, judge={"kind": "none", "temprature": 0})
