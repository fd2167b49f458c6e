"""What requests are about, and the held-out split every pool is drawn through.

- subjects by category (`SUBJECT_POOLS`): the chat task's topics, countries, regions and cities (ISO
  code lists, the time-zone database), languages and currencies (ISO), objects, animals and foods
  (Unicode's pictographs), occupations and everyday tasks (`subjects.json`), programming languages
  (pygments' lexers), Python's features, built-ins and modules, and the concepts, APIs and how-to
  tasks named by docstrings (`docstrings`); the made-up SQL tables (`sql_tables`);
- the split (`split`): a pool's entries on one side of `mtad.split.held_out` by their key, training
  entries never mentioning a held-out topic of the chat task; and draws from one side (`pick`,
  `pick_passage`, `pick_subject`).
"""

from __future__ import annotations

import ast
import builtins
import json
import random
import re
import unicodedata
import zoneinfo
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ...split import held_out
from ..prompts import NAMES, TOPICS
from .docstrings import api_docs, scan, site_packages
from .installed_text import Passage, reference_manual
from .prose import article
from .request_data import table
from .sources import SCHEMAS

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


@lru_cache(maxsize=1)
def thing_subjects() -> tuple[Subject, ...]:
    """Objects, animals, plants and foods: the names of Unicode's pictographs ("a red apple")."""
    names = (unicodedata.name(chr(cp), "").lower() for lo, hi in PICTOGRAPH_BLOCKS for cp in range(lo, hi + 1))
    kept = [n for n in names if n and len(n.split()) <= 3 and not _NOT_A_THING.search(n)]
    return tuple(Subject(n, article(n), "thing") for n in dict.fromkeys(kept))


@lru_cache(maxsize=1)
def occupation_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(job, article(job), "occupation") for job in table("subjects")["occupations"])


@lru_cache(maxsize=1)
def programming_language_subjects() -> tuple[Subject, ...]:
    """Programming and markup languages that pygments highlights."""
    lexers = _python_literal(site_packages() / "pygments" / "lexers" / "_mapping.py", "LEXERS")
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
    out = [Subject(h, h[:1].lower() + h[1:], "python") for h, _ in reference_manual()]
    for name in sorted(n for n in dir(builtins) if not n.startswith("_")):
        obj = getattr(builtins, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            out.append(Subject(name, f"the {name} exception", "python"))
        elif callable(obj):
            out.append(Subject(name, f"the built-in {name}()", "python"))
    modules = [m for m, _ in scan().module_summaries if not m.startswith("_")]
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
def everyday_subjects() -> tuple[Subject, ...]:
    return tuple(Subject(t, t, "everyday") for t in table("subjects")["everyday_tasks"])


@lru_cache(maxsize=1)
def sql_tables() -> tuple[Subject, ...]:
    return tuple(Subject(t, t, "table") for t, _ in SCHEMAS)


@lru_cache(maxsize=1)
def colours() -> tuple[str, ...]:
    """matplotlib's colour names, else a few of `subjects.json`."""
    named = _python_literal(site_packages() / "matplotlib" / "_color_data.py", "XKCD_COLORS")
    names = [n for n in named if re.fullmatch(r"[a-z ]+", n)] if isinstance(named, dict) else []
    return tuple(names) or table("subjects")["colours"]


@lru_cache(maxsize=1)
def people() -> tuple[str, ...]:
    """People's names: the chat task's and more of `subjects.json`."""
    return tuple(NAMES) + table("subjects")["people"]


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


def pick(rng: random.Random, pool: Callable[[], tuple], held: bool):
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


def pick_passage(rng: random.Random, pool: Callable[[], tuple[Passage, ...]], held: bool) -> Passage:
    """A passage of a domain drawn with weight sqrt(its passages): licences and release notes, the
    largest domains, would otherwise make up half the passages."""
    groups = _by_domain(pool, held)
    if not groups:
        raise LookupError(f"no {'held-out' if held else 'training'} passages in {pool.__name__}")
    domain = rng.choices(list(groups), [len(g) ** 0.5 for g in groups.values()])[0]
    return rng.choice(groups[domain])


def pick_subject(rng: random.Random, held: bool, weights: dict[str, float]) -> Subject:
    """A subject of a category drawn by weight, among categories with subjects on this side."""
    categories = [c for c in weights if split(SUBJECT_POOLS[c], held)]
    if not categories:
        raise LookupError(f"no subjects for categories {sorted(weights)}")
    category = rng.choices(categories, [weights[c] for c in categories])[0]
    return pick(rng, SUBJECT_POOLS[category], held)


def other_subject(rng: random.Random, subject: Subject, held: bool) -> Subject:
    """A second subject of the same category and side (for comparisons)."""
    return pick(rng, SUBJECT_POOLS[subject.category], held)


def subject_count(weights: dict[str, float], held: bool) -> int:
    """How many subjects a draw by `weights` chooses among on one side of the split."""
    return sum(len(split(SUBJECT_POOLS[c], held)) for c in weights)
