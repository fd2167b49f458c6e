"""The decoding methods' registry: one record (`MethodSpec`) per method, in table order.

Each method declares its record beside its class, as the class attribute ``spec`` of its
``Decoder`` subclass in its own module under ``mtad/decoding/``; ``Decoder.__init_subclass__``
registers the class here, and ``mtad.decoding`` imports every module of its package, so adding a
method is its module, its ``conf/method/<name>.yaml`` and its tests (``mtad/decoding/README.md``,
"Adding a method"). Everything that lists methods reads this registry: ``mtad.decoding.DECODERS``,
Table 2's order, the figures' styles, the tests' small settings, the bench's settings and
adaptive thresholds, the draft measurement, the GPU check.

The records are plain data and this module imports nothing of the engine; it lives in the
engine's package, so importing it imports ``mtad.decoding`` first, which imports every method
module: every record is registered before anyone reads the registry. A reader above the engine
(the report, the paper's claims, the configs) reads method facts here and nothing else of it.
``METHODS`` and ``LABELS`` are read on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

# what a method drafts per block: nothing (sampling), one chain of γ tokens, several i.i.d. chains
# verified as one trie, a token tree, or beams (verified as a chain or a tree)
DRAFTS = ("none", "chain", "chains", "tree", "beams")


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method's facts, declared once beside its class.

    ``make bench`` runs a method at its defaults, its config's, setting γ itself on every method
    whose settings have ``gamma`` (`bench_params`). ``test_settings`` are the small settings the
    tiny-model tests (and the GPU check) run the method at.
    ``exactness_settings`` are the settings the exactness checks run a lossless method at (C6's
    chi-square tests, the tests' and the GPU check's distribution cases): each draws the bonus token a
    fully accepted block earns within 3 tokens (a draft depth of 2).
    ``adaptive_stop`` is the method's ``stop_below`` for adaptive drafting on the embedded pair
    (Table 2's adaptive rows, the bench's adaptive rows, the claims' variants), None where it
    has none. ``study``: one of the study's methods (Table 2, the figures, the bench); false for
    tools such as exact MTJD on enumerable models. ``verifies_drafts_of``: the method whose drafts
    this one verifies by another rule (the same drafts, e.g. block verification of SpS's chain);
    such a method is compared with that one in rows of its own, not counted among the paper's
    conventional methods (``mtad.paper.CONVENTIONAL``). ``implements``: the study method this one is
    another engine's implementation of (transformers' ``generate()`` of sampling, its assisted
    generation of SpS), the bench's reference rows beside that method's."""

    name: str
    label: str  # as the reports print it
    order: int  # Table 2's order, ascending (sampling first: the reference every speed-up divides by)
    color: str  # the figures' colour (a matplotlib colour)
    marker: str  # the figures' marker (a matplotlib marker)
    settings: type  # the frozen settings class (mtad/decoding/params.py)
    lossless: bool  # its output is the target's distribution
    drafts: str  # one of DRAFTS
    test_settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    exactness_settings: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    adaptive_stop: float | None = None
    study: bool = True
    # the method whose drafts it verifies by a rule of its own (block verification: SpS's chain
    # verified as one block), None for a method that verifies drafts of its own
    verifies_drafts_of: str | None = None
    implements: str | None = None

    def __post_init__(self) -> None:
        if self.drafts not in DRAFTS:
            raise ValueError(f"{self.name}: drafts must be one of {', '.join(DRAFTS)}, got {self.drafts!r}")
        names = self.settings.names()
        if self.verifies_drafts_of == self.name:
            raise ValueError(f"{self.name}: verifies_drafts_of names another method, not itself")
        if self.adaptive_stop is not None and "stop_below" not in names:
            raise ValueError(f"{self.name}: adaptive_stop needs a stop_below setting in {self.settings.__name__}")
        if self.exactness_settings and not self.lossless:
            raise ValueError(f"{self.name}: exactness_settings are for lossless methods")
        object.__setattr__(self, "test_settings", MappingProxyType(dict(self.test_settings)))
        object.__setattr__(
            self, "exactness_settings", tuple(MappingProxyType(dict(s)) for s in self.exactness_settings)
        )
        for settings in (self.test_settings, *self.exactness_settings):
            self.settings(**settings)  # a bad key or value fails where the method is declared
        if self.adaptive_stop is not None:
            self.settings(stop_below=self.adaptive_stop)

    def bench_params(self, gamma: int):
        """The settings ``make bench`` and the GPU check run: the method's defaults (its config's),
        with draft length γ where the method has one."""
        with_gamma = {"gamma": gamma} if "gamma" in self.settings.names() else {}
        return replace(self.settings(), **with_gamma)

    @property
    def adaptive_override(self) -> str | None:
        """The command-line override of the method's adaptive cell (``method.stop_below=<t>``), or None."""
        return None if self.adaptive_stop is None else f"method.stop_below={self.adaptive_stop}"


# The methods every speed-up column divides by (`speedup_vs_<name>`): sampling, the reference, and SpS,
# the paper's "vanilla" speculative decoding (the token-wise verifier of one chain). Their names are
# spelled here and nowhere else above the engine: a reader that needs one of them imports it.
REFERENCE = "sampling"
VANILLA = "sps"
BASELINES = (REFERENCE, VANILLA)

_REGISTERED: dict[str, type] = {}  # name -> the class that declares the spec (a Decoder subclass)


def register(implementation: type) -> None:
    """Add a class that declares ``spec`` (``Decoder.__init_subclass__`` calls this). A name taken by
    another class is refused; the same class defined again (a module reloaded) replaces itself."""
    spec = implementation.spec
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"{implementation.__qualname__}.spec must be a MethodSpec, got {type(spec).__name__}")
    known = _REGISTERED.get(spec.name)
    where = f"{implementation.__module__}.{implementation.__qualname__}"
    if known is not None and f"{known.__module__}.{known.__qualname__}" != where:
        raise ValueError(f"method {spec.name!r} is declared twice: {known.__module__} and {implementation.__module__}")
    _REGISTERED[spec.name] = implementation


def implementations() -> dict[str, type]:
    """Every registered method's class, by name, in table order (study methods and tools alike)."""
    ordered = sorted(_REGISTERED.items(), key=lambda item: (item[1].spec.order, item[0]))
    return dict(ordered)


def specs(study_only: bool = True) -> dict[str, MethodSpec]:
    """The methods' records by name, in table order: the study's (default), or every one."""
    return {n: c.spec for n, c in implementations().items() if c.spec.study or not study_only}


def spec(name: str) -> MethodSpec:
    """One method's record; an unknown name lists the valid ones."""
    known = specs(study_only=False)
    if name not in known:
        raise KeyError(f"unknown decoding method {name!r}; valid: {', '.join(known)}")
    return known[name]


def exactness_cases() -> list[tuple[str, dict]]:
    """(method, settings) of every exactness check, in table order: each lossless method at each of its
    ``exactness_settings``."""
    return [(name, dict(s)) for name, spec_ in specs().items() for s in spec_.exactness_settings]


def implementations_of() -> dict[str, str]:
    """Study method -> the registered method that is another engine's implementation of it."""
    return {s.implements: name for name, s in specs(study_only=False).items() if s.implements}


def study_methods() -> tuple[str, ...]:
    """The study's methods in table order."""
    return tuple(specs())


def labels(study_only: bool = True) -> dict[str, str]:
    """Each method's label, by name: the study's methods (default), or every one."""
    return {n: s.label for n, s in specs(study_only).items()}


def label(name: str) -> str:
    """A method's label; an unregistered name (a cell of a method since removed) as it is."""
    return labels(study_only=False).get(name, name)


class MethodsWhere(Sequence):
    """The study's methods whose record passes `keep`, in table order, read from the registry at each
    use: a module-level constant (a paper's baseline set, the lossless methods) that costs nothing to
    import. Equal to the tuple of its names."""

    def __init__(self, keep: Callable[[MethodSpec], bool]):
        self.keep = keep

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, spec in specs().items() if self.keep(spec))

    def __getitem__(self, index):
        return self.names()[index]

    def __iter__(self):
        return iter(self.names())

    def __contains__(self, name) -> bool:
        return name in self.names()

    def __len__(self) -> int:
        return len(self.names())

    def __eq__(self, other) -> bool:
        return self.names() == (other.names() if isinstance(other, MethodsWhere) else other)

    def __hash__(self) -> int:
        return hash(self.names())

    def __repr__(self) -> str:
        return repr(self.names())


def __getattr__(name: str):
    """``METHODS`` (the study's names in table order) and ``LABELS`` (name -> label), read from the
    registry when first asked for."""
    if name == "METHODS":
        return study_methods()
    if name == "LABELS":
        return labels()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
