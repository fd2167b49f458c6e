"""User requests of many kinds over thousands of subjects, built from text installed on this machine.

`draw_request(kind, rng, held)` returns a `Request` (an `Item` whose ``family`` is the kind) with no
answer: the target answers it. Kinds (`KINDS`) and what each is made of:

- ``open_question``: "What is ...", "Why ...", "How does ... work?" over general and technical subjects;
- ``explanation``: explain a subject to an audience, at a level or in a format;
- ``howto``: how-to and advice: tasks named by library docstrings ("compute the Chebyshev distance
  with SciPy"), travel, careers, languages, programming languages, everyday chores;
- ``creative``: poems, stories, dialogues, slogans, letters, riddles, with constraints (a setting,
  a colour, a length, a point of view);
- ``rewrite``: make a real prose passage formal, simple, shorter, bulleted, correct (typos are put in);
- ``translation``: real English sentences into French, German, Spanish, Italian or Portuguese, and
  real sentences of those languages into English;
- ``arithmetic``: sums, products, percentages, unit conversions, ages, money, rates, with drawn numbers;
- ``passage_qa``: questions on a real passage ("According to the passage, ...", "List every ..."),
  about noun phrases taken from the passage;
- ``summary_short`` (a passage of 60-150 words) and ``summary_long`` (paragraphs of one document, in
  order, at least 250 words, cut at a sentence to keep the request under 2,500 characters);
- ``classify``: sentiment, topic among listed labels, formal or informal, question or statement,
  language identification; the labels are in the request;
- ``code``: write, explain, fix, document, test or translate a real function of Python's standard
  library (`sources.stdlib_functions`) or of an installed package;
- ``sql``: text-to-SQL over the made-up schemas of `sources.SCHEMAS`, written in several formats;
- ``multi_turn``: a follow-up ("Can you make it shorter?") after an earlier exchange whose answer
  is real text (a docstring, a reference-manual passage, a function, a catalogue translation),
  carried in `Request.history`.

Where the text comes from (each source is optional: a missing one only shrinks its pools):

- prose: Python's reference manual (``pydoc_data.topics``), package descriptions
  (``*.dist-info/METADATA``), licences (``/usr/share/common-licenses``, ``/usr/share/doc/*/copyright``),
  package READMEs and NEWS files under ``/usr/share/doc``, and docstrings;
- docstrings of public functions, classes and methods of the standard library and of installed
  packages (numpy, scipy, pandas, ...), read with ``ast`` (nothing is imported);
- translations: gettext catalogues (``/usr/share/locale/<lang>/LC_MESSAGES/*.mo``), whose English
  messages come with their French, German, Spanish, Italian and Portuguese translations;
- general subjects: countries, regions, languages and currencies of the ISO code lists
  (``/usr/share/iso-codes/json``), cities of the time-zone database (``zoneinfo``), objects,
  animals and foods named by Unicode's pictographs (``unicodedata``), programming languages named
  by ``pygments``' lexers, colour names of matplotlib, Python's built-ins and standard modules,
  the chat task's topics (`mtad.tasks.prompts.TOPICS`), and a short list of occupations.

No evaluation set is read (MT-Bench, HumanEval, Spider, CNN/DailyMail, Spec-Bench). Subjects are split
1-in-5 by `mtad.split.held_out` on a stable key (`draw_with_key` returns it): a passage's first 80
characters (every paragraph is on the side of its own first 80 characters, and a passage or sentence
on its first paragraph's), a function's or a table's name, a subject's name (for a library function,
the concept or summary its docstring gives), a catalogue message's English text. ``held=False`` draws
only training subjects, ``held=True`` only held-out ones, and a subject falls on the same side in
every kind. Training requests never mention a held-out topic of the chat task.
"""

from __future__ import annotations

import ast
import builtins
import gc
import gzip
import json
import random
import re
import struct
import sysconfig
import unicodedata
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ..split import held_out
from ..tasks.prompts import NAMES, SQL_QUESTIONS, TOPICS
from .sources import (
    MORE_SQL_QUESTIONS,
    SCHEMAS,
    Item,
    _is_prose,
    code_request,
    schema_text,
    sql_request,
    stdlib_functions,
    summary_request,
)

MAX_CHARS = 2500  # longest user message (and longest earlier turn)


@dataclass(frozen=True)
class Request(Item):
    """A user request; ``history`` holds the earlier messages of the conversation as (role, content)."""

    history: tuple[tuple[str, str], ...] = ()


def messages(item: Item) -> list[dict[str, str]]:
    """The conversation in `tokenizer.apply_chat_template`'s format: the earlier turns, then the request."""
    history = getattr(item, "history", ())
    return [{"role": role, "content": content} for role, content in history] + [{"role": "user", "content": item.user}]


# ----------------------------------------------------------------------------- held-out chat topics


def _topic_forms(topic: str) -> set[str]:
    """A topic and the forms it may take in running text ("the Olympic Games", "Olympic Games", "volcano")."""
    bare = topic[4:] if topic.startswith("the ") else topic
    singular = bare[:-2] if bare.endswith("oes") else bare[:-1] if bare.endswith("s") else bare
    return {topic.lower(), bare.lower(), singular.lower()}


HELD_OUT_TOPICS = tuple(t for t in TOPICS if held_out(t))
_HELD_TOPIC_FORMS = tuple(sorted({f for t in HELD_OUT_TOPICS for f in _topic_forms(t)}))


def mentions_held_out_topic(text: str) -> bool:
    """Whether `text` mentions a held-out topic of the chat task (kept out of every training request)."""
    lowered = text.lower()
    return any(form in lowered for form in _HELD_TOPIC_FORMS)


# ----------------------------------------------------------------------------- text helpers

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_MARKUP = re.compile(r"[`|{}\[\]<>\\=_*#@$^~]|\.\.|::| : |https?:|www\.")
_STOP_WORDS = frozenset(
    "a an the of to in on for and or but is are was were be been being by with as at from that this these those "
    "it its which who whom whose what when where why how can could may might must shall should will would do does "
    "did has have had not no nor if then than so such into onto over under only also any all each every some "
    "more most other another same both either neither there here their they them you your we our he she his her "
    "one two three first second new used use using see following above below etc".split()
)


def _squash(text: str) -> str:
    return " ".join(text.split())


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_BREAK.split(text) if s]


def _fit(text: str, max_words: int, max_chars: int) -> str:
    """The longest run of whole leading sentences of `text` within both limits ('' if none fits)."""
    out, words, chars = [], 0, 0
    for sentence in _sentences(text):
        n = len(sentence.split())
        if words + n > max_words or chars + len(sentence) + 1 > max_chars:
            break
        out.append(sentence)
        words, chars = words + n, chars + len(sentence) + 1
    return " ".join(out)


def _usable_paragraph(para: str, min_words: int = 20) -> bool:
    """Plain English sentences: prose by `sources._is_prose`, no markup, not shouted, long enough."""
    if len(para.split()) < min_words or not para[:1].isupper() or _MARKUP.search(para) or not para.isprintable():
        return False  # the cheap tests first
    letters = [c for c in para if c.isalpha()]
    return _is_prose(para) and sum(c.isupper() for c in letters) <= 0.15 * max(len(letters), 1)


def _paragraphs(text: str, min_words: int = 20, max_words: int = 150) -> list[str]:
    """The prose paragraphs of a text, long ones cut into runs of whole sentences of at most max_words."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block.strip() or block.lstrip().startswith(("*", "-", "+", "o ", "#", ">>>", "|", "..")):
            continue
        if block.startswith("    ") and not block.startswith("     "):  # indented code blocks
            continue
        para = _squash(block)
        if not _usable_paragraph(para, min_words):
            continue
        while para:
            piece = _fit(para, max_words, 10 * max_words) or " ".join(para.split()[:max_words])
            if len(piece.split()) >= min_words:
                out.append(piece)
            para = para[len(piece) :].strip()
    return out


_NOUN_PHRASE = re.compile(r"\b[Tt]he ((?:[a-z][a-z-]{2,} ){0,2}[a-z][a-z-]{2,})")
_NAME_PHRASE = re.compile(r"(?<=[a-z,] )((?:[A-Z][a-z]+ ){1,3}[A-Z][a-z]+)\b")


def noun_phrases(text: str) -> list[str]:
    """Noun phrases of a passage, in order: "the X Y" up to the first function word, and capitalised names."""
    found = []
    for match in _NOUN_PHRASE.finditer(text):
        words = []
        for word in match.group(1).split():
            if word in _STOP_WORDS:
                break
            words.append(word)
        if words and len(words[-1]) >= 4:
            found.append("the " + " ".join(words))
    found += [m.group(1) for m in _NAME_PHRASE.finditer(text)]
    return list(dict.fromkeys(found))


def _article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# ----------------------------------------------------------------------------- prose documents


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


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _reference_manual() -> list[tuple[str, str]]:
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
    texts = [(f"pydoc:{heading}", "the Python language reference", text) for heading, text in _reference_manual()]
    for meta in sorted(_site_packages().glob("*.dist-info/METADATA")):
        body = meta.read_text(errors="replace").split("\n\n", 1)
        if len(body) == 2:
            texts.append((str(meta), "software package descriptions", body[1]))
    texts += _system_texts()
    texts += [(doc.name, doc.package_domain, doc.text) for doc in _scan().module_docs]
    seen: set[str] = set()
    out = []
    for name, domain, text in texts:
        paras = [p for p in _paragraphs(text) if p not in seen]
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
                para = _fit(para, max_words - words, max_chars - chars - 2)
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
    """At least 250 words, cut to leave room for the instruction under MAX_CHARS."""
    return passages(250, 500, 2150)


class Sentence(NamedTuple):
    key: str  # its paragraph's key, or for a catalogue message the English message
    text: str
    language: str
    english: str  # the English original ('' for English sentences of prose)


def _plain_sentence(s: str, min_words: int = 6, max_words: int = 30) -> bool:
    return min_words <= len(s.split()) <= max_words and s[:1].isupper() and not _MARKUP.search(s) and s.isprintable()


@lru_cache(maxsize=1)
def prose_sentences() -> tuple[Sentence, ...]:
    """Sentences (statements and questions) cut from the prose paragraphs."""
    out = []
    for doc in documents():
        for para in doc.paragraphs:
            out += [
                Sentence(para[:80], s, "English", "")
                for s in _sentences(para)
                if s.endswith((".", "?")) and _plain_sentence(s) and not s.endswith(("e.g.", "i.e.", "etc."))
            ]
    return tuple(out)


# ----------------------------------------------------------------------------- gettext catalogues

LANGUAGES = {
    "French": ("fr",),
    "German": ("de",),
    "Spanish": ("es",),
    "Italian": ("it",),
    "Portuguese": ("pt", "pt_BR"),
}


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
    plain = _squash(english)
    return bool(
        plain == english
        and english.isascii()
        and plain.endswith(".")
        and _plain_sentence(plain, 6, 30)
        and not re.search(r"[%\"'/()]|--|\d", plain)
        and translated.strip()
        and _squash(translated) != plain
        and "\ufffd" not in translated
        and not re.search(r"[%\[\]{}<>_`]", translated)
    )


@lru_cache(maxsize=1)
def catalogue_sentences() -> tuple[Sentence, ...]:
    """Interface messages of the installed programs in five languages, each with its English original."""
    root = Path("/usr/share/locale")
    out = []
    for language, codes in LANGUAGES.items():
        seen = set()
        for code in codes:
            for mo in sorted((root / code / "LC_MESSAGES").glob("*.mo")):
                if mo.name.startswith("iso_"):  # lists of names, not sentences
                    continue
                for english, translated in _mo_messages(mo):
                    english = english.strip()
                    if english not in seen and _catalogue_sentence(english, translated):
                        seen.add(english)
                        out.append(Sentence(english, _squash(translated), language, english))
    return tuple(out)


@lru_cache(maxsize=1)
def english_sentences() -> tuple[Sentence, ...]:
    """Sentences to translate from English: statements of prose, and the catalogues' English messages."""
    prose = [s for s in prose_sentences() if s.text.endswith(".")]
    from_catalogues = {s.english: Sentence(s.key, s.english, "English", "") for s in catalogue_sentences()}
    return tuple(prose) + tuple(from_catalogues.values())


# ----------------------------------------------------------------------------- docstrings (ast, no imports)

PACKAGES = {  # installed package -> (display name, what it is about)
    "numpy": ("NumPy", "numerical computing"),
    "scipy": ("SciPy", "scientific computing"),
    "pandas": ("pandas", "data analysis"),
    "matplotlib": ("Matplotlib", "data visualisation"),
    "networkx": ("NetworkX", "graph algorithms"),
    "sympy": ("SymPy", "symbolic mathematics"),
    "torch": ("PyTorch", "deep learning"),
    "transformers": ("Transformers", "natural language processing"),
    "PIL": ("Pillow", "image processing"),
    "requests": ("Requests", "web programming"),
    "httpx": ("HTTPX", "web programming"),
    "jinja2": ("Jinja", "web programming"),
    "click": ("Click", "command-line tools"),
}
STDLIB_PACKAGES = ("json", "email", "http", "urllib", "logging", "concurrent", "importlib", "sqlite3", "xml", "asyncio")
# the scan's time goes into ast.parse: skip tests, vendored code, huge generated files, and the parts of
# the biggest packages whose docstrings repeat (one per model in transformers, sympy's polynomial
# internals) or are compiler internals (torch's private packages)
SKIPPED_DIRS = frozenset({"tests", "test", "testing", "_vendor", "vendored", "benchmarks", "models", "polys"})
PRIVATE_PARTS_SKIPPED = frozenset({"torch", "transformers"})
MAX_FILE_BYTES = 250_000

# first verbs of docstring summaries that name a task ("Compute the norm" -> "compute the norm")
TASK_VERBS = frozenset(
    "get compute calculate create construct convert find generate evaluate estimate apply remove add check load "
    "save read write parse split join sort count draw plot fit solve filter merge replace encode decode copy insert "
    "normalize rotate resize extract format build make determine interpolate integrate simplify expand factor "
    "transform reshape concatenate compare send open set test perform".split()
)
VERB_ALIASES = {"return": "get"}  # "Returns the norm" -> "get the norm"
CONCEPT_VERBS = frozenset({"get", "compute", "calculate", "evaluate", "estimate", "generate", "construct", "perform"})
_CONTEXT_WORDS = re.compile(r"\b(self|this|these|its|it|instance|object|given|specified|input|provided|current)\b")
# what a concept must not end with: the name of a mere container or attribute ("the default value")
GENERIC_HEADS = frozenset(
    "name names path value values string list copy iterator header default number text location item items view data "
    "object objects version type types result results key keys index size shape length count representation dict "
    "dictionary tuple array file directory parameter parameters attribute attributes option options element elements "
    "style node nodes filename function method class instance module config settings info information".split()
)


class ApiDoc(NamedTuple):
    key: str  # the concept it names, else its summary: APIs that do the same thing share a side
    name: str  # qualified name, e.g. scipy.spatial.distance.chebyshev
    package: str  # display name, e.g. SciPy
    summary: str  # first sentence of the docstring
    task: str  # the summary as a how-to task ("compute the Chebyshev distance"), or ''
    concept: str  # the noun phrase it computes ("the Chebyshev distance"), or ''
    prose: str  # the summary and the docstring's next prose paragraphs (an answer about it)


class Function(NamedTuple):
    key: str  # its name, as `sources.draw_item` splits stdlib functions
    name: str
    prompt: str  # signature + docstring
    source: str  # the whole function


class ModuleDoc(NamedTuple):
    name: str
    package_domain: str
    text: str


class Scan(NamedTuple):
    apis: tuple[ApiDoc, ...]
    functions: tuple[Function, ...]  # short documented top-level functions of the packages
    module_docs: tuple[ModuleDoc, ...]  # long docstrings (modules, classes, functions) as prose documents
    module_summaries: tuple[tuple[str, str], ...]  # (stdlib module, its docstring's first sentence)


def _public_module(rel: Path) -> str:
    parts = [p for p in rel.with_suffix("").parts if p != "__init__"]
    return ".".join(p for p in parts if not p.startswith("_")) or parts[0]


def _source_files() -> list[tuple[str, str, Path, Path]]:
    """(package display name, domain, root, file) of the sources to scan."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = [("Python", "the Python standard library", stdlib, p) for p in sorted(stdlib.glob("*.py"))]
    for sub in STDLIB_PACKAGES:
        files = [p for p in sorted((stdlib / sub).rglob("*.py")) if _wanted(sub, p.relative_to(stdlib / sub).parts)]
        out += [("Python", "the Python standard library", stdlib, p) for p in files]
    site = _site_packages()
    for package, (display, domain) in PACKAGES.items():
        files = [
            p for p in sorted((site / package).rglob("*.py")) if _wanted(package, p.relative_to(site / package).parts)
        ]
        out += [(display, domain, site, p) for p in files]
    return out


def _wanted(package: str, parts: tuple[str, ...]) -> bool:
    """Whether a file (its path's parts inside the package) is worth parsing."""
    if SKIPPED_DIRS.intersection(parts[:-1]) or parts[-1].startswith("test_"):
        return False
    return package not in PRIVATE_PARTS_SKIPPED or not any(p.startswith("_") and p != "__init__.py" for p in parts)


# numpy-style section headers (a name underlined) and Google-style ones ("Args:" alone on its line)
_SECTION_HEADER = re.compile(r"^\s*([A-Z][A-Za-z ]*)\n\s*[-=~^]{3,}\s*$", re.M)
_GOOGLE_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns?|Raises|Yields|Attributes|Examples?|Keyword Args|Shape|Inputs|Outputs|"
    r"See Also|References|Warnings?|Notes?|Todo):\s*$",
    re.M,
)


def docstring_text(doc: str) -> str:
    """The prose of a docstring: its text before the first section (parameters, returns, examples, ...)
    and its "Notes" section."""
    parts = _SECTION_HEADER.split(doc)  # [intro, name, body, name, body, ...]
    kept = [parts[0]] + [body for name, body in zip(parts[1::2], parts[2::2]) if name.strip().lower() == "notes"]
    return "\n\n".join(_GOOGLE_SECTION.split(part, 1)[0] for part in kept).strip()


def _first_sentence(doc: str) -> str:
    first = _squash(doc.split("\n\n", 1)[0])
    sentence = _sentences(first)[0] if first else ""
    ok = 3 <= len(sentence.split()) <= 20 and re.fullmatch(r"[A-Z][A-Za-z0-9 ,;'()-]*\.?", sentence)
    return sentence.rstrip(".") + "." if ok else ""


def _base_verb(word: str) -> str:
    """The base form of a task verb ("Computes" -> "compute", "Returns" -> "get"), '' for other words."""
    word = word.lower()
    for form in (word, word[:-1] if word.endswith("s") else ""):
        if form in VERB_ALIASES or form in TASK_VERBS:
            return VERB_ALIASES.get(form, form)
    return ""


def _task_and_concept(summary: str, top_level: bool) -> tuple[str, str]:
    """A summary as a how-to task and, for a module-level function or class, the concept it computes:
    "Compute the Chebyshev distance." -> ("compute the Chebyshev distance", "the Chebyshev distance")."""
    first, _, rest = summary.rstrip(".").partition(" ")
    verb = _base_verb(first)
    if (
        not verb
        or not rest
        or _CONTEXT_WORDS.search(rest)
        or re.search(r"[;()\d]|--|^(True|False|None|whether)\b|^\W", rest)
    ):
        return "", ""
    article, _, noun = rest.partition(" ")
    words = noun.split()
    is_concept = (
        top_level  # a method's summary depends on its class ("the x coordinate of the point")
        and verb in CONCEPT_VERBS
        and article in ("the", "a", "an")
        and 2 <= len(words) <= 5
        and words[-1].lower() not in GENERIC_HEADS
        and all(len(w) > 1 for w in words)
        and "," not in rest
    )
    return f"{verb} {rest}", rest if is_concept else ""


def _docstring_prose(doc: str, summary: str) -> str:
    paras = [_squash(p) for p in docstring_text(doc).split("\n\n")[1:]]
    prose = [p for p in paras if _usable_paragraph(p, 8)][:2]
    return _fit(" ".join([summary] + prose), 120, 800) or summary


def _definitions(tree: ast.Module):
    """(dotted name, node, top level) of the public functions and classes of a module, and their methods."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            yield node.name, node, True
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, ast.FunctionDef) and not member.name.startswith("_"):
                        yield f"{node.name}.{member.name}", member, False


def _short_function(node: ast.AST, lines: list[str], name: str) -> Function | None:
    """A documented top-level function of 5-40 lines, as `sources.stdlib_functions` takes them."""
    if not isinstance(node, ast.FunctionDef) or not 5 <= node.end_lineno - node.lineno <= 40 or len(node.body) < 2:
        return None
    prompt = "\n".join(lines[node.lineno - 1 : node.body[0].end_lineno]) + "\n"
    source = "\n".join(lines[node.lineno - 1 : node.end_lineno])
    return Function(name, name, prompt, source) if len(source) <= 1800 and source.isascii() else None


@lru_cache(maxsize=1)
def _scan() -> Scan:
    """One pass of ast over the standard library and the installed packages' sources."""
    # the cyclic collector, run again and again over the growing results while ast.parse allocates
    # millions of (acyclic, refcount-freed) nodes, would triple the scan's time
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _scan_files()
    finally:
        if collecting:
            gc.enable()


def _scan_files() -> Scan:
    apis, functions, module_docs, module_summaries = {}, [], [], []
    for display, domain, root, path in _source_files():
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            source = path.read_text()
            tree = ast.parse(source)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        module = _public_module(path.relative_to(root))
        doc = ast.get_docstring(tree)
        if doc:
            module_docs.append(ModuleDoc(module, domain, docstring_text(doc)))
            if display == "Python" and "." not in module and _first_sentence(doc):
                module_summaries.append((module, _first_sentence(doc)))
        lines = source.splitlines()
        for name, node, top in _definitions(tree):
            doc = ast.get_docstring(node)
            if not doc:
                continue
            qualname = f"{module}.{name}"
            if len(doc) > 600:
                module_docs.append(ModuleDoc(qualname, domain, docstring_text(doc)))
            summary = _first_sentence(doc)
            if summary and qualname not in apis:
                task, concept = _task_and_concept(summary, top)
                key = (concept or summary.rstrip(".")).lower()
                apis[qualname] = ApiDoc(key, qualname, display, summary, task, concept, _docstring_prose(doc, summary))
            if top and display != "Python":  # stdlib functions come from sources.stdlib_functions
                function = _short_function(node, lines, qualname)
                if function:
                    functions.append(function)
    return Scan(tuple(apis.values()), tuple(functions), tuple(module_docs), tuple(module_summaries))


@lru_cache(maxsize=1)
def code_functions() -> tuple[Function, ...]:
    """Short documented functions: the standard library's (`sources.stdlib_functions`) and the packages'."""
    stdlib = tuple(Function(name, name, prompt, whole) for name, prompt, whole in stdlib_functions())
    names = {f.name for f in stdlib}
    return stdlib + tuple(f for f in _scan().functions if f.name not in names)


def api_docs() -> tuple[ApiDoc, ...]:
    return _scan().apis


@lru_cache(maxsize=1)
def api_answers() -> tuple[ApiDoc, ...]:
    """APIs whose docstring says enough (25 words or more) to be an assistant's answer about them."""
    return tuple(a for a in api_docs() if len(a.prose.split()) >= 25)


# ----------------------------------------------------------------------------- subjects


class Subject(NamedTuple):
    key: str  # the subject's name, or for an API the concept it names
    name: str  # as a question names it: "volcanoes", "Paris", "the Chebyshev distance", "a red apple"
    category: str  # which templates fit it (see SUBJECT_POOLS)
    context: str = ""  # the package an API or task belongs to, the country of a region


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _python_literal(path: Path, name: str):
    """The value of a top-level `name = {...}` literal of a source file, or None (never imported)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


@lru_cache(maxsize=1)
def _iso_codes() -> dict[str, list[dict]]:
    root = Path("/usr/share/iso-codes/json")
    return {name: _read_json(root / f"iso_{name}.json").get(name, []) for name in ("3166-1", "3166-2", "639-2", "4217")}


@lru_cache(maxsize=1)
def topic_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(t, t, "topic") for t in TOPICS)


@lru_cache(maxsize=1)
def place_subjects() -> tuple[Subject, ...]:
    """Countries and their regions (ISO 3166) and the cities of the time-zone database."""
    countries = {c["alpha_2"]: c.get("common_name", c["name"]) for c in _iso_codes()["3166-1"]}
    plain = re.compile(r"[^,()]+")  # no "Korea, Republic of" or "Caraga (Region XIII)"
    out = [Subject(name, name, "place") for name in countries.values() if plain.fullmatch(name)]
    for region in _iso_codes()["3166-2"]:
        country = countries.get(region["code"].split("-")[0], "")
        if country and plain.fullmatch(region["name"]) and plain.fullmatch(country) and region["name"] != country:
            out.append(Subject(f"{region['name']}, {country}", f"{region['name']} in {country}", "place", country))
    zones = sorted(zoneinfo.available_timezones())  # empty without a time-zone database
    continents = ("Africa/", "America/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Indian/", "Pacific/")
    cities = dict.fromkeys(z.rsplit("/", 1)[1].replace("_", " ") for z in zones if z.startswith(continents))
    out += [Subject(c, c, "place") for c in cities if c.replace(" ", "").isalpha() and c not in countries.values()]
    return tuple(dict((s.key, s) for s in out).values())


@lru_cache(maxsize=1)
def language_subjects() -> tuple[Subject, ...]:
    """Human languages of ISO 639-2 ("the Basque language")."""
    out = []
    for entry in _iso_codes()["639-2"]:
        name = entry.get("common_name", entry["name"])
        if re.fullmatch(r"[A-Z][a-z]+(?: [A-Z][a-z]+)?", name):
            out.append(Subject(name, f"the {name} language", "language"))
    return tuple(out)


@lru_cache(maxsize=1)
def currency_subjects() -> tuple[Subject, ...]:
    return tuple(
        Subject(c["name"], f"the {c['name']}", "currency")
        for c in _iso_codes()["4217"]
        if re.fullmatch(r"[A-Za-z .'-]+", c["name"]) and "Fund" not in c["name"] and "Unit" not in c["name"]
    )


# Unicode blocks of pictographs: plants and food, celebrations and sport, animals and objects,
# transport, and the supplements; their character names are plain English nouns ("RED APPLE")
PICTOGRAPH_BLOCKS = ((0x1F330, 0x1F3FF), (0x1F400, 0x1F4FF), (0x1F680, 0x1F6FF), (0x1F950, 0x1F9FF), (0x1FA70, 0x1FAFF))
_NOT_A_THING = re.compile(
    r"face|hand|sign|symbol|button|mark|arrow|square|circle|skin|finger|emoji|modifier|with|tone|black|white|"
    r"heavy|squared|keycap|digit|letter|ornament|frame|triangle|person|\bman\b|woman|boy|girl|family|kiss|"
    r"couple|hundred|sparkle|speech|thought|cross|prohibited|\bno\b|card|playing|domino|mahjong|heart|poo|"
    r"oncoming|pointing|entry|mode|\boff\b|silhouette|hotel|ogre|goblin|alien|\bimp\b|vibration"
)
OCCUPATIONS = [
    "farmer",
    "firefighter",
    "pilot",
    "scientist",
    "teacher",
    "nurse",
    "architect",
    "baker",
    "librarian",
    "plumber",
    "electrician",
    "journalist",
    "translator",
    "accountant",
    "carpenter",
    "pharmacist",
    "veterinarian",
    "gardener",
    "software developer",
    "data scientist",
    "chef",
    "dentist",
    "lawyer",
    "judge",
    "mechanic",
    "astronaut",
    "detective",
    "police officer",
    "bus driver",
    "beekeeper",
    "fisherman",
    "tailor",
    "surgeon",
    "air traffic controller",
    "park ranger",
    "social worker",
    "graphic designer",
    "interpreter",
    "lighthouse keeper",
    "zookeeper",
]


@lru_cache(maxsize=1)
def thing_subjects() -> tuple[Subject, ...]:
    """Objects, animals, plants and foods: the names of Unicode's pictographs ("a red apple")."""
    names = (unicodedata.name(chr(cp), "").lower() for lo, hi in PICTOGRAPH_BLOCKS for cp in range(lo, hi + 1))
    kept = [n for n in names if n and len(n.split()) <= 3 and not _NOT_A_THING.search(n)]
    return tuple(Subject(n, _article(n), "thing") for n in dict.fromkeys(kept))


@lru_cache(maxsize=1)
def occupation_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(job, _article(job), "occupation") for job in OCCUPATIONS)


@lru_cache(maxsize=1)
def programming_language_subjects() -> tuple[Subject, ...]:
    """Programming and markup languages that pygments highlights."""
    lexers = _python_literal(_site_packages() / "pygments" / "lexers" / "_mapping.py", "LEXERS")
    if not isinstance(lexers, dict):
        return ()
    not_languages = re.compile(r"output|console|session|log|traceback|mail|bare|snippet|statement| with ", re.I)
    names = [
        name
        for _, name, _, filenames, _ in lexers.values()
        if filenames and re.fullmatch(r"[A-Z][A-Za-z0-9#.' -]*", name) and not not_languages.search(name)
    ]
    return tuple(Subject(n, n, "proglang") for n in dict.fromkeys(names))


@lru_cache(maxsize=1)
def python_subjects() -> tuple[Subject, ...]:
    """Python's statements and features (reference manual headings), built-ins and standard modules."""
    out = [Subject(h, h[:1].lower() + h[1:], "python") for h, _ in _reference_manual()]
    for name in sorted(n for n in dir(builtins) if not n.startswith("_")):
        obj = getattr(builtins, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            out.append(Subject(name, f"the {name} exception", "python"))
        elif callable(obj):
            out.append(Subject(name, f"the built-in {name}()", "python"))
    modules = [m for m, _ in _scan().module_summaries if not m.startswith("_")]
    out += [Subject(f"module {m}", f"the {m} module", "python") for m in modules]
    return tuple(s for s in dict((s.key, s) for s in out).values() if s.name.isprintable() and len(s.name) < 60)


@lru_cache(maxsize=1)
def concept_subjects() -> tuple[Subject, ...]:
    """Technical concepts named by docstring summaries ("Compute the Chebyshev distance.")."""
    concepts = {a.key: Subject(a.key, a.concept, "concept", a.package) for a in api_docs() if a.concept}
    return tuple(concepts.values())


@lru_cache(maxsize=1)
def api_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(a.key, a.name, "api", a.package) for a in api_docs())


@lru_cache(maxsize=1)
def task_subjects() -> tuple[Subject, ...]:
    """How-to tasks named by docstring summaries ("compute the Chebyshev distance", in SciPy)."""
    tasks = {(a.key, a.package): Subject(a.key, a.task, "task", a.package) for a in api_docs() if a.task}
    return tuple(tasks.values())


@lru_cache(maxsize=1)
def colours() -> tuple[str, ...]:
    table = _python_literal(_site_packages() / "matplotlib" / "_color_data.py", "XKCD_COLORS")
    names = [n for n in table if re.fullmatch(r"[a-z ]+", n)] if isinstance(table, dict) else []
    return tuple(names) or ("sky blue", "dark green", "burnt orange", "pale yellow", "deep purple")


EVERYDAY_TASKS = [
    "fix a flat bicycle tyre",
    "write a cover letter",
    "prepare for a job interview",
    "keep houseplants alive",
    "learn to cook simple meals",
    "stay focused while studying",
    "organise a small wedding",
    "train a puppy to sit",
    "clean a cast-iron pan",
    "make friends in a new city",
    "get better sleep",
    "start running as a beginner",
    "write a good thank-you note",
    "negotiate a salary offer",
    "plan a weekly meal schedule",
    "set up a home network",
    "back up the files on my laptop",
    "choose a good password",
    "paint a room",
    "build a habit of reading every day",
    "prepare for a long flight",
    "resolve an argument with a friend",
    "start a vegetable garden on a balcony",
    "keep a journal",
    "learn to play the guitar",
    "give constructive feedback to a colleague",
    "prepare a presentation for my class",
    "organise a messy wardrobe",
    "make a good first impression",
    "care for a cat",
    "fix a squeaky door",
    "start learning to draw",
    "plan a birthday party for a child",
    "deal with stress before exams",
    "write a short story",
    "make homemade pasta",
    "choose a laptop for university",
    "keep my inbox under control",
    "teach a child to ride a bike",
    "sharpen a kitchen knife",
]


@lru_cache(maxsize=1)
def everyday_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(t, t, "everyday") for t in EVERYDAY_TASKS)


SUBJECT_POOLS: dict[str, Callable[[], tuple[Subject, ...]]] = {
    "topic": topic_subjects,
    "thing": thing_subjects,
    "place": place_subjects,
    "language": language_subjects,
    "currency": currency_subjects,
    "occupation": occupation_subjects,
    "concept": concept_subjects,
    "api": api_subjects,
    "task": task_subjects,
    "python": python_subjects,
    "proglang": programming_language_subjects,
    "everyday": everyday_subjects,
}


# ----------------------------------------------------------------------------- the split


def _fields_text(entry: tuple) -> str:
    return " ".join(str(f) for f in entry)


@lru_cache(maxsize=None)
def split(pool: Callable[[], tuple], held: bool) -> tuple:
    """The entries of a pool on one side of the split; training entries never mention a held-out topic."""
    return tuple(
        e for e in pool() if held_out(e.key) == held and (held or not mentions_held_out_topic(_fields_text(e)))
    )


def _pick(rng: random.Random, pool: Callable[[], tuple], held: bool):
    entries = split(pool, held)
    if not entries:
        raise LookupError(f"no {'held-out' if held else 'training'} entries in {pool.__name__}")
    return rng.choice(entries)


@lru_cache(maxsize=None)
def _by_domain(pool: Callable[[], tuple[Passage, ...]], held: bool) -> dict[str, tuple[Passage, ...]]:
    groups: dict[str, list[Passage]] = {}
    for passage in split(pool, held):
        groups.setdefault(passage.domain, []).append(passage)
    return {domain: tuple(group) for domain, group in groups.items()}


def _pick_passage(rng: random.Random, pool: Callable[[], tuple[Passage, ...]], held: bool) -> Passage:
    """A passage of a domain drawn with weight sqrt(its passages): licences and release notes, the
    largest domains, would otherwise make up half the passages."""
    groups = _by_domain(pool, held)
    if not groups:
        raise LookupError(f"no {'held-out' if held else 'training'} passages in {pool.__name__}")
    domain = rng.choices(list(groups), [len(g) ** 0.5 for g in groups.values()])[0]
    return rng.choice(groups[domain])


def _pick_subject(rng: random.Random, held: bool, weights: dict[str, float]) -> Subject:
    """A subject of a category drawn by weight, among categories with subjects on this side."""
    categories = [c for c in weights if split(SUBJECT_POOLS[c], held)]
    if not categories:
        raise LookupError(f"no subjects for categories {sorted(weights)}")
    category = rng.choices(categories, [weights[c] for c in categories])[0]
    return _pick(rng, SUBJECT_POOLS[category], held)


def _other(rng: random.Random, subject: Subject, held: bool) -> Subject:
    """A second subject of the same category and side (for comparisons)."""
    return _pick(rng, SUBJECT_POOLS[subject.category], held)


# ----------------------------------------------------------------------------- phrasing


def _dress(rng: random.Random, question: str, prefixes: list[str], suffixes: list[str]) -> str:
    """A question with an opening and a closing drawn for variety (openings ending in ', ' lower its first word)."""
    prefix, suffix = rng.choice(prefixes), rng.choice(suffixes)
    if prefix.endswith(", ") and not question.split(" ", 1)[0].isupper():
        question = question[:1].lower() + question[1:]
    return f"{prefix}{question}{suffix}"


QUESTION_PREFIXES = ["", "", "", "Quick question: ", "I've always wondered: ", "Out of curiosity, ", "Hi! ", "Hey, "]
QUESTION_SUFFIXES = [
    "",
    "",
    "",
    " Keep it short.",
    " Answer in two or three sentences.",
    " Please be detailed.",
    " Give one concrete example.",
    " Use bullet points.",
    " Explain your reasoning.",
]


def _frame(rng: random.Random, instruction: str, text: str, label: str = "Text", block: bool = False) -> str:
    """An instruction about a text, the text placed and marked in one of several ways (a `block`, such as
    code, always on lines of its own)."""
    layouts = [
        "{i}\n\n{t}",
        "{i}\n\n{l}:\n{t}",
        "{t}\n\n{i}",
        "Here is {what}:\n\n{t}\n\n{i}",
        "{i}\n\n---\n{t}\n---",
    ]
    layouts += [] if block else ['{i}\n\n"""\n{t}\n"""', "{l}: {t}\n\n{i}"]
    what = "some code" if label == "Code" else _article(label.lower())
    return rng.choice(layouts).format(i=instruction, t=text, l=label, what=what)


# ----------------------------------------------------------------------------- kinds: questions, explanations

OPEN_QUESTIONS = {
    "topic": [
        "What is the history of {s}?",
        "Why do people find {s} so interesting?",
        "What are some common misconceptions about {s}?",
        "How has {s} changed over the last hundred years?",
        "What are the most important facts about {s}?",
        "Why does {s} matter today?",
        "What are the pros and cons of {s}? Give me your honest opinion.",
        "How does {s} affect everyday life?",
        "What do experts still disagree about when it comes to {s}?",
    ],
    "thing": [
        "What is {s} used for?",
        "How is {s} made?",
        "Where does {s} come from?",
        "Why do so many people like {s}?",
        "Is {s} a good gift? Why or why not?",
        "What are some surprising facts about {s}?",
        "How would you describe {s} to someone who has never seen one?",
        "What is the history of {s}?",
    ],
    "place": [
        "What is {s} known for?",
        "What is the climate like in {s}?",
        "What should a first-time visitor to {s} see?",
        "What is the history of {s}?",
        "What languages are spoken in {s}?",
        "What is daily life like in {s}?",
        "What foods is {s} famous for?",
        "How did {s} get its name?",
        "What is the economy of {s} based on?",
    ],
    "language": [
        "Where is {s} spoken?",
        "How many people speak {s}?",
        "Which languages is {s} related to?",
        "Is {s} difficult to learn? Why?",
        "What writing system does {s} use?",
        "What is the history of {s}?",
    ],
    "currency": [
        "Which country uses {s}?",
        "What is the history of {s}?",
        "How is {s} divided into smaller units?",
        "Why does the exchange rate of {s} change over time?",
    ],
    "occupation": [
        "What does {s} do on a typical day?",
        "What skills does {s} need?",
        "How long does it take to train as {s}?",
        "What is the hardest part of working as {s}?",
        "Why is the work of {s} important?",
    ],
    "concept": [
        "What is {s}?",
        "How does {s} work?",
        "Why is {s} useful?",
        "Where is {s} used in practice?",
        "What are the limitations of {s}?",
        "How is {s} computed?",
        "What is the intuition behind {s}?",
        "What is {s}, and how would I compute it in {c}?",
    ],
    "api": [
        "What does {s} do?",
        "When should I use {s}?",
        "What are the most important arguments of {s}?",
        "What does {s} return?",
        "What are common mistakes when using {s}?",
        "Is there an alternative to {s} in {c}?",
        "What does `{s}` do in {c}?",
    ],
    "python": [
        "What is {s} in Python?",
        "How does {s} work in Python?",
        "When should I use {s} in Python?",
        "What are common pitfalls with {s} in Python?",
        "Why does Python have {s}?",
    ],
    "proglang": [
        "What is {s} used for?",
        "Who uses {s}, and why?",
        "What are the strengths and weaknesses of {s}?",
        "How does {s} compare to Python?",
        "Is {s} still worth learning?",
    ],
}
COMPARISONS = ["What is the difference between {s} and {t}?", "Which is more interesting, {s} or {t}? Explain."]
OPEN_QUESTION_WEIGHTS = {
    "topic": 1.0,
    "thing": 1.5,
    "place": 2.0,
    "language": 0.7,
    "currency": 0.3,
    "occupation": 0.5,
    "concept": 2.0,
    "api": 2.0,
    "python": 1.0,
    "proglang": 1.0,
}


def _open_question(rng: random.Random, held: bool) -> tuple[Request, str]:
    subject = _pick_subject(rng, held, OPEN_QUESTION_WEIGHTS)
    templates = OPEN_QUESTIONS[subject.category]
    if rng.random() < 0.1 and subject.category not in ("api", "occupation"):
        templates = COMPARISONS
    question = rng.choice(templates).format(s=subject.name, t=_other(rng, subject, held).name, c=subject.context)
    question = _cap(question)
    return Request("open_question", _dress(rng, question, QUESTION_PREFIXES, QUESTION_SUFFIXES)), subject.key


AUDIENCES = [
    "a ten-year-old",
    "a high-school student",
    "a first-year university student",
    "a software engineer",
    "a retired teacher",
    "someone who has never heard of it",
    "an expert in the field",
    "a busy manager",
    "my grandmother",
    "a new colleague",
    "a journalist",
    "a curious teenager",
    "a five-year-old",
]
SELF_DESCRIPTIONS = [
    "a complete beginner",
    "a high-school student",
    "a software developer",
    "a biology student",
    "a history teacher",
    "not very technical",
    "preparing for an exam",
    "a retired engineer",
]
LEVELS = [
    "in simple terms",
    "in one paragraph",
    "in under 100 words",
    "step by step",
    "with an everyday example",
    "at a technical level",
    "as a list of key points",
    "in three sentences",
    "with a short analogy",
    "without any jargon",
]
EXPLANATIONS = [
    "Explain {s} to {a}.",
    "Can you explain {s} {v}?",
    "I'm {me}. Explain {s} to me {v}.",
    "Give me an explanation of {s} {v}.",
    "Describe {s} as if you were talking to {a}.",
    "Teach me about {s}: start with the basics, then go deeper.",
    "Explain {s} using an analogy that {a} would understand.",
    "What is the simplest way to explain {s}?",
    "Break down {s} for {a}, {v}.",
    "Explain {s}, then give two examples and one common misunderstanding.",
]
OCCUPATION_EXPLANATIONS = ["Explain what {s} does to {a}.", "Describe the job of {s} {v}."]
EXPLANATION_WEIGHTS = {
    "topic": 1.0,
    "concept": 3.0,
    "api": 1.0,
    "python": 1.5,
    "proglang": 0.7,
    "language": 0.3,
    "currency": 0.2,
    "occupation": 0.5,
}


def _explanation(rng: random.Random, held: bool) -> tuple[Request, str]:
    subject = _pick_subject(rng, held, EXPLANATION_WEIGHTS)
    templates = OCCUPATION_EXPLANATIONS if subject.category == "occupation" else EXPLANATIONS
    name = f"{subject.name} in {subject.context}" if subject.category == "api" and rng.random() < 0.5 else subject.name
    text = rng.choice(templates).format(
        s=name, a=rng.choice(AUDIENCES), v=rng.choice(LEVELS), me=rng.choice(SELF_DESCRIPTIONS)
    )
    return Request("explanation", _cap(text)), subject.key


# ----------------------------------------------------------------------------- kinds: how-to

HOWTOS = {
    "task": [
        "How do I {s} in {c}?",
        "What's the easiest way to {s} with {c}?",
        "Show me how to {s} using {c}, with a short example.",
        "I need to {s}. Which {c} function should I use, and how?",
        "How can I {s} in Python?",
        "Step by step, how would I {s} with {c}?",
        "Is there a quick way to {s} in {c}?",
    ],
    "occupation": [
        "How do I become {s}?",
        "What advice would you give someone who wants to work as {s}?",
        "How can a newly trained {n} get better at the job?",
        "I'm thinking of a career change to become {s}. How should I prepare?",
    ],
    "place": [
        "How should I plan a three-day trip to {s}?",
        "What's the best way to get around {s}?",
        "How do I prepare for moving to {s}?",
        "What should I pack for a week in {s}?",
        "How can I experience {s} on a small budget?",
    ],
    "language": [
        "How can I start learning {s}?",
        "What is the fastest way to learn a few basic phrases in {s}?",
        "How do I practise {s} if nobody near me speaks it?",
    ],
    "proglang": [
        "How do I get started with {s}?",
        "What's a good first project in {s}?",
        "How do I set up a development environment for {s}?",
        "How do I go from beginner to intermediate in {s}?",
    ],
    "topic": [
        "How can I learn more about {s}?",
        "Give me a plan to become knowledgeable about {s} in a month.",
        "How do I explain {s} to my kids?",
        "What are good first steps for someone interested in {s}?",
    ],
    "python": [
        "How do I use {s} in Python?",
        "Show me how to use {s} correctly in Python.",
        "How do I avoid mistakes with {s} in Python?",
    ],
    "everyday": [
        "How do I {s}?",
        "What's the best way to {s}?",
        "Give me step-by-step instructions to {s}.",
        "I want to {s}. Any advice?",
        "What mistakes should I avoid when I {s}?",
        "Can you give me a checklist to {s}?",
    ],
}
HOWTO_WEIGHTS = {
    "task": 4.0,
    "occupation": 0.5,
    "place": 1.5,
    "language": 0.5,
    "proglang": 0.7,
    "topic": 0.7,
    "python": 1.0,
    "everyday": 1.0,
}
HOWTO_SUFFIXES = ["", "", "", " Keep it practical.", " Give me numbered steps.", " I'm a beginner.", " Be brief."]


def _howto(rng: random.Random, held: bool) -> tuple[Request, str]:
    subject = _pick_subject(rng, held, HOWTO_WEIGHTS)
    # {n}: the bare name ("farmer" where {s} is "a farmer")
    text = rng.choice(HOWTOS[subject.category]).format(s=subject.name, c=subject.context or "Python", n=subject.key)
    return Request("howto", _dress(rng, _cap(text), QUESTION_PREFIXES[:4], HOWTO_SUFFIXES)), subject.key


# ----------------------------------------------------------------------------- kinds: creative writing

CREATIVE_FORMS = [
    "Write a short poem about {s}.",
    "Write a haiku about {s}.",
    "Write a limerick about {s}.",
    "Write a sonnet about {s}.",
    "Write a short story about {s}.",
    "Write a very short story (under {n} words) in which {name} discovers something unexpected about {s}.",
    "Write a dialogue between {name} and {name2} about {s}.",
    "Write a catchy slogan for a campaign about {s}.",
    "Write five slogans for a poster about {s}.",
    "Write a letter from {name} to an old friend about {s}.",
    "Write a diary entry by {job} who spends a whole day thinking about {s}.",
    "Write the chorus of a song about {s}.",
    "Write a fable with a moral about {s}.",
    "Write a riddle whose answer is {s}.",
    "Write a short speech for a celebration of {s}.",
    "Write a bedtime story for a child about {s}.",
    "Write a product description for a gadget inspired by {s}.",
    "Write a rhyming couplet about {s}.",
    "Write a scene for a play in which {name} explains {s} to a stranger on a train.",
    "Write a joke about {s}.",
    "Write the opening paragraph of a mystery novel involving {s}.",
    "Write an ode to {s}.",
    "Write a postcard from {name}, who is on holiday and keeps noticing {s}.",
    "Write a news report from the year 2100 about {s}.",
]
CREATIVE_CONSTRAINTS = [
    "Set it in {city}.",
    "Mention the colour {colour}.",
    "Keep it under {n} words.",
    "Use at least one metaphor.",
    "Make it funny.",
    "Make it sad but hopeful.",
    "Write it from the point of view of {thing}.",
    "End with a surprising twist.",
    "Use simple words a child would understand.",
    "Give it a title.",
    "Write it in the second person.",
    "Use exactly {k} lines.",
    "Include a character who is {job}.",
    "Do not use any rhymes.",
    "Make the tone formal and old-fashioned.",
]
CREATIVE_WEIGHTS = {
    "topic": 1.0,
    "thing": 2.0,
    "place": 1.5,
    "occupation": 0.7,
    "concept": 1.0,
    "language": 0.3,
    "proglang": 0.3,
    "python": 0.3,
}
MORE_NAMES = [
    "Amara",
    "Bilal",
    "Chen",
    "Daria",
    "Emeka",
    "Freya",
    "Gustavo",
    "Hana",
    "Ivan",
    "Jamila",
    "Kofi",
    "Leila",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sami",
    "Tomoko",
    "Uma",
    "Viktor",
    "Wen",
    "Yara",
    "Zeynep",
]
PEOPLE = NAMES + MORE_NAMES


def _creative(rng: random.Random, held: bool) -> tuple[Request, str]:
    subject = _pick_subject(rng, held, CREATIVE_WEIGHTS)
    name, name2 = rng.sample(PEOPLE, 2)
    slots = {
        "s": subject.name,
        "n": rng.choice([50, 80, 100, 150, 200, 300]),
        "k": rng.choice([4, 6, 8, 10, 12]),
        "name": name,
        "name2": name2,
        "job": _pick(rng, occupation_subjects, held).name if split(occupation_subjects, held) else "a teacher",
        "city": _pick(rng, place_subjects, held).name if split(place_subjects, held) else "a small town",
        "thing": _pick(rng, thing_subjects, held).name if split(thing_subjects, held) else "a cat",
        "colour": rng.choice(colours()),
    }
    constraints = [c for c in CREATIVE_CONSTRAINTS if subject.category != "place" or "{city}" not in c]
    parts = [rng.choice(CREATIVE_FORMS)] + rng.sample(constraints, rng.choice([0, 1, 1, 2]))
    return Request("creative", " ".join(parts).format(**slots)), subject.key


# ----------------------------------------------------------------------------- kinds: rewriting

REWRITES = [
    "Rewrite the following text in a more formal tone.",
    "Rewrite this so that a twelve-year-old can understand it.",
    "Shorten this text to about {n} words.",
    "Fix the spelling and grammar mistakes in the text below.",
    "Turn the following text into a bulleted list of its main points.",
    "Paraphrase this paragraph without changing its meaning.",
    "Rewrite this as a friendly email to a colleague.",
    "Make this paragraph more concise.",
    "Rewrite the text in plain English, avoiding jargon.",
    "Split this into shorter, simpler sentences.",
    "Rewrite this text as a short FAQ with two questions and answers.",
    "Make this text sound more enthusiastic.",
    "Edit this paragraph for clarity and flow.",
    "Rewrite the following in a casual, conversational style.",
    "Give this paragraph a title, and rewrite its first sentence to be more engaging.",
    "Rewrite this text in the active voice.",
    "Rewrite this paragraph for a company newsletter.",
    "Rewrite this text as a tweet of at most 280 characters.",
    "Improve the wording of this text, then list the changes you made.",
    "Rewrite this in British English spelling.",
]
TYPO_FIX = REWRITES[3]


def _with_typos(rng: random.Random, text: str, count: int = 4) -> str:
    """The text with a few letters swapped in some long words (for the proof-reading request)."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    for i in rng.sample(candidates, min(count, len(candidates))):
        w, j = words[i], rng.randrange(1, len(words[i]) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def _rewrite(rng: random.Random, held: bool) -> tuple[Request, str]:
    passage = _pick_passage(rng, brief_passages, held)
    instruction = rng.choice(REWRITES)
    text = _with_typos(rng, passage.text) if instruction == TYPO_FIX else passage.text
    instruction = instruction.format(n=max(15, len(passage.text.split()) // rng.choice([2, 3])))
    return Request("rewrite", _frame(rng, instruction, text, rng.choice(["Text", "Paragraph", "Passage"]))), passage.key


# ----------------------------------------------------------------------------- kinds: translation

TO_LANGUAGE = [
    "Translate into {lang}: {s}",
    'How would you say "{s}" in {lang}?',
    "Translate the following sentence from English to {lang}.\n\nEnglish: {s}\n{lang}:",
    "Please translate this into {lang}, keeping technical terms as they are:\n\n{s}",
    "Can you put this into {lang} for me? {s}",
    "Give a {lang} translation of the sentence below, then explain one word choice.\n\n{s}",
    "English: {s}\n{lang}:",
    "I need this sentence in {lang} for a user manual: {s}",
    "Translate to {lang} (formal register):\n{s}",
]
TO_ENGLISH = [
    "Translate this {lang} sentence into English: {s}",
    'What does "{s}" mean in English?',
    "{lang}: {s}\nEnglish:",
    "Please translate from {lang} to English:\n\n{s}",
    "Can you tell me what this {lang} message says? {s}",
]


def _translation(rng: random.Random, held: bool) -> tuple[Request, str]:
    if rng.random() < 0.3 and split(catalogue_sentences, held):
        sentence = _pick(rng, catalogue_sentences, held)
        text = rng.choice(TO_ENGLISH).format(lang=sentence.language, s=sentence.text)
    else:
        sentence = _pick(rng, english_sentences, held)
        text = rng.choice(TO_LANGUAGE).format(lang=rng.choice(list(LANGUAGES)), s=sentence.text)
    return Request("translation", text), sentence.key


# ----------------------------------------------------------------------------- kinds: arithmetic

ITEMS = ["apples", "notebooks", "pencils", "tickets", "oranges", "books", "stamps", "candles", "plates", "T-shirts"]
CURRENCY_SIGNS = ["$", "€", "£"]
UNITS = [  # (from, to, factor): value in `to` = value in `from` * factor
    ("kilometres", "miles", 0.621371),
    ("miles", "kilometres", 1.609344),
    ("kilograms", "pounds", 2.20462),
    ("pounds", "kilograms", 0.453592),
    ("litres", "US gallons", 0.264172),
    ("inches", "centimetres", 2.54),
    ("feet", "metres", 0.3048),
    ("hours", "minutes", 60),
    ("days", "hours", 24),
    ("metres", "centimetres", 100),
    ("ounces", "grams", 28.3495),
    ("square metres", "square feet", 10.7639),
]
ARITHMETIC_OPENINGS = ["", "", "Solve: ", "Quick maths question: ", "Can you help with this? ", "Homework question: "]
ARITHMETIC_ENDINGS = ["", "", " Show your steps.", " Give just the answer.", " Explain your reasoning briefly."]


def _sum_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b, c = rng.randint(2, 9999), rng.randint(2, 9999), rng.randint(2, 999)
    templates = ["What is {a} + {b}?", "Add {a} and {b}.", "Compute the sum of {a}, {b} and {c}.", "What is {a} - {c}?"]
    i = rng.randrange(len(templates))
    return templates[i].format(a=a, b=b, c=c), (i, a, b, c)


def _product_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.randint(2, 999), rng.randint(2, 99)
    templates = [
        "What is {a} times {b}?",
        "Calculate {a} × {b}.",
        "Multiply {a} by {b}.",
        "What is {p} divided by {b}?",
    ]
    i = rng.randrange(len(templates))
    return templates[i].format(a=a, b=b, p=a * b), (i, a, b)


def _division_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.randint(50, 9999), rng.randint(3, 40)
    return f"What is {a} divided by {b}? Give the quotient and the remainder.", (a, b)


def _percentage_problem(rng: random.Random) -> tuple[str, tuple]:
    p, n, m = rng.choice([5, 10, 12, 15, 20, 25, 30, 40, 60, 75]), rng.randint(20, 2000), rng.randint(20, 2000)
    templates = [
        "What is {p}% of {n}?",
        "{n} is what percent of {t}?",
        "A price rises from {n} to {m}. What is the percentage change?",
        "A jacket costs {cur}{n}. It is on sale for {p}% off. What is the sale price?",
        "After a {p}% increase, a salary is {cur}{n}. What was it before?",
    ]
    i = rng.randrange(len(templates))
    cur = rng.choice(CURRENCY_SIGNS)
    return templates[i].format(p=p, n=n, m=m, t=n + m, cur=cur), (i, p, n, m, cur)


def _conversion_problem(rng: random.Random) -> tuple[str, tuple]:
    if rng.random() < 0.25:
        t = rng.randint(-30, 110)
        pair = rng.choice([("degrees Celsius", "degrees Fahrenheit"), ("degrees Fahrenheit", "degrees Celsius")])
        return f"Convert {t} {pair[0]} to {pair[1]}.", (t, pair)
    src, dst, _ = rng.choice(UNITS)
    x = rng.choice([rng.randint(1, 500), round(rng.uniform(0.5, 100), 1)])
    templates = ["Convert {x} {a} to {b}.", "How many {b} are in {x} {a}?", "{x} {a} is how many {b}?"]
    i = rng.randrange(len(templates))
    return templates[i].format(x=x, a=src, b=dst), (i, x, src, dst)


def _age_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.sample(PEOPLE, 2)
    k, young, d, y = rng.randint(2, 5), rng.randint(3, 15), rng.randint(2, 30), rng.randint(2, 20)
    templates = [
        "{a} is {k} times as old as {b}. {b} is {young} years old. How old will {a} be in {y} years?",
        "{a} is {d} years older than {b}. In {y} years, {b} will be {young_later}. How old is {a} now?",
        "The ages of {a} and {b} add up to {total}. {a} is {d} years older than {b}. How old is each of them?",
        "{a} was born when {b} was {d}. {b} is now {b_now}. How old is {a}?",
    ]
    i = rng.randrange(len(templates))
    slots = dict(a=a, b=b, k=k, young=young, d=d, y=y, young_later=young + y, total=2 * young + d, b_now=young + d)
    return templates[i].format(**slots), (i, a, b, k, young, d, y)


def _money_problem(rng: random.Random) -> tuple[str, tuple]:
    name, item, cur = rng.choice(PEOPLE), rng.choice(ITEMS), rng.choice(CURRENCY_SIGNS)
    n, price, note = rng.randint(2, 12), rng.choice([0.5, 1.25, 2, 3.5, 4.75, 6, 8.2, 12]), rng.choice([20, 50, 100])
    wage, hours, weeks, tip = rng.randint(9, 45), rng.randint(10, 40), rng.randint(2, 8), rng.choice([10, 15, 18, 20])
    templates = [
        "{name} buys {n} {item} at {cur}{price:.2f} each and pays with a {cur}{note} note. How much change is left?",
        "{name} earns {cur}{wage} per hour and works {hours} hours a week. How much is that over {weeks} weeks?",
        "A meal costs {cur}{meal}. If {name} leaves a {tip}% tip, what is the total?",
        "{n} friends split a bill of {cur}{meal} equally. How much does each pay?",
        "{item_cap} cost {cur}{price:.2f} each. How many can {name} buy with {cur}{note}?",
    ]
    i = rng.randrange(len(templates))
    meal = round(price * n * 4 + wage, 2)
    slots = dict(name=name, n=n, item=item, item_cap=_cap(item), cur=cur, price=price, note=note, wage=wage)
    slots.update(hours=hours, weeks=weeks, tip=tip, meal=meal)
    return templates[i].format(**slots), (i, name, item, cur, n, price, note, wage, hours, weeks, tip)


def _rate_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.sample(PEOPLE, 2)
    d, h, v = rng.randint(20, 900), rng.randint(2, 12), rng.randint(30, 130)
    x, y, m = rng.randint(2, 12), rng.randint(2, 12), rng.randint(10, 90)
    templates = [
        "A train travels {d} km in {h} hours. What is its average speed?",
        "A car drives at {v} km/h for {h} hours. How far does it go?",
        "{a} can paint a fence in {x} hours and {b} can paint it in {y} hours. How long if they work together?",
        "A tap fills a {d}-litre tank at {x} litres per minute. How long until the tank is full?",
        "{a} reads {m} pages an hour. How long will a {d}-page book take?",
        "A cyclist rides {d} km at {v} km/h. How many minutes does the ride take?",
    ]
    i = rng.randrange(len(templates))
    return templates[i].format(a=a, b=b, d=d, h=h, v=v, x=x, y=y, m=m), (i, a, b, d, h, v, x, y, m)


def _average_problem(rng: random.Random) -> tuple[str, tuple]:
    name = rng.choice(PEOPLE)
    scores = [rng.randint(40, 100) for _ in range(rng.randint(3, 6))]
    target = rng.randint(60, 95)
    listed = ", ".join(map(str, scores))
    templates = [
        "What is the average of {l}?",
        "{name} scored {l} on tests. What score on the next test gives an average of {t}?",
        "Find the mean and the median of {l}.",
    ]
    i = rng.randrange(len(templates))
    return templates[i].format(l=listed, name=name, t=target), (i, name, *scores, target)


def _fraction_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    n = rng.randint(10, 400)
    templates = [
        "What is {a}/{b} + {c}/{d}? Simplify the answer.",
        "What is {a}/{b} of {n}?",
        "Which is larger, {a}/{b} or {c}/{d}?",
        "Evaluate {n} + {a} × {c} - {d}.",
        "What is {a} squared plus {c} squared?",
    ]
    i = rng.randrange(len(templates))
    return templates[i].format(a=a, b=b, c=c, d=d, n=n), (i, a, b, c, d, n)


def _time_problem(rng: random.Random) -> tuple[str, tuple]:
    h, m, d = rng.randint(6, 20), rng.choice([0, 10, 15, 20, 30, 45, 50]), rng.randint(15, 300)
    p, r, t = rng.choice([500, 1000, 2500, 8000]), rng.choice([2, 3, 4.5, 5, 7]), rng.randint(2, 10)
    people, grams, more = rng.randint(2, 6), rng.choice([150, 200, 250, 400]), rng.randint(7, 20)
    templates = [
        "A meeting starts at {h}:{m:02d} and lasts {d} minutes. When does it end?",
        "If you invest {p} at {r}% simple interest a year, how much interest do you earn in {t} years?",
        "A recipe for {people} people needs {grams} grams of flour. How much flour is needed for {more} people?",
        "A film starts at {h}:{m:02d} and ends {d} minutes later. What time is it over?",
    ]
    i = rng.randrange(len(templates))
    return templates[i].format(h=h, m=m, d=d, p=p, r=r, t=t, people=people, grams=grams, more=more), (
        i,
        h,
        m,
        d,
        p,
        r,
        t,
    )


ARITHMETIC_PROBLEMS = (
    _sum_problem,
    _product_problem,
    _division_problem,
    _percentage_problem,
    _conversion_problem,
    _age_problem,
    _money_problem,
    _rate_problem,
    _average_problem,
    _fraction_problem,
    _time_problem,
)


def _arithmetic(rng: random.Random, held: bool) -> tuple[Request, str]:
    # the subject is the problem itself (its numbers and names): drawn again until it falls on this side
    for _ in range(200):
        problem = rng.choice(ARITHMETIC_PROBLEMS)
        text, numbers = problem(rng)
        key = f"{problem.__name__}:{numbers}"
        if held_out(key) == held:
            break
    else:
        raise RuntimeError("no arithmetic problem fell on this side of the split")
    text = _dress(rng, text, ARITHMETIC_OPENINGS, ARITHMETIC_ENDINGS)
    return Request("arithmetic", text), key


# ----------------------------------------------------------------------------- kinds: questions on a passage

PHRASE_QUESTIONS = [
    "According to the passage, what is {x}?",
    "What does the passage say about {x}?",
    "Quote the sentence of the passage that mentions {x}.",
    "Why does the passage mention {x}?",
    "Based only on the passage, explain the role of {x}.",
    "Does the passage mention {y}? Answer yes or no, then explain.",
]
LIST_CATEGORIES = [
    "proper noun",
    "number",
    "technical term",
    "person or organisation",
    "condition or requirement",
    "action the reader is asked to take",
    "noun phrase beginning with 'the'",
]
PASSAGE_QUESTIONS = [
    "List every {cat} mentioned in the passage.",
    "What is the main idea of the passage?",
    "Give the passage a short title.",
    'True, false or not stated, according to the passage: "{claim}"',
    "Which sentence of the passage is the most important, and why?",
    "Write two questions that can be answered from the passage, with their answers.",
    "What is the tone of the passage?",
    "Extract the key terms of the passage as a comma-separated list.",
    "Who is the passage written for? Explain.",
    "What question does the passage leave unanswered?",
]


def _passage_qa(rng: random.Random, held: bool) -> tuple[Request, str]:
    passage = _pick_passage(rng, short_passages, held)
    phrases = noun_phrases(passage.text)
    if phrases and rng.random() < 0.55:
        other = _pick_passage(rng, short_passages, held)
        candidates = phrases + (noun_phrases(other.text)[:3] if other.key != passage.key else [])
        telling = [p for p in phrases if len(p.split()) >= 3] or phrases  # "the probability mass function"
        question = rng.choice(PHRASE_QUESTIONS).format(x=rng.choice(telling), y=rng.choice(candidates))
    else:
        other = _pick_passage(rng, short_passages, held)
        claim = rng.choice(_sentences(rng.choice([passage, other]).text.replace("\n\n", " ")))
        question = rng.choice(PASSAGE_QUESTIONS).format(cat=rng.choice(LIST_CATEGORIES), claim=claim)
    return Request("passage_qa", _frame(rng, question, passage.text, "Passage")), passage.key


# ----------------------------------------------------------------------------- kinds: summaries

SHORT_SUMMARIES = [
    "Summarize the following text in one sentence.",
    "Give three bullet points summarizing the passage below.",
    "Write a headline for this text.",
    "TL;DR:",
    "What's the gist of this? Keep it under {n} words.",
    "Summarize this for a busy executive.",
    "Write a one-paragraph abstract of the following.",
    "Explain the main point of this text to a beginner in two sentences.",
    "Condense the text below into a single tweet.",
    "Write a short summary, then name one question the text leaves open.",
    "Summarize the text in {n} words or fewer.",
    "In plain language, what is this text saying?",
]
LONG_SUMMARIES = SHORT_SUMMARIES + [
    "Summarize the following document in a paragraph of about {n} words.",
    "Give five bullet points covering the main points of this document.",
    "Write an executive summary of the text below: a headline, then three bullet points.",
    "Outline the structure of this document, one line per part.",
    "Summarize each paragraph of the text in one sentence.",
    "What are the three most important things this document says?",
]


def _summarise(rng: random.Random, held: bool, kind: str, pool: Callable[[], tuple], instructions: list[str]):
    passage = _pick_passage(rng, pool, held)
    if rng.random() < 0.1:
        # the news task's wording, over text that is not news
        return Request(kind, summary_request(passage.text)), passage.key
    instruction = rng.choice(instructions).format(n=rng.choice([15, 20, 30, 50, 80, 100]))
    return Request(
        kind, _frame(rng, instruction, passage.text, rng.choice(["Text", "Document", "Article"]))
    ), passage.key


def _summary_short(rng: random.Random, held: bool) -> tuple[Request, str]:
    return _summarise(rng, held, "summary_short", short_passages, SHORT_SUMMARIES)


def _summary_long(rng: random.Random, held: bool) -> tuple[Request, str]:
    return _summarise(rng, held, "summary_long", long_passages, LONG_SUMMARIES)


# ----------------------------------------------------------------------------- kinds: classification

PRODUCTS = [
    "headphones",
    "blender",
    "backpack",
    "phone case",
    "desk lamp",
    "running shoes",
    "coffee grinder",
    "e-reader",
    "umbrella",
    "office chair",
    "water bottle",
    "keyboard",
    "tent",
    "winter jacket",
    "board game",
    "vacuum cleaner",
    "smartwatch",
    "frying pan",
    "suitcase",
    "printer",
    "hotel room",
    "pizza place",
    "bike helmet",
    "language app",
    "train journey",
]
GOOD = [
    "works perfectly",
    "exceeded my expectations",
    "is well made and sturdy",
    "was worth every penny",
    "arrived early and well packed",
    "is comfortable to use all day",
    "has a beautiful design",
]
BAD = [
    "stopped working after a week",
    "is cheaply made",
    "arrived late and damaged",
    "was a complete waste of money",
    "is uncomfortable and too loud",
    "does not match the description",
    "broke the first time I used it",
]
MEH = ["is fine for the price", "does what it says, nothing more", "is okay but nothing special", "is average"]
INFORMAL = [
    "hey, can u send me the {x} thing by tonight? thx",
    "lol that thing about {x} was so weird, we gotta talk",
    "omg i totally forgot about {x}, sorry!!",
    "yo, you still up for the {x} stuff later or nah?",
    "ugh, {x} again... not my day tbh",
    "cool cool, i'll sort out {x} tmrw",
]
SENTIMENT_LABELS = ["positive, negative or neutral", "positive or negative", "1 to 5 stars"]
CLASSIFY_FRAMES = [
    "Classify the {what} of the following text as {labels}.\n\nText: {t}",
    "Text: {t}\n\nWhat is its {what}? Choose one of: {labels}. Answer with the label only.",
    "Which {what} fits this text best ({labels})?\n\n{t}",
    '"{t}"\n\nLabel the {what} of the text above. Options: {labels}.',
    "Decide the {what} of the text below. Possible labels: {labels}. Explain in one sentence.\n\n{t}",
]


def _review(rng: random.Random, held: bool) -> tuple[str, str]:
    product = rng.choice([p for p in PRODUCTS if held_out(f"review:{p}") == held])  # the subject is the product
    mood = rng.choice([GOOD, BAD, MEH])
    parts = [f"The {product} {rng.choice(mood)}."]
    if rng.random() < 0.6:
        parts.append(f"It also {rng.choice(rng.choice([GOOD, BAD, MEH]))}.")
    if rng.random() < 0.4:
        parts.append(rng.choice(["Would buy again.", "Not recommended.", "Three stars.", "I returned it.", "Solid."]))
    return " ".join(parts), f"review:{product}"


def _classify(rng: random.Random, held: bool) -> tuple[Request, str]:
    task = rng.choice(["sentiment", "topic", "formality", "question", "language"])
    if task == "sentiment":
        text, key = _review(rng, held)
        what, labels = "sentiment", rng.choice(SENTIMENT_LABELS)
    elif task == "topic":
        passage = _pick_passage(rng, brief_passages, held)
        domains = sorted(({d.domain for d in documents()} | {v[1] for v in PACKAGES.values()}) - {passage.domain})
        options = rng.sample(domains, min(3, len(domains))) + [passage.domain]
        rng.shuffle(options)
        text, key, what, labels = passage.text, passage.key, "topic", ", ".join(options)
    elif task == "formality":
        if rng.random() < 0.5:
            subject = _pick_subject(rng, held, {"thing": 1.0, "topic": 1.0})
            bare = subject.key.removeprefix("the ")  # "red apple", "internet": the templates give the article
            text, key = rng.choice(INFORMAL).format(x=bare), subject.key
        else:
            sentence = _pick(rng, prose_sentences, held)
            text, key = sentence.text, sentence.key
        what, labels = "register", "formal or informal"
    elif task == "question":
        if rng.random() < 0.5:  # prose has few questions: half the texts are questions of the kinds above
            request, key = rng.choice([_open_question, _howto])(rng, held)
            text = request.user
        else:
            sentence = _pick(rng, prose_sentences, held)
            text, key = sentence.text, sentence.key
        what, labels = "type", "question or statement"
    else:
        pools = [english_sentences] + ([catalogue_sentences] * 3 if split(catalogue_sentences, held) else [])
        sentence = _pick(rng, rng.choice(pools), held)
        text, key, what = sentence.text, sentence.key, "language"
        labels = ", ".join(["English"] + list(LANGUAGES))
    return Request("classify", rng.choice(CLASSIFY_FRAMES).format(what=what, labels=labels, t=text)), key


# ----------------------------------------------------------------------------- kinds: code

CODE_TASKS = [
    "Explain what this Python function does, line by line.",
    "Write pytest unit tests for the following function.",
    "Add type hints to this function and return the updated code.",
    "Refactor this function to make it easier to read, keeping its behaviour.",
    "What is the time complexity of this function? Explain.",
    "Rewrite this function in {lang}.",
    "Review this code and suggest improvements.",
    "Give three edge cases this function may not handle well, and how to test them.",
    "Summarize what this function does in one sentence, then describe its inputs and outputs.",
    "Add comments to this function explaining each step.",
]
OTHER_LANGUAGES = ["JavaScript", "TypeScript", "Go", "Rust", "Java", "C#", "Ruby", "Kotlin"]
BUGS = [(" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" == ", " != "), (" + 1", " - 1"), (" and ", " or ")]


def _code_block(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def _without_docstring(source: str) -> str | None:
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node):
        return None
    lines = source.splitlines()
    doc = node.body[0]
    return "\n".join(lines[: doc.lineno - 1] + lines[doc.end_lineno :])


def _with_bug(rng: random.Random, source: str) -> str | None:
    """The function with one comparison or offset changed after its docstring, or None if it has none to change."""
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    body_line = node.body[0].end_lineno if ast.get_docstring(node) else node.lineno
    body_at = sum(len(line) + 1 for line in source.splitlines()[:body_line])
    places = [(i, old, new) for old, new in BUGS for i in _find_all(source, old) if i >= body_at]
    if not places:
        return None
    i, old, new = rng.choice(places)
    return source[:i] + new + source[i + len(old) :]


def _find_all(text: str, part: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(part), text)]


def _function_doc(fn: Function) -> str:
    """The prose of a function's docstring, on one line ('' if it has none)."""
    try:
        node = ast.parse(fn.source).body[0]
    except (SyntaxError, IndexError):
        return ""
    return _squash(docstring_text(ast.get_docstring(node) or ""))


def _code(rng: random.Random, held: bool) -> tuple[Request, str]:
    fn = _pick(rng, code_functions, held)
    short_name = fn.name.rsplit(".", 1)[-1]
    choice = rng.random()
    if choice < 0.15:
        text = code_request(fn.prompt)  # the HumanEval task's wording, over a real function
    elif choice < 0.27 and (bare := _without_docstring(fn.source)):
        style = rng.choice(["", " in the NumPy docstring style", " in the Google docstring style"])
        text = f"Write a docstring{style} for this function:\n\n{_code_block(bare)}"
    elif choice < 0.39 and (buggy := _with_bug(rng, fn.source)):
        text = f"This function has a bug. Find it and fix it.\n\n{_code_block(buggy)}"
    elif choice < 0.47:
        doc = _function_doc(fn)
        goal = _fit(doc, 60, 400) or doc[:400]
        text = f"Write a Python function named {short_name} that does the following: {goal}" if goal else ""
        text = text or f"Write a Python function named {short_name}."
    else:
        task = rng.choice(CODE_TASKS).format(lang=rng.choice(OTHER_LANGUAGES))
        text = _frame(rng, task, _code_block(fn.source), "Code", block=True)
    return Request("code", text), fn.key


# ----------------------------------------------------------------------------- kinds: SQL

NUMERIC_COLUMNS = frozenset(
    "salary hire_year year price amount age gpa duration release_year rating stock goals beds founded credits "
    "horsepower attendance stars visitors opened tonnage built".split()
)
REAL_COLUMNS = frozenset({"salary", "price", "amount", "gpa", "rating"})
NUMBER_QUESTIONS = [
    "Find all {table} whose {num} is between {a} and {b}.",
    "What is the total {num} for each {c1}?",
    "Show the {k} {table} with the highest {num}.",
    "List the {c1} values that appear more than {k} times.",
    "What is the average {num} for each {c1}, from highest to lowest?",
    "How many {table} have a {num} below {a}?",
    "Show every column of the {table} with the lowest {num}.",
    "Which {c1} values have an average {num} above {a}?",
]
SQL_FRAMES = [
    "{schema}\n\nUsing the SQLite tables above, write a SELECT query for: {q}",
    "Given the SQLite schema:\n{schema}\nWrite an SQL query to answer: {q}",
    "### Schema\n{schema}\n\n### Question\n{q}\n\n### SQL query",
    "I have a database with this structure:\n\n{schema}\n\n{q} What SQL should I run?",
    "{schema}\n\nWrite a SQL query for the following request and explain it in one sentence: {q}",
    "Here is my schema:\n{schema}\nQuestion: {q}\nReturn only the SQL, in a ```sql code block.",
]


def _column_type(col: str) -> str:
    if col == "id" or col.endswith("_id") or (col in NUMERIC_COLUMNS and col not in REAL_COLUMNS):
        return "INTEGER"
    return "REAL" if col in REAL_COLUMNS else "TEXT"


def _schema(rng: random.Random, tables: list[tuple[str, list[str]]]) -> str:
    """The tables in one of several formats: CREATE TABLE (`sources.schema_text`), compact, typed list, markdown."""
    style = rng.randrange(4)
    if style == 0:
        return schema_text(*tables[0], tables[1] if len(tables) > 1 else None)
    if style == 1:
        return "\n".join(f"{t}({', '.join(cols)})" for t, cols in tables)
    if style == 2:
        return "\n\n".join(f"Table {t}:\n" + "\n".join(f"- {c} {_column_type(c)}" for c in cols) for t, cols in tables)
    return "\n\n".join(
        f"Table `{t}`\n\n| column | type |\n|---|---|\n" + "\n".join(f"| {c} | {_column_type(c)} |" for c in cols)
        for t, cols in tables
    )


@lru_cache(maxsize=1)
def sql_tables() -> tuple[Subject, ...]:
    return tuple(Subject(t, t, "table") for t, _ in SCHEMAS)


def _sql(rng: random.Random, held: bool) -> tuple[Request, str]:
    table = _pick(rng, sql_tables, held).name
    cols = dict(SCHEMAS)[table]
    # a text column to group or list by, a numeric one to compare, sum or sort by (every table has both)
    c1 = rng.choice([c for c in cols[1:] if c not in NUMERIC_COLUMNS and not c.endswith("_id")] or cols[1:])
    c2 = rng.choice([c for c in cols if c in NUMERIC_COLUMNS] or cols[1:])
    slots = dict(table=table, c1=c1, c2=c2, num=c2, k=rng.randint(2, 10))
    slots.update(a=rng.randint(1, 60), b=rng.randint(61, 5000))
    question = rng.choice(SQL_QUESTIONS + MORE_SQL_QUESTIONS + NUMBER_QUESTIONS).format(**slots)
    tables = [(table, cols)]
    if rng.random() < 0.4:
        other = _pick(rng, sql_tables, held).name
        tables += [(other, dict(SCHEMAS)[other])] if other != table else []
    schema = _schema(rng, tables)
    if rng.random() < 0.3:
        return Request("sql", sql_request(schema, question)), table  # the Spider task's wording
    return Request("sql", rng.choice(SQL_FRAMES).format(schema=schema, q=question)), table


# ----------------------------------------------------------------------------- kinds: multi-turn

FOLLOW_UPS = [
    "Can you make it shorter?",
    "Give an example.",
    "Now explain it to a child.",
    "Translate your answer into French.",
    "Translate that into German, please.",
    "Turn that into three bullet points.",
    "What are the main limitations?",
    "Summarize that in one sentence.",
    "Why does that matter?",
    "Can you rephrase that more formally?",
    "What is a common mistake people make with this?",
    "Write a quiz question based on your answer.",
    "Can you go into more detail?",
    "I didn't understand the second part. Can you explain it differently?",
    "Is there anything you left out?",
    "Can you give me an analogy?",
    "How would I explain this to my manager?",
    "Thanks! What should I read next to learn more?",
]
CODE_FOLLOW_UPS = [
    "Can you add type hints?",
    "Write a test for it.",
    "Explain how it works.",
    "Can you make it faster?",
    "What happens if the input is empty?",
    "Rewrite it without any imports.",
    "Can you add comments?",
    "Convert it to JavaScript.",
]
TRANSLATION_FOLLOW_UPS = [
    "Now translate it into {lang}.",
    "Can you make the translation more formal?",
    "Explain the grammar of your translation.",
    "Which word was the hardest to translate?",
    "Give me a more natural-sounding version.",
]
API_OPENERS = ["What does {s} do?", "Can you tell me what `{s}` is for?", "What is {s} in {c}?", "Explain {s} briefly."]
PASSAGE_OPENERS = [
    "Can you explain {x}?",
    "What is {x}?",
    "Tell me about {x}.",
    "I keep reading about {x}. What is it?",
]


def _multi_turn(rng: random.Random, held: bool) -> tuple[Request, str]:
    source = rng.choice(["api", "api", "passage", "passage", "code", "translation"])
    follow_ups = FOLLOW_UPS
    if source == "api" and split(api_answers, held):
        api = _pick(rng, api_answers, held)
        opener, answer, key = rng.choice(API_OPENERS).format(s=api.name, c=api.package), api.prose, api.key
        follow_ups = FOLLOW_UPS + [f"How is it different from the rest of {api.package}?", "Show me a short example."]
    elif source == "code":
        fn = _pick(rng, code_functions, held)
        doc = _function_doc(fn) or fn.name
        opener = f"Write a Python function named {fn.name.rsplit('.', 1)[-1]}: {_fit(doc, 40, 300) or doc[:300]}"
        answer, key, follow_ups = _code_block(fn.source), fn.key, CODE_FOLLOW_UPS
    elif source == "translation" and split(catalogue_sentences, held):
        sentence = _pick(rng, catalogue_sentences, held)
        opener, answer, key = f"Translate into {sentence.language}: {sentence.english}", sentence.text, sentence.key
        others = [lang for lang in LANGUAGES if lang != sentence.language]
        follow_ups = [f.format(lang=rng.choice(others)) for f in TRANSLATION_FOLLOW_UPS]
    else:
        passage = _pick_passage(rng, brief_passages, held)
        phrases = [p for p in noun_phrases(passage.text) if len(p.split()) >= 3]  # not "the systems"
        subject = rng.choice(phrases) if phrases else "this"
        opener = rng.choice(PASSAGE_OPENERS).format(x=subject) if phrases else "Can you explain this to me?"
        answer, key = passage.text, passage.key
        if phrases:  # follow-ups that name the subject of the exchange
            follow_ups = FOLLOW_UPS + [f"Can you give an example of {subject}?", f"Why is {subject} important?"]
    history = (("user", opener), ("assistant", answer))
    return Request("multi_turn", rng.choice(follow_ups), history=history), key


# ----------------------------------------------------------------------------- drawing

BUILDERS: dict[str, Callable[[random.Random, bool], tuple[Request, str]]] = {
    "open_question": _open_question,
    "explanation": _explanation,
    "howto": _howto,
    "creative": _creative,
    "rewrite": _rewrite,
    "translation": _translation,
    "arithmetic": _arithmetic,
    "passage_qa": _passage_qa,
    "summary_short": _summary_short,
    "summary_long": _summary_long,
    "classify": _classify,
    "code": _code,
    "sql": _sql,
    "multi_turn": _multi_turn,
}
KINDS = tuple(BUILDERS)


def conversation_text(request: Item) -> str:
    return "\n".join(m["content"] for m in messages(request))


def draw_with_key(kind: str, rng: random.Random, held: bool = False) -> tuple[Request, str]:
    """A request of `kind` and the key of its subject (``held_out(key) == held``)."""
    if kind not in BUILDERS:
        raise ValueError(f"unknown kind of request {kind!r}; valid: {', '.join(KINDS)}")
    for _ in range(50):
        request, key = BUILDERS[kind](rng, held)
        too_long = len(request.user) > MAX_CHARS or any(len(c) > MAX_CHARS for _, c in request.history)
        # a guard behind the pools' filtering: templates and secondary subjects can bring a topic in too
        if not too_long and (held or not mentions_held_out_topic(conversation_text(request))):
            return request, key
    raise RuntimeError(f"could not draw a {kind} request within the limits")


def draw_request(kind: str, rng: random.Random, held: bool = False) -> Request:
    """A request of `kind` over a training (or, with `held`, a held-out) subject; the target answers it."""
    return draw_with_key(kind, rng, held)[0]


def distinct_requests(n: int = 20000, seed: int = 0, held: bool = False) -> list[Request]:
    """`n` distinct requests (distinct conversations), the kinds taken in turn."""
    rng = random.Random(seed)
    seen: dict[tuple, Request] = {}
    for i in range(20 * n):
        if len(seen) >= n:
            break
        request = draw_request(KINDS[i % len(KINDS)], rng, held)
        seen.setdefault((request.history, request.user), request)
    if len(seen) < n:
        raise RuntimeError(f"only {len(seen)} distinct requests after {20 * n} draws")
    return list(seen.values())


def pool_sizes(held: bool = False) -> dict[str, tuple[int, int]]:
    """Per kind: (subjects on this side of the split, templates), the product bounding its distinct requests
    before the slots (audiences, constraints, numbers, follow-ups) multiply it further."""
    subjects = {c: len(split(pool, held)) for c, pool in SUBJECT_POOLS.items()}

    def total(weights: dict[str, float]) -> int:
        return sum(subjects[c] for c in weights)

    return {
        "open_question": (total(OPEN_QUESTION_WEIGHTS), sum(map(len, OPEN_QUESTIONS.values())) + len(COMPARISONS)),
        "explanation": (total(EXPLANATION_WEIGHTS), len(EXPLANATIONS) + len(OCCUPATION_EXPLANATIONS)),
        "howto": (total(HOWTO_WEIGHTS), sum(map(len, HOWTOS.values()))),
        "creative": (total(CREATIVE_WEIGHTS), len(CREATIVE_FORMS) * (1 + len(CREATIVE_CONSTRAINTS))),
        "rewrite": (len(split(brief_passages, held)), len(REWRITES)),
        "translation": (
            len(split(english_sentences, held)) + len(split(catalogue_sentences, held)),
            len(TO_LANGUAGE) * len(LANGUAGES) + len(TO_ENGLISH),
        ),
        "arithmetic": (len(ARITHMETIC_PROBLEMS), len(ARITHMETIC_OPENINGS) * len(ARITHMETIC_ENDINGS)),
        "passage_qa": (len(split(short_passages, held)), len(PHRASE_QUESTIONS) + len(PASSAGE_QUESTIONS)),
        "summary_short": (len(split(short_passages, held)), len(SHORT_SUMMARIES) + 1),
        "summary_long": (len(split(long_passages, held)), len(LONG_SUMMARIES) + 1),
        "classify": (
            len(split(brief_passages, held)) + len(split(prose_sentences, held)) + len(PRODUCTS),
            len(CLASSIFY_FRAMES) * 5,
        ),
        "code": (len(split(code_functions, held)), len(CODE_TASKS) + 4),
        "sql": (len(split(sql_tables, held)), len(SQL_QUESTIONS + MORE_SQL_QUESTIONS + NUMBER_QUESTIONS)),
        "multi_turn": (
            len(split(api_answers, held)) + len(split(brief_passages, held)) + len(split(code_functions, held)),
            len(FOLLOW_UPS),
        ),
    }
