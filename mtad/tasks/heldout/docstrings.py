"""Docstrings and short functions of the standard library and of installed packages, read with
``ast`` (nothing is imported): what each public API does (`ApiDoc`: its summary as a how-to task
and as the concept it computes), short documented functions (`Function`), and long docstrings kept
as prose documents. The packages read and the word lists that read summaries are data
(`text_sources.json`, `parsing.json` under `mtad/assets/requests/`)."""

from __future__ import annotations

import ast
import gc
import re
import sysconfig
from functools import cache, lru_cache
from pathlib import Path
from typing import NamedTuple

from .prose import fit, sentences, squash, usable_paragraph
from .request_data import table
from .sources import stdlib_functions

# the scan's time goes into ast.parse: skip tests, vendored code, huge generated files, and the parts of
# the biggest packages whose docstrings repeat (one per model in transformers, sympy's polynomial
# internals) or are compiler internals (torch's private packages)
SKIPPED_DIRS = frozenset({"tests", "test", "testing", "_vendor", "vendored", "benchmarks", "models", "polys"})
PRIVATE_PARTS_SKIPPED = frozenset({"torch", "transformers"})
MAX_FILE_BYTES = 250_000
_CONTEXT_WORDS = re.compile(r"\b(self|this|these|its|it|instance|object|given|specified|input|provided|current)\b")


@cache
def _words(name: str) -> frozenset[str]:
    """A word list of `parsing.json`: task_verbs (first verbs of docstring summaries that name a task),
    concept_verbs (those whose object is a concept), generic_heads (what a concept must not end with:
    the name of a mere container or attribute, "the default value")."""
    return frozenset(table("parsing")[name])


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


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _public_module(rel: Path) -> str:
    parts = [p for p in rel.with_suffix("").parts if p != "__init__"]
    return ".".join(p for p in parts if not p.startswith("_")) or parts[0]


def _source_files() -> list[tuple[str, str, Path, Path]]:
    """(package display name, domain, root, file) of the sources to scan."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = [("Python", "the Python standard library", stdlib, p) for p in sorted(stdlib.glob("*.py"))]
    for sub in table("text_sources")["stdlib_packages"]:
        files = [p for p in sorted((stdlib / sub).rglob("*.py")) if _wanted(sub, p.relative_to(stdlib / sub).parts)]
        out += [("Python", "the Python standard library", stdlib, p) for p in files]
    site = site_packages()
    for package, (display, domain) in table("text_sources")["packages"].items():
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
    first = squash(doc.split("\n\n", 1)[0])
    sentence = sentences(first)[0] if first else ""
    ok = 3 <= len(sentence.split()) <= 20 and re.fullmatch(r"[A-Z][A-Za-z0-9 ,;'()-]*\.?", sentence)
    return sentence.rstrip(".") + "." if ok else ""


def _base_verb(word: str) -> str:
    """The base form of a task verb ("Computes" -> "compute", "Returns" -> "get"), '' for other words."""
    word, aliases = word.lower(), table("parsing")["verb_aliases"]
    for form in (word, word[:-1] if word.endswith("s") else ""):
        if form in aliases or form in _words("task_verbs"):
            return aliases.get(form, form)
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
        and verb in _words("concept_verbs")
        and article in ("the", "a", "an")
        and 2 <= len(words) <= 5
        and words[-1].lower() not in _words("generic_heads")
        and all(len(w) > 1 for w in words)
        and "," not in rest
    )
    return f"{verb} {rest}", rest if is_concept else ""


def _docstring_prose(doc: str, summary: str) -> str:
    paras = [squash(p) for p in docstring_text(doc).split("\n\n")[1:]]
    prose = [p for p in paras if usable_paragraph(p, 8)][:2]
    return fit(" ".join([summary] + prose), 120, 800) or summary


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
def scan() -> Scan:
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
    return stdlib + tuple(f for f in scan().functions if f.name not in names)


def api_docs() -> tuple[ApiDoc, ...]:
    return scan().apis


@lru_cache(maxsize=1)
def api_answers() -> tuple[ApiDoc, ...]:
    """APIs whose docstring says enough (25 words or more) to be an assistant's answer about them."""
    return tuple(a for a in api_docs() if len(a.prose.split()) >= 25)


def function_doc(fn: Function) -> str:
    """The prose of a function's docstring, on one line ('' if it has none)."""
    try:
        node = ast.parse(fn.source).body[0]
    except (SyntaxError, IndexError):
        return ""
    return squash(docstring_text(ast.get_docstring(node) or ""))
