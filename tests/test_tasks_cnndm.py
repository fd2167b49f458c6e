"""CNN/DailyMail: ROUGE on the real articles, truncation to the token budget, prompts."""

import pytest

from mtad.tasks import get_task
from mtad.tasks.cnndm import rouge


@pytest.fixture(scope="module")
def cnndm(tmp_path_factory):
    """The 80 articles mtad ships, read from the package by a data root that lacks them."""
    return get_task("cnndm", data_root=tmp_path_factory.mktemp("empty-data-root"))


def test_examples_are_real_articles(cnndm):
    examples = cnndm.examples()
    assert len(examples) == 80 and len({e["id"] for e in examples}) == 80
    assert all(len(e["article"]) > 200 and e["highlights"] for e in examples)
    assert [e["id"] for e in cnndm.examples(limit=5)] == [e["id"] for e in examples[:5]]  # file order


def test_reference_against_itself_scores_one(cnndm):
    for example in cnndm.examples(limit=10):
        scores = rouge(example["highlights"], example["highlights"])
        assert scores["rougeL"] == pytest.approx(1.0)
        assert scores["rouge1"] == pytest.approx(1.0) and scores["rouge2"] == pytest.approx(1.0)


def test_unrelated_summary_scores_low_and_stemming_is_on(cnndm):
    example = cnndm.examples(limit=1)[0]
    assert rouge("zebra quantum violin", example["highlights"])["rougeL"] == 0.0
    assert rouge("the cats were running", "the cat was run")["rouge1"] == pytest.approx(0.75)  # cats~cat, running~run


def test_long_articles_are_truncated_and_counted(cnndm, plain_tokenizer):
    task = get_task("cnndm", data_root=cnndm.data_root, article_token_budget=300)
    examples = task.examples(limit=6)
    lengths = [len(plain_tokenizer(e["article"], add_special_tokens=False)["input_ids"]) for e in examples]
    scores = []
    for example in examples:
        ids = task.build_prompt(example, plain_tokenizer)
        assert len(ids) <= 300 + 40  # the budget plus the fixed prompt words
        scores.append(task.score(example, [task.postprocess(example, "A summary.")]))
    assert [s["truncated"] for s in scores] == [int(n > 300) for n in lengths]
    assert [s["article_tokens"] for s in scores] == lengths
    metrics = task.aggregate(scores, [e["id"] for e in examples])
    assert metrics["truncated"] == sum(n > 300 for n in lengths) > 0
    assert metrics["truncation_unknown"] == 0 and metrics["examples"] == 6


def test_prompt_formats(cnndm, plain_tokenizer, chat_tokenizer):
    example = cnndm.examples(limit=1)[0]
    plain = plain_tokenizer.decode(cnndm.build_prompt(example, plain_tokenizer), skip_special_tokens=True)
    assert plain.startswith("Article:\n") and plain.endswith("Summary (a few sentences):\n")
    chat = chat_tokenizer.decode(cnndm.build_prompt(example, chat_tokenizer), skip_special_tokens=True)
    assert "Summarize" in chat and chat.endswith("\nassistant\n")


def test_postprocess_stops_at_a_new_article(cnndm):
    example = cnndm.examples(limit=1)[0]
    assert cnndm.postprocess(example, " The gist.\nArticle:\nAnother story") == "The gist."


def test_aggregate_means(cnndm):
    scores = [
        {"rouge1": 0.5, "rouge2": 0.2, "rougeL": 0.4, "truncated": 0},
        {"rouge1": 0.3, "rouge2": 0.0, "rougeL": 0.2, "truncated": 1},
    ]
    metrics = cnndm.aggregate(scores, ["a", "b"])
    assert metrics["rougeL"] == pytest.approx(0.3) and metrics["rouge1"] == pytest.approx(0.4)
    assert metrics["truncated"] == 1
