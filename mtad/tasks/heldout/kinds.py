"""The kinds of request a draft is distilled on and measured with.

- the task families (`sources.FAMILIES`: chat, summary, sql, code), in the tasks' own prompt
  formats, and the kinds of `requests.KINDS` (open questions, how-to, creative writing,
  translation, arithmetic, passage questions, summaries of several lengths, multi-turn
  follow-ups, ...); where a kind has both (code, SQL), half its items come from each;
- `UNSEEN_KINDS` are never trained on: measured beside the trained kinds, they show how the
  draft does on requests of a kind it never saw.
Held-out subjects of every kind come from the same 1-in-5 split by subject (`mtad.split.held_out`).
"""

from __future__ import annotations

import random

from .requests import KINDS, draw_request, noun_phrases, short_passages, split
from .sources import FAMILIES, Item, draw_item

UNSEEN_KINDS = ("rewrite", "classify")
TRAINED_KINDS = FAMILIES + tuple(k for k in KINDS if k not in FAMILIES and k not in UNSEEN_KINDS)
ALL_KINDS = TRAINED_KINDS + UNSEEN_KINDS
# kinds with real answers to score teacher-forced, by share of the real-text items: standard-library
# functions, installed prose as the answer to a request for it, and the few real SQL pairs
REAL_TEXT_KINDS = {"code": 0.45, "explanation": 0.45, "sql": 0.1}


def draw(kind: str, rng: random.Random, held: bool = False, real: bool = False) -> Item:
    """One item of `kind`; `real` asks for an item with a real answer (only `REAL_TEXT_KINDS`)."""
    if kind not in ALL_KINDS:
        raise ValueError(f"unknown kind of request {kind!r}; valid: {', '.join(ALL_KINDS)}")
    if real and kind == "explanation":
        return real_prose(rng, held)
    if kind in FAMILIES and (real or kind not in KINDS or rng.random() < 0.5):
        return draw_item(kind, rng, held=held, real=real)
    return draw_request(kind, rng, held=held)


def real_prose(rng: random.Random, held: bool) -> Item:
    """A request for a text about a passage's subject, answered by the passage itself (prose installed
    with Python and the system's packages): the target's distribution over real text, teacher-forced."""
    passage = rng.choice(split(short_passages, held))
    phrases = noun_phrases(passage.text)
    subject = phrases[0] if phrases else passage.source
    ask = rng.choice(["Write a few paragraphs about {}.", "Explain {} in a short text.", "Tell me about {}."])
    return Item("explanation", ask.format(subject), passage.text)
