"""The heldout task: the requests the draft measurement decodes, every kind in equal share, each naming its kind."""

from __future__ import annotations

import random

import pytest

from mtad.tasks import get_task
from mtad.tasks.heldout.kinds import ALL_KINDS, UNSEEN_KINDS, draw
from mtad.tasks.heldout.requests import messages


def test_every_kind_comes_per_kind_times_in_rounds_and_names_its_group():
    examples = get_task("heldout", per_kind=2).examples()
    assert len(examples) == 2 * len(ALL_KINDS) and len({e["id"] for e in examples}) == len(examples)
    assert [e["kind"] for e in examples] == [*ALL_KINDS, *ALL_KINDS]  # request 0 of every kind, then request 1
    assert {e["kind"] for e in examples if e["group"] == "unseen"} == set(UNSEEN_KINDS)
    limited = get_task("heldout", per_kind=2, limit=len(ALL_KINDS)).examples()
    assert [e["kind"] for e in limited] == list(ALL_KINDS)  # a limit keeps every kind's share


def test_the_requests_are_the_held_out_draws_of_the_generators_kind_by_kind():
    rng = random.Random(7)
    drawn = {kind: [messages(draw(kind, rng, held=True)) for _ in range(2)] for kind in ALL_KINDS}
    examples = get_task("heldout", per_kind=2, prompt_seed=7).examples()
    assert all(e["messages"] == drawn[e["kind"]][int(e["id"].rsplit("-", 1)[1])] for e in examples)
    other = get_task("heldout", per_kind=2, prompt_seed=8).examples()
    assert [e["messages"] for e in other] != [e["messages"] for e in examples]


class CharTokenizer:
    """One id per character of the chat-template text: enough to see where a prompt is cut."""

    chat_template = "plain"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


def test_a_prompt_keeps_its_last_ids_up_to_max_prompt_tokens():
    task = get_task("heldout", per_kind=1, max_prompt_tokens=16)
    example = task.examples()[0]
    ids = task.build_prompt(example, CharTokenizer())
    assert len(ids) == 16 and "".join(map(chr, ids)).endswith("<assistant>")
    assert example["messages"][-1]["role"] == "user"


@pytest.mark.parametrize("option", ["per_kind", "max_prompt_tokens"])
def test_sizes_must_be_positive(option):
    with pytest.raises(ValueError, match=f"option {option} of task 'heldout' must be > 0"):
        get_task("heldout", **{option: 0})
