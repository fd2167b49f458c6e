"""Compare a rerun of cells with a reference run: what must reproduce exactly does.

Discrete outcomes must be identical: every generated token, the decoders' counts and so block
efficiency and acceptance, and the task scores. Real-valued ones (log-probabilities, perplexity)
must agree within a relative tolerance set by the cells' dtype (``FLOAT_RTOL``): another BLAS
kernel sums in another order, which moves a float64 log-probability by ~1e-14 and a float32 one
by ~1e-5. Another CPU type moves a float64 cell's log-probabilities further (``ACROSS_CPU_RTOL``:
its norms compute in float32), still far too little to flip a sampling decision, so a float64
reference reproduces its tokens on another x86 CPU; in float32 the same change (~5e-5 relative
over an answer, measured between kernels) can flip a sampling or acceptance decision, and the
tokens diverge after it. A
token difference is reported with its first position. Not compared:
wall-clock figures (tokens/s, seconds, speed-ups), energy and peak memory.

    from mtad.report.reproduce import compare_runs
    differences = compare_runs("results/verify", "/tmp/rerun")   # [] when everything matches
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mtad.decode_stats import COUNTS, EXACT_RATIOS, EXACT_STATS
from mtad.provenance import isa_label, machine_label
from mtad.records import read_json, read_records
from mtad.report.cells import find_cells, model_dtypes
from mtad.runner.layout import ENV, METRICS, SAMPLES

EXACT_METRICS = ("status", "examples", "samples", "generations", *COUNTS, *EXACT_RATIOS, "scores")
CLOSE_METRICS = ("perplexity", "mean_logprob")
EXACT_TURN_FIELDS = ("token_ids", "text", "completion", "logprob_n", "prompt_tokens")
CLOSE_TURN_FIELDS = ("logprob_sum",)
# relative tolerance on real-valued fields, by the reference's dtype (env.json "dtype"): a few
# hundred times the differences measured between BLAS kernels (AVX-512 vs AVX2 vs SSE builds of
# the same torch), far below any change in the tokens
FLOAT_RTOL = {"float64": 1e-10, "float32": 1e-4}
DEFAULT_RTOL = 1e-2  # half precision
# on another CPU type a "float64" cell is float64 only between its norms: transformers' RMSNorm
# computes in float32 whatever its input, and those roundings differ between CPU types (measured:
# an AMD EPYC reference rerun on an Intel Xeon, same torch, moved log-probabilities by up to 8.2e-7
# relative, while torch's SSE, AVX2 and AVX-512 kernels on one CPU moved them by <= 1.5e-13). The
# tokens, counts and scores must still be identical.
ACROSS_CPU_RTOL = {"float64": 1e-5}
NOT_RECORDED = "not recorded"


def _records(directory: Path) -> dict[str, dict]:
    return {r["id"]: r for r in read_records(directory / SAMPLES)}


def tolerance(cell: Path, across_cpus: bool = False) -> float:
    """The relative tolerance for a cell's real-valued fields: its least precise dtype decides,
    wider when the cell is compared with one computed on another CPU type."""
    dtypes = [d for d in str(read_json(cell / ENV).get("dtype", "")).split(",") if d]
    rtol = {d: FLOAT_RTOL.get(d, DEFAULT_RTOL) for d in dtypes}
    if across_cpus:
        rtol = {d: max(r, ACROSS_CPU_RTOL.get(d, r)) for d, r in rtol.items()}
    return max(rtol.values(), default=DEFAULT_RTOL)


def other_cpu(reference: Path, candidate: Path) -> bool:
    """Whether two cells ran on different CPU types: env.json's "cpu" (unknown counts as the same) or,
    under one model name, its instruction sets (they pick the kernels, and so the rounding)."""
    envs = [read_json(cell / ENV) for cell in (reference, candidate)]
    cpus = {env.get("cpu") for env in envs}
    isas = {tuple(env["cpu_isa"]) for env in envs if "cpu_isa" in env}
    return len(cpus - {None}) > 1 or len(isas) > 1


def close(a, b, rtol: float) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=rtol)


def first_difference(a: list, b: list) -> int:
    """The first index where two token lists differ (the shorter length if one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def example_ids(cell: Path) -> set[str]:
    return set(_records(cell))


def compare_cell(reference: Path, candidate: Path, name: str, shared_only: bool = False) -> list[str]:
    """Differences in what must reproduce between two cells of the same identity; `shared_only`:
    only the examples both hold (a partial cell: its totals cannot equal the whole cell's)."""
    if not (candidate / METRICS).exists():
        return [f"{name}: the rerun wrote no metrics.json"]
    out = []
    across = other_cpu(reference, candidate)
    rtol = max(tolerance(reference, across), tolerance(candidate, across))
    ref_metrics, new_metrics = read_json(reference / METRICS), read_json(candidate / METRICS)
    for key in () if shared_only else EXACT_METRICS:
        if ref_metrics.get(key) != new_metrics.get(key):
            out.append(f"{name}: {key} {ref_metrics.get(key)!r} -> {new_metrics.get(key)!r}")
    for key in () if shared_only else CLOSE_METRICS:
        if not close(ref_metrics.get(key), new_metrics.get(key), rtol):
            out.append(f"{name}: {key} {ref_metrics.get(key)!r} -> {new_metrics.get(key)!r} (beyond rtol {rtol:g})")
    ref_records, new_records = _records(reference), _records(candidate)
    if sorted(ref_records) != sorted(new_records) and not shared_only:
        out.append(f"{name}: example ids {sorted(ref_records)} -> {sorted(new_records)}")
    for example_id in sorted(set(ref_records) & set(new_records)):
        pairs = zip(ref_records[example_id]["samples"], new_records[example_id]["samples"])
        for s, (ref_sample, new_sample) in enumerate(pairs):
            for t, (ref_turn, new_turn) in enumerate(zip(ref_sample["turns"], new_sample["turns"])):
                where = f"{name}: example {example_id} sample {s} turn {t}"
                for key in EXACT_TURN_FIELDS:
                    if ref_turn.get(key) != new_turn.get(key):
                        at = (
                            f" from token {first_difference(ref_turn[key], new_turn[key])}"
                            if key == "token_ids" and ref_turn.get(key) and new_turn.get(key)
                            else ""
                        )
                        out.append(
                            f"{where}: {key} differs{at} ({_short(ref_turn.get(key))} -> {_short(new_turn.get(key))})"
                        )
                for key in CLOSE_TURN_FIELDS:
                    if not close(ref_turn.get(key), new_turn.get(key), rtol):
                        out.append(
                            f"{where}: {key} differs beyond rtol {rtol:g} ({ref_turn.get(key)!r} -> "
                            f"{new_turn.get(key)!r})"
                        )
                for key in EXACT_STATS:
                    if ref_turn["stats"].get(key) != new_turn["stats"].get(key):
                        out.append(
                            f"{where}: stats.{key} {ref_turn['stats'].get(key)!r} -> {new_turn['stats'].get(key)!r}"
                        )
    return out


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def compare_runs(reference_root: str | Path, candidate_root: str | Path) -> list[str]:
    """Every difference between the reference cells and the rerun's cells of the same path."""
    reference_root, candidate_root = Path(reference_root), Path(candidate_root)
    cells = find_cells(reference_root)
    if not cells:
        return [f"no reference cells under {reference_root}"]
    out = []
    for reference in cells:
        relative = reference.relative_to(reference_root)
        out += compare_cell(reference, candidate_root / relative, str(relative))
    return out


def record_facts(env: dict) -> dict[str, str]:
    """What a cell's tokens depend on besides its settings, from its env.json record, as printable
    values in the order a difference is named: the dtypes, the CPU's instruction sets, each
    library's version, the product kernels the instruction sets pick, the threads (they split the
    sums), the machine itself. What the record lacks reads "not recorded", never a guess."""
    pair = (env.get("cell") or {}).get("pair") or {}
    dtypes = model_dtypes(pair, env.get("dtype"))
    ran = f"one of {env['dtype']}" if env.get("dtype") else NOT_RECORDED  # several, the pair's setting `auto`
    cpu = f"{env['cpu']} ({env.get('cpu_count')} CPUs)" if env.get("cpu") else env.get("machine") or NOT_RECORDED
    return {
        "target dtype": dtypes[0] or ran,
        "draft dtype": dtypes[1] or ran,
        "CPU instruction sets": isa_label(env["cpu_isa"]) if "cpu_isa" in env else NOT_RECORDED,
        **{name: str(version) for name, version in (env.get("versions") or {}).items()},
        "kernels": json.dumps(env["kernels"], sort_keys=True),
        "torch threads": str(env.get("torch_threads", NOT_RECORDED)),
        "machine": cpu + "".join(f" + {gpu}" for gpu in env.get("gpus") or []),
    }


def record_differences(env_a: dict, env_b: dict, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """Why two cells' tokens may differ, from their env.json records: each ``record_facts`` fact
    that differs, named with both values (`target dtype: A float32, B bfloat16`). [] when the
    records agree on all."""
    facts = record_facts(env_a), record_facts(env_b)
    out = []
    for key in dict.fromkeys([*facts[0], *facts[1]]):
        values = [f.get(key, NOT_RECORDED) for f in facts]
        if values[0] != values[1]:
            out.append(f"{key}: {names[0]} {values[0]}, {names[1]} {values[1]}")
    return out


def recorded_machine(cell: Path) -> str:
    """The machine a cell ran on as its env.json records it, instruction sets and target dtype
    included (``mtad.provenance.machine_label``); "machine not recorded" without env.json."""
    env = read_json(Path(cell) / ENV)
    if not env:
        return "machine not recorded"
    return machine_label(env, model_dtypes((env.get("cell") or {}).get("pair") or {}, env.get("dtype"))[0])


def machine_differences(
    reference_root: str | Path,
    candidate_root: str | Path,
    cells: list[str | Path] | None = None,
    names: tuple[str, str] = ("reference", "here"),
) -> list[str]:
    """Where the rerun's records differ from the reference's (``record_differences``) over the
    reference's cells, or the named ``cells`` (paths relative to both roots): exact reproduction is
    only expected where they agree."""
    reference_root, candidate_root = Path(reference_root), Path(candidate_root)
    relative = cells if cells is not None else [c.relative_to(reference_root) for c in find_cells(reference_root)]
    out: dict[str, None] = {}
    for name in relative:
        envs = read_json(reference_root / name / ENV), read_json(candidate_root / name / ENV)
        unrecorded = [side for side, env in zip(names, envs) if not env]
        if unrecorded:  # nothing to compare, so nothing ruled out
            out[f"env.json: not recorded by {' and '.join(unrecorded)}"] = None
        else:
            out.update(dict.fromkeys(record_differences(*envs, names)))
    return list(out)
