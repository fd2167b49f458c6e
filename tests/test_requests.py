"""The distillation requests (mtad.distill.requests): kinds, the held-out split by subject, scale, limits."""

from __future__ import annotations

import random

import pytest

from mtad.distill import requests as R
from mtad.distill.sources import Item
from mtad.split import held_out
from mtad.tasks.prompts import TOPICS

EXPECTED_KINDS = (
    "open_question",
    "explanation",
    "howto",
    "creative",
    "rewrite",
    "translation",
    "arithmetic",
    "passage_qa",
    "summary_short",
    "summary_long",
    "classify",
    "code",
    "sql",
    "multi_turn",
)
# openings of evaluation items that must never be drawn (HumanEval/0, MT-Bench/81, CNN/DailyMail's dateline)
EVALUATION_MARKERS = (
    "def has_close_elements",
    "Compose an engaging travel blog post about a recent trip to Hawaii",
    "(CNN)",
)


@pytest.fixture(scope="module")
def training_requests() -> list[R.Request]:
    """20,000 distinct training requests, the kinds in turn (the first call also scans the sources)."""
    return R.distinct_requests(20000, seed=0)


def test_kinds_are_the_documented_ones():
    assert R.KINDS == EXPECTED_KINDS
    assert len(R.KINDS) >= 12


def test_unknown_kind_names_the_valid_ones():
    with pytest.raises(ValueError) as err:
        R.draw_request("poetry_slam", random.Random(0))
    assert all(kind in str(err.value) for kind in R.KINDS)


@pytest.mark.parametrize("kind", EXPECTED_KINDS)
def test_train_and_held_out_subjects_are_disjoint(kind):
    rng = random.Random(1)
    train = {R.draw_with_key(kind, rng, held=False)[1] for _ in range(300)}
    held = {R.draw_with_key(kind, rng, held=True)[1] for _ in range(300)}
    assert train.isdisjoint(held)
    assert not any(held_out(k) for k in train) and all(held_out(k) for k in held)


def test_requests_are_items_of_their_kind(training_requests):
    for request in training_requests[: 20 * len(R.KINDS)]:
        assert isinstance(request, R.Request) and isinstance(request, Item)
        assert request.family in R.KINDS and request.answer is None


def test_no_training_request_mentions_a_held_out_topic(training_requests):
    held_topics = [t.lower() for t in TOPICS if held_out(t)]
    assert held_topics
    for request in training_requests:
        text = R.conversation_text(request).lower()
        assert not any(topic in text for topic in held_topics), (request.family, text[:200])


def test_no_evaluation_text(training_requests):
    for request in training_requests:
        text = R.conversation_text(request)
        assert not any(marker in text for marker in EVALUATION_MARKERS)


def test_twenty_thousand_distinct_requests_with_every_kind_well_covered(training_requests):
    assert len({(r.history, r.user) for r in training_requests}) >= 20000
    for kind in R.KINDS:
        distinct = {(r.history, r.user) for r in training_requests if r.family == kind}
        assert len(distinct) >= 500, kind
    assert len({r.user for r in training_requests}) >= 18000  # the follow-ups repeat; the rest do not


def test_pool_sizes_allow_the_scale():
    sizes = R.pool_sizes()
    assert set(sizes) == set(R.KINDS)
    assert all(subjects * templates >= 100 for subjects, templates in sizes.values())


def test_lengths_and_characters(training_requests):
    for request in training_requests:
        for _, content in request.history + (("user", request.user),):
            assert content.strip() and len(content) <= R.MAX_CHARS
            assert all(c.isprintable() or c in "\n\t" for c in content), content[:200]


def test_summary_lengths():
    rng = random.Random(2)
    for kind, pool, (lo, hi) in (
        ("summary_short", R.short_passages, (60, 150)),
        ("summary_long", R.long_passages, (250, 500)),
    ):
        texts = {p.text for p in R.split(pool, False)}
        assert texts and all(lo <= len(t.split()) <= hi for t in texts)
        request = R.draw_request(kind, rng)
        assert any(t in request.user for t in texts)


def test_draws_are_deterministic_given_the_rng():
    for kind in R.KINDS:
        a = [R.draw_request(kind, random.Random(7)) for _ in range(3)]
        b = [R.draw_request(kind, random.Random(7)) for _ in range(3)]
        assert a == b


def test_multi_turn_carries_the_earlier_exchange():
    rng = random.Random(3)
    for _ in range(50):
        request = R.draw_request("multi_turn", rng)
        msgs = R.messages(request)
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        assert msgs[-1]["content"] == request.user and all(m["content"] for m in msgs)
    single = R.draw_request("howto", rng)
    assert R.messages(single) == [{"role": "user", "content": single.user}]


def test_rewrites_and_passage_questions_quote_real_passages():
    rng = random.Random(4)
    passages = {p.text for p in R.brief_passages()} | {p.text for p in R.short_passages()}
    for kind in ("rewrite", "passage_qa"):
        for _ in range(30):
            user = R.draw_request(kind, rng).user
            if R.TYPO_FIX not in user:  # proof-reading requests carry typos put in the passage
                assert any(p in user for p in passages), user[:200]


def test_noun_phrases_come_from_the_passage():
    text = "The Chebyshev distance between two points is computed by the distance function of the spatial module."
    phrases = R.noun_phrases(text)
    assert "the spatial module" in phrases and all(p.split()[-1] in text for p in phrases)


def test_kinds_still_draw_when_a_source_is_missing(monkeypatch):
    """No gettext catalogues and no ISO code lists: translation, classification and the rest still draw."""
    monkeypatch.setattr(R, "catalogue_sentences", lambda: ())
    monkeypatch.setitem(R.SUBJECT_POOLS, "language", lambda: ())
    monkeypatch.setitem(R.SUBJECT_POOLS, "place", lambda: ())
    rng = random.Random(5)
    for kind in ("translation", "classify", "multi_turn", "open_question", "howto"):
        for held in (False, True):
            for _ in range(20):
                assert R.draw_request(kind, rng, held).user


def test_no_evaluation_prompt_of_the_chat_task_is_drawable_for_training(training_requests):
    """The chat task's evaluation prompts and every training request come from opposite sides of
    one split (`mtad.split`): none of the task's prompts is among the requests drawn for training."""
    from mtad.tasks.prompts import make_prompts

    evaluation = set(make_prompts(256, seed=0, held_out=True))
    assert len(evaluation) > 100
    assert not evaluation & {r.user for r in training_requests}
