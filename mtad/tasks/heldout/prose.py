"""Plain-text helpers the requests are built with: sentences, prose paragraphs, runs of whole sentences
under word and character limits, noun phrases; and the phrasing every kind shares: an article, a
capital, a question dressed with an opening and a closing, an instruction framed around a text (its
layouts in `phrasing.json`)."""

from __future__ import annotations

import random
import re
from functools import cache

from .request_data import at, table
from .sources import _is_prose

SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
MARKUP = re.compile(r"[`|{}\[\]<>\\=_*#@$^~]|\.\.|::| : |https?:|www\.")


@cache
def stop_words() -> frozenset[str]:
    """Function words, which end a noun phrase (`parsing.json`)."""
    return frozenset(table("parsing")["stop_words"])


def squash(text: str) -> str:
    return " ".join(text.split())


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_BREAK.split(text) if s]


def fit(text: str, max_words: int, max_chars: int) -> str:
    """The longest run of whole leading sentences of `text` within both limits ('' if none fits)."""
    out, words, chars = [], 0, 0
    for sentence in sentences(text):
        n = len(sentence.split())
        if words + n > max_words or chars + len(sentence) + 1 > max_chars:
            break
        out.append(sentence)
        words, chars = words + n, chars + len(sentence) + 1
    return " ".join(out)


def usable_paragraph(para: str, min_words: int = 20) -> bool:
    """Plain English sentences: prose by `sources._is_prose`, no markup, not shouted, long enough."""
    if len(para.split()) < min_words or not para[:1].isupper() or MARKUP.search(para) or not para.isprintable():
        return False  # the cheap tests first
    letters = [c for c in para if c.isalpha()]
    return _is_prose(para) and sum(c.isupper() for c in letters) <= 0.15 * max(len(letters), 1)


def paragraphs(text: str, min_words: int = 20, max_words: int = 150) -> list[str]:
    """The prose paragraphs of a text, long ones cut into runs of whole sentences of at most max_words."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block.strip() or block.lstrip().startswith(("*", "-", "+", "o ", "#", ">>>", "|", "..")):
            continue
        if block.startswith("    ") and not block.startswith("     "):  # indented code blocks
            continue
        para = squash(block)
        if not usable_paragraph(para, min_words):
            continue
        while para:
            piece = fit(para, max_words, 10 * max_words) or " ".join(para.split()[:max_words])
            if len(piece.split()) >= min_words:
                out.append(piece)
            para = para[len(piece) :].strip()
    return out


_NOUN_PHRASE = re.compile(r"\b[Tt]he ((?:[a-z][a-z-]{2,} ){0,2}[a-z][a-z-]{2,})")
_NAME_PHRASE = re.compile(r"(?<=[a-z,] )((?:[A-Z][a-z]+ ){1,3}[A-Z][a-z]+)\b")


def noun_phrases(text: str) -> list[str]:
    """Noun phrases of a passage, in order: "the X Y" up to the first function word, and capitalised names."""
    found, stops = [], stop_words()
    for match in _NOUN_PHRASE.finditer(text):
        words = []
        for word in match.group(1).split():
            if word in stops:
                break
            words.append(word)
        if words and len(words[-1]) >= 4:
            found.append("the " + " ".join(words))
    found += [m.group(1) for m in _NAME_PHRASE.finditer(text)]
    return list(dict.fromkeys(found))


def article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def dress(rng: random.Random, question: str, prefixes: tuple[str, ...], suffixes: tuple[str, ...]) -> str:
    """A question with an opening and a closing drawn for variety (openings ending in ', ' lower its first word)."""
    prefix, suffix = rng.choice(prefixes), rng.choice(suffixes)
    if prefix.endswith(", ") and not question.split(" ", 1)[0].isupper():
        question = question[:1].lower() + question[1:]
    return f"{prefix}{question}{suffix}"


def frame(rng: random.Random, instruction: str, text: str, label: str = "Text", block: bool = False) -> str:
    """An instruction about a text, the text placed and marked in one of several ways (a `block`, such as
    code, always on lines of its own)."""
    layouts = at("phrasing.layouts") + (() if block else at("phrasing.inline_layouts"))
    what = "some code" if label == "Code" else article(label.lower())
    return rng.choice(layouts).format(i=instruction, t=text, l=label, what=what)
