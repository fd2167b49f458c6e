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

Each kind is declared once, in `REGISTRY`: the builder that draws it and the pools its requests are
drawn from, which `pool_sizes` counts. The templates, word lists and weights are data, one JSON file
per kind or group of shared tables under `mtad/assets/requests/` (`request_data`).

Where the text comes from (each source is optional: a missing one only shrinks its pools):

- prose and sentences (`installed_text`): Python's reference manual (``pydoc_data.topics``), package
  descriptions (``*.dist-info/METADATA``), licences (``/usr/share/common-licenses``,
  ``/usr/share/doc/*/copyright``), package READMEs and NEWS files under ``/usr/share/doc``, and docstrings;
- docstrings (`docstrings`) of public functions, classes and methods of the standard library and of
  installed packages (numpy, scipy, pandas, ...), read with ``ast`` (nothing is imported);
- translations (`installed_text`): gettext catalogues (``/usr/share/locale/<lang>/LC_MESSAGES/*.mo``),
  whose English messages come with their French, German, Spanish, Italian and Portuguese translations;
- general subjects (`subjects`): countries, regions, languages and currencies of the ISO code lists
  (``/usr/share/iso-codes/json``), cities of the time-zone database (``zoneinfo``), objects,
  animals and foods named by Unicode's pictographs (``unicodedata``), programming languages named
  by ``pygments``' lexers, colour names of matplotlib, Python's built-ins and standard modules,
  the chat task's topics (`mtad.tasks.prompts.TOPICS`), and a short list of occupations;
- arithmetic problems (`arithmetic`), their numbers drawn.

No evaluation set is read (MT-Bench, HumanEval, Spider, CNN/DailyMail, Spec-Bench). Subjects are split
1-in-5 by `mtad.split.held_out` on a stable key (`draw_with_key` returns it): a passage's first 80
characters (every paragraph is on the side of its own first 80 characters, and a passage or sentence
on its first paragraph's), a function's or a table's name, a subject's name (for a library function,
the concept or summary its docstring gives), a catalogue message's English text. ``held=False`` draws
only training subjects, ``held=True`` only held-out ones, and a subject falls on the same side in
every kind. Training requests never mention a held-out topic of the chat task.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import NamedTuple

from ...split import held_out
from ..prompts import SQL_QUESTIONS
from .arithmetic import ARITHMETIC_PROBLEMS, arithmetic_problem
from .code_requests import CODE_FORMS, code_block, code_text, sql_text
from .docstrings import api_answers, code_functions, function_doc
from .installed_text import (
    brief_passages,
    catalogue_sentences,
    documents,
    english_sentences,
    languages,
    long_passages,
    prose_sentences,
    short_passages,
)
from .prose import cap, dress, fit, frame, noun_phrases, sentences
from .request_data import at, size, table
from .sources import MORE_SQL_QUESTIONS, Item, summary_request
from .subjects import (
    SUBJECT_POOLS,
    colours,
    mentions_held_out_topic,
    occupation_subjects,
    other_subject,
    people,
    pick,
    pick_passage,
    pick_subject,
    place_subjects,
    split,
    sql_tables,
    subject_count,
    thing_subjects,
)

__all__ = [
    "KINDS",
    "MAX_CHARS",
    "REGISTRY",
    "SUBJECT_POOLS",
    "Kind",
    "Request",
    "brief_passages",
    "catalogue_sentences",
    "conversation_text",
    "distinct_requests",
    "draw_request",
    "draw_with_key",
    "long_passages",
    "messages",
    "noun_phrases",
    "pool_sizes",
    "short_passages",
    "split",
]

MAX_CHARS = 2500  # longest user message (and longest earlier turn)


@dataclass(frozen=True)
class Request(Item):
    """A user request; ``history`` holds the earlier messages of the conversation as (role, content)."""

    history: tuple[tuple[str, str], ...] = ()


def messages(item: Item) -> list[dict[str, str]]:
    """The conversation in `tokenizer.apply_chat_template`'s format: the earlier turns, then the request."""
    history = getattr(item, "history", ())
    return [{"role": role, "content": content} for role, content in history] + [{"role": "user", "content": item.user}]


def __getattr__(name: str) -> str:
    # TYPO_FIX, the proof-reading instruction (its passage gets typos), lives in the rewrite data,
    # which is read on first use rather than at import
    if name == "TYPO_FIX":
        return at("rewrite.typo_fix")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- kinds: questions, explanations


def _open_question(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("open_question")
    subject = pick_subject(rng, held, data["weights"])
    templates = data["templates"][subject.category]
    if rng.random() < 0.1 and subject.category not in ("api", "occupation"):
        templates = data["comparisons"]
    question = rng.choice(templates).format(s=subject.name, t=other_subject(rng, subject, held).name, c=subject.context)
    question = dress(rng, cap(question), at("phrasing.question_prefixes"), at("phrasing.question_suffixes"))
    return Request("open_question", question), subject.key


def _explanation(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("explanation")
    subject = pick_subject(rng, held, data["weights"])
    templates = data["occupation_templates"] if subject.category == "occupation" else data["templates"]
    name = f"{subject.name} in {subject.context}" if subject.category == "api" and rng.random() < 0.5 else subject.name
    text = rng.choice(templates).format(
        s=name, a=rng.choice(data["audiences"]), v=rng.choice(data["levels"]), me=rng.choice(data["self_descriptions"])
    )
    return Request("explanation", cap(text)), subject.key


def _howto(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("howto")
    subject = pick_subject(rng, held, data["weights"])
    # {n}: the bare name ("farmer" where {s} is "a farmer")
    text = rng.choice(data["templates"][subject.category]).format(
        s=subject.name, c=subject.context or "Python", n=subject.key
    )
    text = dress(rng, cap(text), at("phrasing.question_prefixes")[:4], data["suffixes"])
    return Request("howto", text), subject.key


# ----------------------------------------------------------------------------- kinds: creative writing, rewriting


def _name_or(rng: random.Random, pool: Callable[[], tuple], held: bool, fallback: str) -> str:
    """The name of a subject of `pool` on this side, or `fallback` where it has none."""
    return pick(rng, pool, held).name if split(pool, held) else fallback


def _creative(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("creative")
    subject = pick_subject(rng, held, data["weights"])
    name, name2 = rng.sample(people(), 2)
    fallbacks = data["fallbacks"]
    slots = {
        "s": subject.name,
        "n": rng.choice([50, 80, 100, 150, 200, 300]),
        "k": rng.choice([4, 6, 8, 10, 12]),
        "name": name,
        "name2": name2,
        "job": _name_or(rng, occupation_subjects, held, fallbacks["job"]),
        "city": _name_or(rng, place_subjects, held, fallbacks["city"]),
        "thing": _name_or(rng, thing_subjects, held, fallbacks["thing"]),
        "colour": rng.choice(colours()),
    }
    constraints = [c for c in data["constraints"] if subject.category != "place" or "{city}" not in c]
    parts = [rng.choice(data["forms"])] + rng.sample(constraints, rng.choice([0, 1, 1, 2]))
    return Request("creative", " ".join(parts).format(**slots)), subject.key


def _with_typos(rng: random.Random, text: str, count: int = 4) -> str:
    """The text with a few letters swapped in some long words (for the proof-reading request)."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    for i in rng.sample(candidates, min(count, len(candidates))):
        w, j = words[i], rng.randrange(1, len(words[i]) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def _rewrite(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("rewrite")
    passage = pick_passage(rng, brief_passages, held)
    instruction = rng.choice(data["instructions"])
    text = _with_typos(rng, passage.text) if instruction == data["typo_fix"] else passage.text
    instruction = instruction.format(n=max(15, len(passage.text.split()) // rng.choice([2, 3])))
    return Request("rewrite", frame(rng, instruction, text, rng.choice(data["labels"]))), passage.key


# ----------------------------------------------------------------------------- kinds: translation, arithmetic


def _translation(rng: random.Random, held: bool) -> tuple[Request, str]:
    if rng.random() < 0.3 and split(catalogue_sentences, held):
        sentence = pick(rng, catalogue_sentences, held)
        text = rng.choice(at("translation.to_english")).format(lang=sentence.language, s=sentence.text)
    else:
        sentence = pick(rng, english_sentences, held)
        text = rng.choice(at("translation.to_language")).format(lang=rng.choice(list(languages())), s=sentence.text)
    return Request("translation", text), sentence.key


def _arithmetic(rng: random.Random, held: bool) -> tuple[Request, str]:
    text, key = arithmetic_problem(rng, held)
    return Request("arithmetic", dress(rng, text, at("arithmetic.openings"), at("arithmetic.endings"))), key


# ----------------------------------------------------------------------------- kinds: passages (questions, summaries)


def _passage_qa(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("passage_qa")
    passage = pick_passage(rng, short_passages, held)
    phrases = noun_phrases(passage.text)
    if phrases and rng.random() < 0.55:
        other = pick_passage(rng, short_passages, held)
        candidates = phrases + (noun_phrases(other.text)[:3] if other.key != passage.key else [])
        telling = [p for p in phrases if len(p.split()) >= 3] or phrases  # "the probability mass function"
        question = rng.choice(data["phrase_questions"]).format(x=rng.choice(telling), y=rng.choice(candidates))
    else:
        other = pick_passage(rng, short_passages, held)
        claim = rng.choice(sentences(rng.choice([passage, other]).text.replace("\n\n", " ")))
        question = rng.choice(data["passage_questions"]).format(cat=rng.choice(data["list_categories"]), claim=claim)
    return Request("passage_qa", frame(rng, question, passage.text, "Passage")), passage.key


def _summarise(
    rng: random.Random, held: bool, kind: str, pool: Callable[[], tuple], instructions: tuple[str, ...]
) -> tuple[Request, str]:
    passage = pick_passage(rng, pool, held)
    if rng.random() < 0.1:
        # the news task's wording, over text that is not news
        return Request(kind, summary_request(passage.text)), passage.key
    instruction = rng.choice(instructions).format(n=rng.choice([15, 20, 30, 50, 80, 100]))
    label = rng.choice(at("summary.labels"))
    return Request(kind, frame(rng, instruction, passage.text, label)), passage.key


def _summary_short(rng: random.Random, held: bool) -> tuple[Request, str]:
    return _summarise(rng, held, "summary_short", short_passages, at("summary.any_length"))


def _summary_long(rng: random.Random, held: bool) -> tuple[Request, str]:
    instructions = at("summary.any_length") + at("summary.long_only")
    return _summarise(rng, held, "summary_long", long_passages, instructions)


# ----------------------------------------------------------------------------- kinds: classification
# each task gives (text, its subject's key, what is labelled, the labels)


def _review(rng: random.Random, held: bool) -> tuple[str, str]:
    data = table("classify")
    product = rng.choice([p for p in data["products"] if held_out(f"review:{p}") == held])  # the subject is the product
    moods = [data["good"], data["bad"], data["meh"]]
    parts = [f"The {product} {rng.choice(rng.choice(moods))}."]
    if rng.random() < 0.6:
        parts.append(f"It also {rng.choice(rng.choice(moods))}.")
    if rng.random() < 0.4:
        parts.append(rng.choice(data["review_endings"]))
    return " ".join(parts), f"review:{product}"


def _sentiment_text(rng: random.Random, held: bool) -> tuple[str, str, str, str]:
    text, key = _review(rng, held)
    return text, key, "sentiment", rng.choice(at("classify.sentiment_labels"))


def _topic_text(rng: random.Random, held: bool) -> tuple[str, str, str, str]:
    passage = pick_passage(rng, brief_passages, held)
    package_domains = {domain for _, domain in at("text_sources.packages").values()}
    domains = sorted(({d.domain for d in documents()} | package_domains) - {passage.domain})
    options = rng.sample(domains, min(3, len(domains))) + [passage.domain]
    rng.shuffle(options)
    return passage.text, passage.key, "topic", ", ".join(options)


def _register_text(rng: random.Random, held: bool) -> tuple[str, str, str, str]:
    if rng.random() < 0.5:
        subject = pick_subject(rng, held, at("classify.informal_subject_weights"))
        bare = subject.key.removeprefix("the ")  # "red apple", "internet": the templates give the article
        text, key = rng.choice(at("classify.informal")).format(x=bare), subject.key
    else:
        sentence = pick(rng, prose_sentences, held)
        text, key = sentence.text, sentence.key
    return text, key, "register", "formal or informal"


def _question_text(rng: random.Random, held: bool) -> tuple[str, str, str, str]:
    if rng.random() < 0.5:  # prose has few questions: half the texts are questions of the kinds above
        request, key = rng.choice([_open_question, _howto])(rng, held)
        text = request.user
    else:
        sentence = pick(rng, prose_sentences, held)
        text, key = sentence.text, sentence.key
    return text, key, "type", "question or statement"


def _language_text(rng: random.Random, held: bool) -> tuple[str, str, str, str]:
    pools = [english_sentences] + ([catalogue_sentences] * 3 if split(catalogue_sentences, held) else [])
    sentence = pick(rng, rng.choice(pools), held)
    return sentence.text, sentence.key, "language", ", ".join(["English"] + list(languages()))


CLASSIFY_TASKS = {
    "sentiment": _sentiment_text,
    "topic": _topic_text,
    "formality": _register_text,
    "question": _question_text,
    "language": _language_text,
}


def _classify(rng: random.Random, held: bool) -> tuple[Request, str]:
    task = rng.choice(list(CLASSIFY_TASKS))
    text, key, what, labels = CLASSIFY_TASKS[task](rng, held)
    return Request("classify", rng.choice(at("classify.frames")).format(what=what, labels=labels, t=text)), key


# ----------------------------------------------------------------------------- kinds: code, SQL, multi-turn


def _code(rng: random.Random, held: bool) -> tuple[Request, str]:
    text, key = code_text(rng, held)
    return Request("code", text), key


def _sql(rng: random.Random, held: bool) -> tuple[Request, str]:
    text, key = sql_text(rng, held)
    return Request("sql", text), key


def _multi_turn(rng: random.Random, held: bool) -> tuple[Request, str]:
    data = table("multi_turn")
    source = rng.choice(["api", "api", "passage", "passage", "code", "translation"])
    follow_ups = data["follow_ups"]
    if source == "api" and split(api_answers, held):
        api = pick(rng, api_answers, held)
        opener, answer, key = rng.choice(data["api_openers"]).format(s=api.name, c=api.package), api.prose, api.key
        follow_ups += tuple(f.format(package=api.package) for f in data["api_follow_ups"])
    elif source == "code":
        fn = pick(rng, code_functions, held)
        doc = function_doc(fn) or fn.name
        opener = data["code_opener"].format(name=fn.name.rsplit(".", 1)[-1], doc=fit(doc, 40, 300) or doc[:300])
        answer, key, follow_ups = code_block(fn.source), fn.key, data["code_follow_ups"]
    elif source == "translation" and split(catalogue_sentences, held):
        sentence = pick(rng, catalogue_sentences, held)
        opener = data["translation_opener"].format(lang=sentence.language, s=sentence.english)
        answer, key = sentence.text, sentence.key
        others = [lang for lang in languages() if lang != sentence.language]
        follow_ups = [f.format(lang=rng.choice(others)) for f in data["translation_follow_ups"]]
    else:
        passage = pick_passage(rng, brief_passages, held)
        phrases = [p for p in noun_phrases(passage.text) if len(p.split()) >= 3]  # not "the systems"
        subject = rng.choice(phrases) if phrases else "this"
        opener = rng.choice(data["passage_openers"]).format(x=subject) if phrases else data["bare_passage_opener"]
        answer, key = passage.text, passage.key
        if phrases:  # follow-ups that name the subject of the exchange
            follow_ups += tuple(f.format(x=subject) for f in data["subject_follow_ups"])
    history = (("user", opener), ("assistant", answer))
    return Request("multi_turn", rng.choice(follow_ups), history=history), key


# ----------------------------------------------------------------------------- the kinds, declared once

Builder = Callable[[random.Random, bool], tuple[Request, str]]
# where a kind's requests come from, counted by `pool_sizes`:
# - a pool of keyed entries (a function): its entries on one side of the split;
# - "file.weights", a data file's weight table: the subjects of the categories it weighs, on one side;
# - any other data table, "file.key" (or "file.key.*" for lists by category): its entries;
# - forms built in code (a tuple or list): how many there are
Source = Callable[[], tuple] | str | Sized
NEWS_WORDING = (summary_request,)  # the news task's own instruction, over any passage


class Kind(NamedTuple):
    """A kind of request: the builder that draws one, where its subjects come from (summed), and its
    templates: alternatives (summed), each the product of the sizes of its parts."""

    build: Builder
    subjects: tuple[Source, ...]
    templates: tuple[tuple[Source, ...], ...]


REGISTRY: dict[str, Kind] = {
    "open_question": Kind(
        _open_question, ("open_question.weights",), (("open_question.templates.*",), ("open_question.comparisons",))
    ),
    "explanation": Kind(
        _explanation, ("explanation.weights",), (("explanation.templates",), ("explanation.occupation_templates",))
    ),
    "howto": Kind(_howto, ("howto.weights",), (("howto.templates.*",),)),
    # a form with no constraint, or with some
    "creative": Kind(
        _creative, ("creative.weights",), (("creative.forms",), ("creative.forms", "creative.constraints"))
    ),
    "rewrite": Kind(_rewrite, (brief_passages,), (("rewrite.instructions",),)),
    "translation": Kind(
        _translation,
        (english_sentences, catalogue_sentences),
        (("translation.to_language", "text_sources.languages"), ("translation.to_english",)),
    ),
    "arithmetic": Kind(_arithmetic, (ARITHMETIC_PROBLEMS,), (("arithmetic.openings", "arithmetic.endings"),)),
    "passage_qa": Kind(
        _passage_qa, (short_passages,), (("passage_qa.phrase_questions",), ("passage_qa.passage_questions",))
    ),
    "summary_short": Kind(_summary_short, (short_passages,), (("summary.any_length",), (NEWS_WORDING,))),
    "summary_long": Kind(
        _summary_long, (long_passages,), (("summary.any_length",), ("summary.long_only",), (NEWS_WORDING,))
    ),
    "classify": Kind(
        _classify, (brief_passages, prose_sentences, "classify.products"), (("classify.frames", CLASSIFY_TASKS),)
    ),
    "code": Kind(_code, (code_functions,), (("code.tasks",), (CODE_FORMS,))),
    "sql": Kind(_sql, (sql_tables,), ((SQL_QUESTIONS,), (MORE_SQL_QUESTIONS,), ("sql.number_questions",))),
    "multi_turn": Kind(_multi_turn, (api_answers, brief_passages, code_functions), (("multi_turn.follow_ups",),)),
}
KINDS = tuple(REGISTRY)


def source_size(source: Source, held: bool) -> int:
    """How many entries a source holds (on one side of the split, for pools of subjects)."""
    if callable(source):
        return len(split(source, held))
    if isinstance(source, str) and source.endswith(".weights"):
        return subject_count(at(source), held)
    if isinstance(source, str):
        return size(source)
    return len(source)


def pool_sizes(held: bool = False) -> dict[str, tuple[int, int]]:
    """Per kind: (subjects on this side of the split, templates), the product bounding its distinct requests
    before the slots (audiences, constraints, numbers, follow-ups) multiply it further."""
    return {
        name: (
            sum(source_size(source, held) for source in kind.subjects),
            sum(math.prod(source_size(part, held) for part in term) for term in kind.templates),
        )
        for name, kind in REGISTRY.items()
    }


# ----------------------------------------------------------------------------- drawing


def conversation_text(request: Item) -> str:
    return "\n".join(m["content"] for m in messages(request))


def draw_with_key(kind: str, rng: random.Random, held: bool = False) -> tuple[Request, str]:
    """A request of `kind` and the key of its subject (``held_out(key) == held``)."""
    if kind not in REGISTRY:
        raise ValueError(f"unknown kind of request {kind!r}; valid: {', '.join(KINDS)}")
    for _ in range(50):
        request, key = REGISTRY[kind].build(rng, held)
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
