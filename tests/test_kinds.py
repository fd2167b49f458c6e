"""The kinds of request the draft is distilled on: the task families and the varied requests, two
kinds never trained on, real-text items with real answers, and the held-out split kept."""

import random

import pytest

from mtad.tasks.heldout import kinds
from mtad.tasks.heldout.sources import FAMILIES


def test_the_catalogue_holds_the_task_families_and_keeps_the_unseen_kinds_out_of_training():
    assert set(FAMILIES) <= set(kinds.TRAINED_KINDS)
    assert len(kinds.TRAINED_KINDS) >= 10 and set(kinds.UNSEEN_KINDS).isdisjoint(kinds.TRAINED_KINDS)
    assert kinds.ALL_KINDS == kinds.TRAINED_KINDS + kinds.UNSEEN_KINDS
    assert set(kinds.REAL_TEXT_KINDS) <= set(kinds.TRAINED_KINDS)


def test_every_kind_draws_items_of_its_own_name_and_unknown_kinds_list_the_valid_ones():
    rng = random.Random(0)
    for kind in kinds.ALL_KINDS:
        item = kinds.draw(kind, rng)
        assert item.family in (kind, "chat") and item.user.strip()  # a family without a subject falls back to chat
    with pytest.raises(ValueError, match="valid: chat, summary"):
        kinds.draw("poetry", rng)


def test_real_prose_answers_a_request_with_an_installed_passage_on_its_own_side_of_the_split():
    from mtad.tasks.heldout.requests import short_passages, split

    rng = random.Random(1)
    train = {p.text for p in split(short_passages, False)}
    held = {p.text for p in split(short_passages, True)}
    items = [kinds.draw("explanation", rng, real=True) for _ in range(50)]
    assert all(it.family == "explanation" and it.answer in train for it in items)
    assert all(kinds.draw("explanation", rng, held=True, real=True).answer in held for _ in range(20))
