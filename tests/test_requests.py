"""The distillation requests (mtad.tasks.heldout.requests): kinds, the held-out split by subject, scale, limits."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from mtad.split import held_out
from mtad.tasks.heldout import request_data
from mtad.tasks.heldout import requests as R
from mtad.tasks.heldout.sources import Item
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


PACKAGE = Path(R.__file__).resolve().parents[2]
DATA = PACKAGE / "assets" / "requests"


def raw_table(path: str):
    """A data table ("file.key", "file.key.*") read straight from its JSON file, without the loader."""
    name, _, key = path.removesuffix(".*").partition(".")
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))[key]


# kinds whose builder takes the templates of the drawn subject's category
TEMPLATES_BY_CATEGORY = ("open_question", "howto")


def declared_sources(kind: R.Kind):
    yield from kind.subjects
    for term in kind.templates:
        yield from term


def test_the_request_data_loads_and_each_file_says_what_it_holds():
    names = request_data.data_files()
    assert {"open_question", "rewrite", "code", "phrasing", "subjects"} <= set(names)
    for name in names:
        raw = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
        assert isinstance(raw.pop("about", None), str), f"{name}.json has no 'about' note"
        tables = request_data.table(name)
        assert set(tables) == set(raw) and all(raw.values()), name  # every table holds something
        assert all(json.loads(json.dumps(tables[key])) == value for key, value in raw.items()), name
    assert isinstance(request_data.at("rewrite.instructions"), tuple)  # shared by every caller: read-only
    assert R.TYPO_FIX in request_data.at("rewrite.instructions")  # else no proof-reading request gets typos


def test_the_wheel_ships_the_request_data():
    import tomllib

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["mtad"]
    shipped = {path for pattern in patterns for path in PACKAGE.glob(pattern)}
    assert sorted(DATA.glob("*.json")) and set(DATA.glob("*.json")) <= shipped


@pytest.mark.parametrize("name", EXPECTED_KINDS)
def test_every_kind_declares_pools_that_exist_and_hold_entries(name):
    kind = R.REGISTRY[name]
    assert callable(kind.build) and kind.subjects and kind.templates
    for source in declared_sources(kind):
        if callable(source):  # a pool of keyed entries
            assert isinstance(source(), tuple) and all(hasattr(e, "key") for e in source()[:50]), source
        elif isinstance(source, str) and source.endswith(".weights"):
            weights = raw_table(source)
            assert weights and set(weights) <= set(R.SUBJECT_POOLS) and all(w > 0 for w in weights.values())
            if name in TEMPLATES_BY_CATEGORY:  # every category weighed has its templates
                assert set(weights) <= set(raw_table(f"{name}.templates")), source
        else:
            assert len(raw_table(source) if isinstance(source, str) else source) > 0, source
    for held in (False, True):
        assert R.pool_sizes(held)[name][0] > 0, (name, held)  # subjects on both sides of the split


def expected_size(source, held: bool) -> int:
    if callable(source):
        return len(R.split(source, held))
    if isinstance(source, str) and source.endswith(".weights"):
        return sum(len(R.split(R.SUBJECT_POOLS[category], held)) for category in raw_table(source))
    if isinstance(source, str) and source.endswith(".*"):
        return sum(len(entries) for entries in raw_table(source).values())
    return len(raw_table(source) if isinstance(source, str) else source)


@pytest.mark.parametrize("held", [False, True])
def test_pool_sizes_are_the_lengths_of_the_declared_pools(held):
    sizes = R.pool_sizes(held)
    for name, kind in R.REGISTRY.items():
        subjects = sum(expected_size(s, held) for s in kind.subjects)
        templates = sum(math.prod(expected_size(part, held) for part in term) for term in kind.templates)
        assert sizes[name] == (subjects, templates), name
    to_language, to_english = raw_table("translation.to_language"), raw_table("translation.to_english")
    assert sizes["translation"][1] == len(to_language) * len(raw_table("text_sources.languages")) + len(to_english)
    forms, constraints = raw_table("creative.forms"), raw_table("creative.constraints")
    assert sizes["creative"][1] == len(forms) * (1 + len(constraints))  # a form with no constraint, or with some


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


def test_the_installed_sources_fingerprint_follows_every_document_and_sentence(monkeypatch):
    from mtad.tasks.heldout import installed_text as T

    docs = (T.Document("a", "python", ("one.", "two.")),)
    sentences = (T.Sentence("k", "Hallo.", "German", "Hello."),)
    monkeypatch.setattr(T, "documents", lambda: docs)
    monkeypatch.setattr(T, "catalogue_sentences", lambda: sentences)
    first = T.fingerprint()
    assert first["documents"] == 1 and first["catalogue_sentences"] == 1 and len(first["sha256"]) == 64
    assert T.fingerprint() == first  # the same sources, the same digest
    monkeypatch.setattr(T, "documents", lambda: (T.Document("a", "python", ("one.", "two!")),))
    assert T.fingerprint()["sha256"] != first["sha256"]
    monkeypatch.setattr(T, "documents", lambda: docs)
    monkeypatch.setattr(T, "catalogue_sentences", lambda: (T.Sentence("k", "Hallo!", "German", "Hello."),))
    assert T.fingerprint()["sha256"] != first["sha256"]
