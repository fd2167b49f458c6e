"""Where a decoding block's time goes, per method: `make profile` -> the bench result file's ``profile``
section (``profile_adaptive`` with adaptive drafting; `mtad.result_files`) and ``profile.md`` beside it.

Every method generates from short prompts (held-out chat requests, ~50 tokens) and long ones
(CNN/DailyMail articles through the task's own prompt, 400-1,000 tokens) at each thread count, as
cells with `profile` on (`mtad.experiments.block_profiles`), each generation's record holding its
split (`decoding.phases.Profile.block_record`); a row (`BlockProfile`) sums them.
A block's wall time is split into the target's and the draft's forwards (the target's by width:
how many new positions one verification feeds), the host phases the decoders mark (`process`
logits to p/q, `sample`, `accept`, `drafting` bookkeeping, `mask` building, cache `commit` and
crop) and the Python left between them. The prompts' own forwards (the prefill, one per model) are
taken out: a block is what repeats.

Host work is everything but the forwards: its share of a block is what a faster kernel cannot
remove, and the part of a method's cost the cost model has to be told (mtad/metrics/cost_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mtad.decoding.phases import PHASES
from mtad.result_files import BENCH, read_section, write_section

FORWARDS = ("target", "draft")
HOST = (*PHASES, "python")
COLUMNS = (*FORWARDS, *HOST)  # the parts of a block, in the table's order


@dataclass
class BlockProfile:
    """One (method, threads, prompt length) row, summed over its generations."""

    method: str
    threads: int
    prompts: str  # "short" | "long"
    prompt_tokens: int = 0
    generations: int = 0
    blocks: int = 0  # target calls after the prefill: one per block
    new_tokens: int = 0
    seconds: dict = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0.0))
    target_widths: dict = field(default_factory=dict)  # new positions -> [calls, seconds]

    def add(self, split: dict, widths: dict, blocks: int, new_tokens: int, prompt_tokens: int) -> None:
        for column in COLUMNS:
            self.seconds[column] += split[column]
        for width, (calls, seconds) in widths.items():
            entry = self.target_widths.setdefault(int(width), [0, 0.0])
            entry[0] += calls
            entry[1] += seconds
        self.generations += 1
        self.blocks += blocks
        self.new_tokens += new_tokens
        self.prompt_tokens += prompt_tokens

    def row(self) -> dict:
        """Milliseconds per block by part, host share, tokens per block and milliseconds per token."""
        per_block = {c: 1e3 * s / max(self.blocks, 1) for c, s in self.seconds.items()}
        total = sum(per_block.values())
        return {
            "method": self.method,
            "threads": self.threads,
            "prompts": self.prompts,
            "mean_prompt_tokens": self.prompt_tokens / max(self.generations, 1),
            "blocks": self.blocks,
            "block_efficiency": self.new_tokens / max(self.blocks, 1),
            "ms_per_block": per_block | {"total": total},
            "host_share": sum(per_block[c] for c in HOST) / total if total else 0.0,
            "ms_per_token": total * self.blocks / max(self.new_tokens, 1),
            "target_ms_by_width": {
                str(w): {"calls": calls, "ms": 1e3 * s / calls} for w, (calls, s) in sorted(self.target_widths.items())
            },
        }


def profile_section(adaptive: bool) -> str:
    """The bench file's section (and the stem of its Markdown report) of a profile with or without
    adaptive drafting."""
    return "profile_adaptive" if adaptive else "profile"


def write_profile(folder: Path, payload: dict, adaptive: bool) -> Path:
    """`payload` as its section of the bench result file in `folder`, and its report beside it."""
    name = profile_section(adaptive)
    path = write_section(BENCH, folder, name, payload)
    (Path(folder) / f"{name}.md").write_text(render_profile(payload))
    return path


def read_profile(folder: Path, adaptive: bool = False) -> dict | None:
    """The block profile stored in `folder`'s bench result file (None when it holds none)."""
    return read_section(BENCH, folder, profile_section(adaptive))


def machine_rows(profile: dict, machine: str, threads: int) -> list[dict] | None:
    """The rows of a block profile (`make profile`'s payload) at `threads` when it was made on
    `machine` (the bench's environment name of it); None when made elsewhere or at other threads:
    a block's split is a fact of one machine."""
    if profile["setup"]["machine"].split(",")[0] != machine:
        return None
    return [r for r in profile["rows"] if r["threads"] == threads] or None


def host_ms(ms_per_block: dict[str, float]) -> float:
    """A profile row's host work per block: everything outside the two models' forwards."""
    return sum(ms_per_block[c] for c in HOST)


def host_ms_per_call(profile: dict, machine: str, threads: int, prompts: str = "short") -> dict[str, float] | None:
    """Each method's host work per target call (ms of a block outside its forwards) on the `prompts`
    group of a block profile made on `machine` at `threads` (`machine_rows`); None otherwise."""
    rows = [r for r in machine_rows(profile, machine, threads) or [] if r["prompts"] == prompts]
    return {r["method"]: host_ms(r["ms_per_block"]) for r in rows} or None


def render_profile(payload: dict) -> str:
    """profile.md: per method, thread count and prompt length, a block's milliseconds by part and the
    host share; then the target's verification forward by width."""
    setup = payload["setup"]
    lines = [
        "# Where a decoding block's time goes",
        "",
        f"Pair `{setup['pair']}` on the fast path, {setup['prompts_per_group']} prompts per group x "
        f"{setup['max_new_tokens']} new tokens; short: held-out chat requests, long: CNN/DailyMail articles "
        f"through the task's prompt. Target {setup['target_dtype']}, draft {setup['draft_dtype']}. Machine: "
        f"{setup['machine']}. Wall time {setup['wall_minutes']:.1f} min. Methods: "
        + "; ".join(f"{m} {p}" for m, p in setup["methods"].items())
        + ".",
        "",
        "Milliseconds per block (one target call after the prefill; the prompts' own forwards taken out). "
        "target/draft: inside their forwards; process: logits to p/q; sample: draws; accept: acceptance rules; "
        "drafting: chain, trie, tree and beam bookkeeping; mask: tree masks; commit: cache commits and crops; "
        "python: the rest of the block. host % = everything but the forwards.",
        "",
        "| method | threads | prompts | prompt tok | tokens/block | "
        + " | ".join(COLUMNS)
        + " | total | host % | ms/token |",
        "|---|---:|---|---:|---:|" + "---:|" * (len(COLUMNS) + 3),
    ]
    for r in payload["rows"]:
        ms = r["ms_per_block"]
        lines.append(
            f"| {r['method']} | {r['threads']} | {r['prompts']} | {r['mean_prompt_tokens']:.0f} | "
            f"{r['block_efficiency']:.2f} | "
            + " | ".join(f"{ms[c]:.2f}" for c in COLUMNS)
            + f" | {ms['total']:.1f} | {100 * r['host_share']:.1f} | {r['ms_per_token']:.1f} |"
        )
    lines += [
        "",
        "The target's block forward by width (new positions: the pending token plus drafted tokens or tree "
        "nodes), milliseconds per call (calls):",
        "",
        "| method | threads | prompts | widths |",
        "|---|---:|---|---|",
    ]
    for r in payload["rows"]:
        widths = ", ".join(f"{w}: {v['ms']:.1f} ({v['calls']})" for w, v in r["target_ms_by_width"].items())
        lines.append(f"| {r['method']} | {r['threads']} | {r['prompts']} | {widths} |")
    return "\n".join(lines) + "\n"
