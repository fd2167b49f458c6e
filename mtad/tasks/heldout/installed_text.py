"""Prose and sentences installed on this machine, the text the requests quote and are about.

- prose documents (`documents`): Python's reference manual (``pydoc_data.topics``), package
  descriptions (``*.dist-info/METADATA``), licences and package documentation under ``/usr/share``,
  and long docstrings (`docstrings.scan`); cut into passages of several lengths (`passages`);
- sentences: statements and questions of that prose (`prose_sentences`), and the interface messages
  of gettext catalogues with their English originals (`catalogue_sentences`), in the languages of
  `text_sources.json` (`languages`).

Each source is optional: a missing one only shrinks its pools.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import struct
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ...split import held_out
from .docstrings import scan, site_packages
from .prose import MARKUP, fit, paragraphs, sentences, squash
from .request_data import table


class Document(NamedTuple):
    name: str  # where it comes from (a path, a topic, a module)
    domain: str  # what it is about, a label for topic classification
    paragraphs: tuple[str, ...]


class Passage(NamedTuple):
    key: str  # the first paragraph's first 80 characters: every paragraph is on one side of the split
    text: str
    domain: str
    source: str


def _read_text(path: Path, limit: int = 400_000) -> str:
    """A text file (gzip-compressed or not), '' if unreadable or too large to be prose worth reading."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data) if len(data) < limit // 4 else b""
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    return data[:limit].decode("utf-8", errors="replace") if len(data) <= limit else ""


def reference_manual() -> list[tuple[str, str]]:
    """(heading, text) of the topics of Python's reference manual, if pydoc_data is installed."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    return [(text.split("\n", 1)[0].replace('"', "").strip(), text) for _, text in sorted(topics.items())]


# Debian copyright files (machine-readable format): a lone "." stands for a blank line, and fields open with
# short headers ("License: GPL-2+", "Files: *") that are not prose
_DEBIAN_BLANK = re.compile(r"^[ \t]*\.[ \t]*$", re.M)
_DEBIAN_FIELD = re.compile(r"^[A-Z][A-Za-z-]+:[ \t]*[^\n]{0,60}$", re.M)


def _debian_copyright(text: str) -> str:
    return _DEBIAN_FIELD.sub("", _DEBIAN_BLANK.sub("", text))


def _system_texts() -> list[tuple[str, str, str]]:
    """(name, domain, text) of licences and package documentation under /usr/share."""
    out = []
    licences = Path("/usr/share/common-licenses")
    if licences.is_dir():
        out += [(str(p), "software licensing", _read_text(p)) for p in sorted(licences.iterdir()) if p.is_file()]
    docs = Path("/usr/share/doc")
    if docs.is_dir():
        copyrights = sorted(docs.glob("*/copyright"))
        out += [(str(p), "software licensing", _debian_copyright(_read_text(p))) for p in copyrights]
        for p in sorted(docs.glob("*/*")):
            name = p.name.lower()
            if name.startswith(("readme", "faq", "todo")):
                out.append((str(p), "software documentation", _read_text(p)))
            elif name.startswith("news") and "debian" not in name:
                out.append((str(p), "software release notes", _read_text(p)))
    return out


@lru_cache(maxsize=1)
def documents() -> tuple[Document, ...]:
    """Every prose document, each paragraph kept once (licence texts repeat across packages)."""
    texts = [(f"pydoc:{heading}", "the Python language reference", text) for heading, text in reference_manual()]
    for meta in sorted(site_packages().glob("*.dist-info/METADATA")):
        body = meta.read_text(errors="replace").split("\n\n", 1)
        if len(body) == 2:
            texts.append((str(meta), "software package descriptions", body[1]))
    texts += _system_texts()
    texts += [(doc.name, doc.package_domain, doc.text) for doc in scan().module_docs]
    seen: set[str] = set()
    out = []
    for name, domain, text in texts:
        paras = [p for p in paragraphs(text) if p not in seen]
        seen.update(paras)
        if paras:
            out.append(Document(name, domain, tuple(paras)))
    return tuple(out)


@lru_cache(maxsize=None)
def passages(min_words: int, max_words: int, max_chars: int) -> tuple[Passage, ...]:
    """Runs of paragraphs of one document, in order, from each paragraph on: at least `min_words`, at most
    `max_words` and `max_chars` (the last paragraph cut at a sentence). Every paragraph is on the side of the
    split of its own first 80 characters, and a run takes only its first paragraph's side (skipping the
    others'), so no paragraph is ever on both sides, and held-out documents still give long runs."""
    out = []
    for doc in documents():
        for side in (False, True):
            paras = [p for p in doc.paragraphs if held_out(p[:80]) == side]
            out += [
                Passage(text[:80], text, doc.domain, doc.name) for text in _runs(paras, min_words, max_words, max_chars)
            ]
    return tuple(out)


def _runs(paras: list[str], min_words: int, max_words: int, max_chars: int) -> list[str]:
    out = []
    for i, first in enumerate(paras):
        taken, words, chars = [], 0, 0
        for para in paras[i:]:
            if words >= min_words:
                break
            if words + len(para.split()) > max_words or chars + len(para) + 2 > max_chars:
                para = fit(para, max_words - words, max_chars - chars - 2)
                if not para:
                    break
            taken.append(para)
            words, chars = words + len(para.split()), chars + len(para) + 2
        if words >= min_words and taken[0][:80] == first[:80]:  # the run's key is its first paragraph's
            out.append("\n\n".join(taken))
    return out


def short_passages() -> tuple[Passage, ...]:
    """One to a few paragraphs, 60-150 words (summaries, passage questions)."""
    return passages(60, 150, 1100)


def brief_passages() -> tuple[Passage, ...]:
    """40-120 words (rewriting, classification, earlier answers)."""
    return passages(40, 120, 850)


def long_passages() -> tuple[Passage, ...]:
    """At least 250 words, cut to leave room for the instruction under the requests' MAX_CHARS."""
    return passages(250, 500, 2150)


class Sentence(NamedTuple):
    key: str  # its paragraph's key, or for a catalogue message the English message
    text: str
    language: str
    english: str  # the English original ('' for English sentences of prose)


def _plain_sentence(s: str, min_words: int = 6, max_words: int = 30) -> bool:
    return min_words <= len(s.split()) <= max_words and s[:1].isupper() and not MARKUP.search(s) and s.isprintable()


@lru_cache(maxsize=1)
def prose_sentences() -> tuple[Sentence, ...]:
    """Sentences (statements and questions) cut from the prose paragraphs."""
    out = []
    for doc in documents():
        for para in doc.paragraphs:
            out += [
                Sentence(para[:80], s, "English", "")
                for s in sentences(para)
                if s.endswith((".", "?")) and _plain_sentence(s) and not s.endswith(("e.g.", "i.e.", "etc."))
            ]
    return tuple(out)


# ----------------------------------------------------------------------------- gettext catalogues


def languages() -> dict[str, tuple[str, ...]]:
    """The languages requests translate into and out of, each with its locale codes (`text_sources.json`)."""
    return table("text_sources")["languages"]


def _mo_messages(path: Path) -> list[tuple[str, str]]:
    """(English message, translation) pairs of a compiled gettext catalogue (the .mo format)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if len(data) < 28:
        return []
    magic = struct.unpack_from("<I", data)[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        return []
    count, originals, translations = struct.unpack_from(order + "3I", data, 8)
    out = []
    if max(originals, translations) + 8 * count > len(data):  # not a whole catalogue
        return []
    for i in range(count):
        n, at = struct.unpack_from(order + "2I", data, originals + 8 * i)
        m, at2 = struct.unpack_from(order + "2I", data, translations + 8 * i)
        english, translated = data[at : at + n], data[at2 : at2 + m]
        if b"\0" in english or b"\x04" in english or n < 30 or n > 220:  # plurals, contexts, fragments
            continue
        out.append((english.decode("utf-8", errors="replace"), translated.decode("utf-8", errors="replace")))
    return out


def _catalogue_sentence(english: str, translated: str) -> bool:
    plain = squash(english)
    return bool(
        plain == english
        and english.isascii()
        and plain.endswith(".")
        and _plain_sentence(plain, 6, 30)
        and not re.search(r"[%\"'/()]|--|\d", plain)
        and translated.strip()
        and squash(translated) != plain
        and "\ufffd" not in translated
        and not re.search(r"[%\[\]{}<>_`]", translated)
    )


@lru_cache(maxsize=1)
def catalogue_sentences() -> tuple[Sentence, ...]:
    """Interface messages of the installed programs in five languages, each with its English original."""
    root = Path("/usr/share/locale")
    out = []
    for language, codes in languages().items():
        seen = set()
        for code in codes:
            for mo in sorted((root / code / "LC_MESSAGES").glob("*.mo")):
                if mo.name.startswith("iso_"):  # lists of names, not sentences
                    continue
                for english, translated in _mo_messages(mo):
                    english = english.strip()
                    if english not in seen and _catalogue_sentence(english, translated):
                        seen.add(english)
                        out.append(Sentence(english, squash(translated), language, english))
    return tuple(out)


@lru_cache(maxsize=1)
def english_sentences() -> tuple[Sentence, ...]:
    """Sentences to translate from English: statements of prose, and the catalogues' English messages."""
    prose = [s for s in prose_sentences() if s.text.endswith(".")]
    from_catalogues = {s.english: Sentence(s.key, s.english, "English", "") for s in catalogue_sentences()}
    return tuple(prose) + tuple(from_catalogues.values())


def fingerprint() -> dict:
    """What the installed text sources hold, in one digest: every document (name, domain, paragraphs)
    and every catalogue sentence, in the order the pools read them. Two machines whose digests agree
    draw the same requests from the same seed; a card or a round records it beside its requests."""
    digest = hashlib.sha256()
    docs, catalogue = documents(), catalogue_sentences()
    for doc in docs:
        digest.update("\x1f".join((doc.name, doc.domain, *doc.paragraphs)).encode() + b"\x1e")
    for s in catalogue:
        digest.update("\x1f".join(s).encode() + b"\x1e")
    return {"sha256": digest.hexdigest(), "documents": len(docs), "catalogue_sentences": len(catalogue)}
