"""Each decoding method's settings: one frozen dataclass per method, validated when it is built.

A settings class is the one place a method's parameters, their types and their defaults are
written. ``mtad.configs.register_code_defaults`` registers it as the Hydra structured config
``method_defaults/<name>``, so the composed ``method`` node has its fields in declaration order
(which the dumped configs and the cell records show) and Hydra refuses a value of the wrong
type. Values are checked in ``__post_init__``: each class checks the fields it declares and
hands on along the MRO, so a class made of several field groups checks all of them, each once.
The error messages name the parameter and its valid range.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

DENOMINATORS = ("best_column", "node")  # MMTAD's Q: the best final beam's column, or each node's own
# how beam sampling reweights the W chosen (beam, token) pairs (beam.py): in proportion to their scores
# w_i · q(v), or as the official code does, a log-softmax of those scores (weights ∝ exp(w_i · q(v)))
BEAM_WEIGHTINGS = ("proportional", "official_softmax")


def check_positive_int(name: str, value: Any) -> None:
    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{name} must be an int >= 1, got {value}")


def check_replacement(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"replacement must be true or false, got {value!r}")


@dataclass(frozen=True)
class DecoderParams:
    """Root of every method's settings: ends the chain of ``__post_init__`` checks."""

    def __post_init__(self) -> None:
        pass

    @classmethod
    def names(cls) -> list[str]:
        """The parameters' names in field order."""
        return [f.name for f in fields(cls)]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each parameter's default value, in field order."""
        return {f.name: f.default for f in fields(cls)}

    @property
    def draft_depth(self) -> int:
        """The most tokens a block drafts along one path (γ, a tree's depth); 1 for a method that drafts
        none (a block is one token): the official stop rule's window (`Decoder.generate`)."""
        return 1


@dataclass(frozen=True)
class SamplingFields(DecoderParams):
    """How p and q are processed (logits.logits_to_probs), the same in every method. The default is
    the paper's setting; the unprocessed distribution is temperature=1.0, top_k=0, top_p=1.0."""

    temperature: float = 1.0  # T: logits / T; 0 = greedy (one-hot at the argmax)
    top_k: int = 10  # keep the k most likely tokens; 0 = off
    top_p: float = 0.9  # then the smallest set of mass >= top_p (nucleus); 1 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        super().__post_init__()


@dataclass(frozen=True)
class ChainFields(DecoderParams):
    """A method that drafts (or enumerates) γ tokens per iteration."""

    gamma: int = 4  # γ: tokens drafted per iteration

    def __post_init__(self) -> None:
        check_positive_int("gamma", self.gamma)
        super().__post_init__()

    @property
    def draft_depth(self) -> int:
        return self.gamma


@dataclass(frozen=True)
class AdaptiveFields(DecoderParams):
    """Drafting that stops where the draft is unsure (0 = off: every block drafts its fixed γ or tree).

    SpS, SpecTr and SpecInfer: a drafted token whose draft probability q(x | its prefix) is below
    `stop_below` gets no children: the chain or that branch of the trie/tree ends there (the token
    itself is still verified). The rule reads only the draft's own distribution at a node, which
    every draft through that node shares, so the children of a node stay i.i.d. from q given their
    number and the methods stay lossless (tests/test_decoding_exact.py). MTAD and MMTAD: beam
    sampling stops once the best beam's joint draft probability Π q falls below `stop_below`,
    so each block's γ follows the draft's confidence (at most `gamma`)."""

    stop_below: float = 0.0  # draft-probability threshold that ends drafting; 0 = fixed γ / tree

    def __post_init__(self) -> None:
        if not (isinstance(self.stop_below, int | float) and 0 <= self.stop_below < 1):
            raise ValueError(f"stop_below must be in [0, 1) (0 = off), got {self.stop_below}")
        super().__post_init__()


@dataclass(frozen=True)
class SpecTrFields(ChainFields):
    num_drafts: int = 4  # k: i.i.d. draft sequences of γ tokens, verified as one trie

    def __post_init__(self) -> None:
        super().__post_init__()  # γ first: the fields' order
        check_positive_int("num_drafts", self.num_drafts)


@dataclass(frozen=True)
class SpecInferFields(DecoderParams):
    # (4, 2, 2): the tree of the official MTAD repository's SpecInfer baseline (--k-config 4,2,2): depth 3,
    # 4 + 8 + 16 = 28 nodes; (4, 1, 1, 1) gives MMTAD's depth and node budget at γ = W = 4 (16 nodes)
    k_config: tuple[int, ...] = (4, 2, 2)  # children per node at each depth of the draft tree
    replacement: bool = True  # siblings drawn from q i.i.d. (true) or without replacement
    # EAGLE-2's dynamic tree: at most this many nodes, each level's children given to the frontier
    # nodes of highest path probability Π q first; 0 = the whole k_config tree
    node_budget: int = 0

    def __post_init__(self) -> None:
        # a config gives a list; a tuple keeps the settings immutable and hashable
        object.__setattr__(self, "k_config", tuple(self.k_config))
        if not self.k_config or any(not isinstance(k, int) or k < 1 for k in self.k_config):
            raise ValueError(f"k_config must be a non-empty sequence of ints >= 1, got {self.k_config}")
        check_replacement(self.replacement)
        if not (isinstance(self.node_budget, int) and (self.node_budget == 0 or self.node_budget >= self.k_config[0])):
            raise ValueError(
                f"node_budget must be 0 (the whole k_config tree) or an int >= the root's {self.k_config[0]} "
                f"children, got {self.node_budget}"
            )
        super().__post_init__()

    @property
    def draft_depth(self) -> int:
        return len(self.k_config)


@dataclass(frozen=True)
class MTADFields(ChainFields):
    """The official implementation's settings: every MTAD example of it samples beams with replacement."""

    beam_width: int = 4  # W: beams kept at every draft step
    threshold: float = 0.5  # τ: a prefix is accepted while its joint ratio P/Q exceeds τ
    replacement: bool = True  # beams' (beam, token) pairs drawn with replacement (true) or distinct
    beam_weighting: str = "proportional"  # one of BEAM_WEIGHTINGS

    def __post_init__(self) -> None:
        super().__post_init__()  # γ first: the fields' order
        check_positive_int("beam_width", self.beam_width)
        if not (0 < self.threshold <= 1):
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        check_replacement(self.replacement)
        if self.beam_weighting not in BEAM_WEIGHTINGS:
            raise ValueError(f"beam_weighting must be one of {BEAM_WEIGHTINGS}, got {self.beam_weighting!r}")


@dataclass(frozen=True)
class MTJDExactFields(ChainFields):
    gamma: int = 2  # γ: block length; |V|^γ blocks are enumerated, so it stays small


# Each method's class. Dataclass fields are collected in reverse MRO order, so the base named
# last gives the first fields: naming SamplingFields first puts the method's own parameters
# before the shared sampling ones, the order of the composed config. In the MRO SamplingFields
# comes first, so its checks run first.


@dataclass(frozen=True)
class SamplingParams(SamplingFields):
    """`sampling`: temperature, top_k, top_p."""


@dataclass(frozen=True)
class SpSParams(SamplingFields, AdaptiveFields, ChainFields):
    """`sps`: gamma, stop_below, then sampling."""


@dataclass(frozen=True)
class SpecTrParams(SamplingFields, AdaptiveFields, SpecTrFields):
    """`spectr`: gamma, num_drafts, stop_below, then sampling."""


@dataclass(frozen=True)
class SpecInferParams(SamplingFields, AdaptiveFields, SpecInferFields):
    """`specinfer`: k_config, replacement, node_budget, stop_below, then sampling."""


@dataclass(frozen=True)
class MTADParams(SamplingFields, AdaptiveFields, MTADFields):  # MTADFields' fields first: reverse MRO order
    """`mtad`: gamma, beam_width, threshold, replacement, beam_weighting, stop_below, then sampling."""


@dataclass(frozen=True)
class MMTADParams(MTADParams):
    """`mmtad`: MTAD's settings, then denominator and node_budget (declared here, so after every
    inherited field)."""

    denominator: str = "best_column"  # Q of the ratio P(path)/Q: one of DENOMINATORS (mmtad.py)
    # at most this many beam nodes verified, those of highest path probability Π q; 0 = every one
    node_budget: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()  # MTAD's settings first: the fields' order
        if self.denominator not in DENOMINATORS:
            raise ValueError(f"denominator must be one of {DENOMINATORS}, got {self.denominator!r}")
        if not (isinstance(self.node_budget, int) and self.node_budget >= 0):
            raise ValueError(f"node_budget must be 0 (every beam node) or a positive int, got {self.node_budget}")


@dataclass(frozen=True)
class HFGenerateParams(SamplingFields):
    """`hf_generate`: static_compile, then sampling."""

    # transformers' static cache with its own torch.compile of the decode step (False: its dynamic cache, eager)
    static_compile: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.static_compile, bool):
            raise ValueError(f"static_compile must be true or false, got {self.static_compile!r}")
        super().__post_init__()


@dataclass(frozen=True)
class HFAssistedParams(SamplingFields, ChainFields):
    """`hf_assisted`: gamma (the assistant's constant number of tokens), then sampling."""


@dataclass(frozen=True)
class MTJDExactParams(SamplingFields, MTJDExactFields):
    """`mtjd_exact`: gamma (2), then sampling."""
