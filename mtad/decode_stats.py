"""A generation's decoding statistics, each field with its kind.

The decoders fill a `DecodeStats` per sample (mtad/decoding/README.md, "Statistics"), the runner
stores its ``as_dict()`` per turn, and the cell metrics (``speed.aggregate_speed``), the tables
and the reproduction check read the fields by kind:

- count:   discrete outcomes of the method (the same on any machine for the same seed), summed per cell
- seconds: wall-clock time, summed per cell
- lengths: the accepted length of every iteration, pooled per cell
- run:     how the generation ran (decode path, compilations), not what it produced

and the derived ratios: ``EXACT_RATIOS`` of counts, ``TIMED_RATIOS`` of seconds. One record holds
every fact of a generation that a report reads: the counts the cost model reads
(``cost_model.Counts.of``: calls, tokens verified, draft rows, prompt tokens) and the split of its
wall time (target and draft forwards, each with its prefill apart, and the host work left). The
bench sums the same records (``mtad.bench.timings``). Torch-free, so the report reads it without
loading the decoding engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

COUNT, SECONDS, LENGTHS, RUN = "count", "seconds", "lengths", "run"


def _stat(kind: str, default: Any = 0) -> Any:
    return field(default=default, metadata={"kind": kind})


@dataclass
class DecodeStats:
    """Per-sample statistics (mtad/decoding/README.md, "Statistics")."""

    new_tokens: int = _stat(COUNT)
    target_calls: int = _stat(COUNT)
    draft_calls: int = _stat(COUNT)
    drafted: int = _stat(COUNT)  # γ per iteration for chains, tree depth for trees
    accepted: int = _stat(COUNT)  # accepted draft tokens that were emitted
    accept_lengths: list[int] = field(default_factory=list, metadata={"kind": LENGTHS})
    tree_nodes: int = _stat(COUNT)  # draft tokens scored by the target in tree methods
    # rows the draft forwards after the prefill read, summed over them (rows per call: / draft_calls):
    # the pending tokens, the beams or the tree level each forward ran
    draft_rows: int = _stat(COUNT)
    prompt_tokens: int = _stat(COUNT)  # the prompt's tokens (all but its last are prefilled)
    seconds: float = _stat(SECONDS, 0.0)  # wall time of decoding (prefill included), synchronised on CUDA
    target_seconds: float = _stat(SECONDS, 0.0)  # of which inside target forwards (its prefill included)
    # of which inside draft forwards, its prefill included (the rest is sampling, rules, caches, Python)
    draft_seconds: float = _stat(SECONDS, 0.0)
    target_prefill_seconds: float = _stat(SECONDS, 0.0)  # of target_seconds: the prompt's forward
    draft_prefill_seconds: float = _stat(SECONDS, 0.0)  # of draft_seconds: the prompt's forward
    decode_path: str = _stat(RUN, "")  # target's path: eager | static | compiled (mtad/decoding/static_kv.py)
    compiles: int = _stat(RUN)  # torch.compile compilations during this generation (0 in steady state)

    @property
    def block_efficiency(self) -> float:
        """New tokens per target call (bonus token included)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds else 0.0

    @property
    def prefill_seconds(self) -> float:
        """The prompt's forwards, target and draft (part of target and draft seconds)."""
        return self.target_prefill_seconds + self.draft_prefill_seconds

    @property
    def host_seconds(self) -> float:
        """The rest of the wall time, outside every forward (`host_seconds`)."""
        return host_seconds(self.seconds, self.target_seconds + self.draft_seconds)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), **{name: getattr(self, name) for name in EXACT_RATIOS + TIMED_RATIOS}}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> DecodeStats:
        """A record's stats (`as_dict`) back as the object: its fields read, the derived ratios left."""
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})


def host_seconds(seconds: float, forward_seconds: float) -> float:
    """Host time, the one definition every report uses: a generation's wall time less the time
    inside its forwards (target and draft, prefills included): sampling, acceptance rules, drafting
    bookkeeping, cache moves, Python."""
    return seconds - forward_seconds


def stat_names(*kinds: str) -> tuple[str, ...]:
    """The DecodeStats fields of these kinds, in declaration order."""
    return tuple(f.name for f in fields(DecodeStats) if f.metadata["kind"] in kinds)


# new_tokens, target_calls, draft_calls, drafted, accepted, tree_nodes, draft_rows, prompt_tokens
COUNTS = stat_names(COUNT)
SUMMED = stat_names(COUNT, SECONDS)  # what a cell totals
EXACT_STATS = stat_names(COUNT, LENGTHS)  # what a rerun must reproduce per turn
# the derived properties: ratios of counts (reproducible) and of wall-clock seconds
EXACT_RATIOS = ("block_efficiency", "acceptance_rate", "mean_accept_length")
TIMED_RATIOS = ("tokens_per_second",)
