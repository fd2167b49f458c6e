"""The statistical reproduction check on synthetic result sets: two machines that measure the
same thing agree; a machine whose block efficiency or perplexity really differs does not."""

import json
from pathlib import Path

import numpy as np

from mtad.decode_stats import DecodeStats
from mtad.provenance import machine_label
from mtad.report.machine_agreement import compare_cells, compare_claims, main
from mtad.report.reproduce import record_differences


def env_record(dtype="float32", isa=("avx2",), torch="2.13.0+cpu", threads=1, cpu="AMD EPYC", **extra) -> dict:
    """An env.json record as the runner writes it (mtad.provenance.environment_record), the pair's
    dtypes `auto`."""
    return {
        "machine": f"{cpu} (2 CPUs)",
        "cpu": cpu,
        "cpu_isa": list(isa),
        "cpu_count": 2,
        "gpus": [],
        "dtype": dtype,
        "torch_threads": threads,
        "versions": {"torch": torch, "transformers": "5.25.0"},
        "kernels": {"target": None},
        "cell": {"pair": {"target_dtype": "auto", "draft_dtype": "auto"}},
        **extra,
    }


def write_run(
    root: Path,
    seed: int,
    calls_scale: float = 1.0,
    logprob_shift: float = 0.0,
    examples: int = 30,
    env: dict | None = None,
):
    """One experiment's cells (sampling and mtad on one task), per-example figures drawn at random;
    ``env``: each cell's env.json."""
    rng = np.random.default_rng(seed)
    for method in ("sampling", "mtad"):
        cell = root / "table2" / "pair" / "cnndm" / method
        cell.mkdir(parents=True)
        (cell / "metrics.json").write_text(json.dumps({"status": "complete"}))
        if env is not None:
            (cell / "env.json").write_text(json.dumps(env))
        lines = []
        for i in range(examples):
            tokens = 48
            calls = tokens if method == "sampling" else max(1, int(rng.binomial(tokens, 0.45) * calls_scale))
            accepted = 0 if method == "sampling" else tokens - calls
            drafted = 0 if method == "sampling" else 4 * calls
            stats = DecodeStats(
                new_tokens=tokens, target_calls=calls, drafted=drafted, accepted=accepted, seconds=1.0
            ).as_dict()  # a record as the runner writes it: every count
            turn = {
                "token_ids": [1] * tokens,
                "text": "x",
                "completion": "x",
                "stats": stats,
                "logprob_sum": -1.0,
                "logprob_n": tokens,
            }
            sample = {
                "mean_logprob": float(rng.normal(-1.0 + logprob_shift, 0.3)),
                "scores": {"rougeL": 0.2},
                "turns": [turn],
            }
            lines.append(json.dumps({"id": f"e{i}", "samples": [sample]}))
        (cell / "samples.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_two_machines_measuring_the_same_thing_agree(tmp_path):
    rows = compare_cells(write_run(tmp_path / "a", 0), write_run(tmp_path / "b", 1))
    figures = {r.what for r in rows}
    assert {"cnndm/mtad: block_efficiency", "cnndm/mtad: acceptance_rate", "cnndm/sampling: mean_logprob"} <= figures
    assert "cnndm/sampling: acceptance_rate" not in figures  # sampling drafts nothing
    assert all(r.agree for r in rows), [r for r in rows if not r.agree]


def test_a_real_difference_in_block_efficiency_or_perplexity_is_found(tmp_path):
    a = write_run(tmp_path / "a", 0)
    slower = {r.what: r.agree for r in compare_cells(a, write_run(tmp_path / "b", 1, calls_scale=1.6))}
    assert slower["cnndm/mtad: block_efficiency"] is False and slower["cnndm/sampling: mean_logprob"] is True
    worse = {r.what: r.agree for r in compare_cells(a, write_run(tmp_path / "c", 1, logprob_shift=-0.6))}
    assert worse["cnndm/mtad: mean_logprob"] is False
    assert main(["cells", str(a), str(tmp_path / "c")]) == 1 and main(["cells", str(a), str(tmp_path / "b")]) == 1
    assert main(["cells", str(a), str(write_run(tmp_path / "d", 2))]) == 0


def claim(name, estimate, se, verdict="inconclusive", task="chat"):
    return {
        "claim": name,
        "comparison": f"{name} figure",
        "task": task,
        "verdict": verdict,
        "interval": {
            "estimate": estimate,
            "low": estimate - 2 * se,
            "high": estimate + 2 * se,
            "standard_error": se,
            "n": 40,
        },
    }


def test_claims_agree_within_their_standard_errors_and_machine_figures_are_not_required():
    a = {"claims": [claim("C1", -0.08, 0.03, "reproduced"), claim("C3", 0.9, 0.02), claim("C5", 0.1, 0.01)]}
    b = {"claims": [claim("C1", -0.05, 0.03, "inconclusive"), claim("C3", 1.3, 0.02), claim("C5", 0.3, 0.01)]}
    rows = {r.what.split()[0]: r for r in compare_claims(a, b)}
    assert rows["C1"].agree is True and "reproduced / inconclusive" in rows["C1"].note
    assert rows["C3"].agree is None and "machine" in rows["C3"].note
    assert rows["C5"].agree is False


def test_cells_and_claim_rows_held_by_one_side_only_are_listed_as_not_run(tmp_path, capsys):
    import shutil

    a, b = write_run(tmp_path / "a", 0), write_run(tmp_path / "b", 1)
    shutil.rmtree(b / "table2" / "pair" / "cnndm" / "mtad")
    rows = {r.what: r for r in compare_cells(a, b)}
    assert rows["cnndm/mtad"].agree is None and rows["cnndm/mtad"].note == f"not run: cell missing from {b}"
    main(["cells", str(a), str(b)])
    assert "1 held by one side only" in capsys.readouterr().out
    claims = {r.what: r for r in compare_claims({"claims": [claim("C1", 0.1, 0.01)]}, {"claims": []})}
    assert claims["C1 C1 figure (chat)"].note == "not run: row missing from B"


def test_the_records_name_each_cause_of_an_inexact_reproduction_with_both_values():
    assert record_differences(env_record(), env_record()) == []
    found = record_differences(
        env_record(), env_record(dtype="bfloat16", isa=("avx2", "avx512_bf16"), torch="2.14.0+cpu", threads=2)
    )
    assert found == [
        "target dtype: A float32, B bfloat16",
        "draft dtype: A float32, B bfloat16",
        "CPU instruction sets: A avx2, B avx2/avx512_bf16",
        "torch: A 2.13.0+cpu, B 2.14.0+cpu",
        "torch threads: A 1, B 2",
    ]
    assert record_differences(env_record(), env_record(cpu="Intel Xeon")) == [
        "machine: A AMD EPYC (2 CPUs), B Intel Xeon (2 CPUs)"
    ]


def test_a_machine_label_carries_instruction_sets_and_target_dtype():
    assert machine_label(env_record(isa=("avx2", "avx512f")), "bfloat16") == (
        "AMD EPYC (2 CPUs, avx2/avx512f), target bfloat16"
    )


def verdict_and_after(output: str) -> list[str]:
    """The output's lines from the verdict on (it follows the table)."""
    lines = output.strip().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert all(line.startswith("|") for line in lines[at - 3 : at - 1])  # the table ends just above it
    return lines[at:]


def test_an_exact_rerun_is_reported_reproduced_exactly(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", 0, env=env_record()), write_run(tmp_path / "b", 0, env=env_record())
    assert main(["cells", str(a), str(b), "--experiment", "table2"]) == 0
    out = capsys.readouterr().out
    assert verdict_and_after(out) == ["verdict: reproduced exactly (2 of 2 cells)"]
    assert f"`{a}` (AMD EPYC (2 CPUs, avx2), target float32) (A)" in out


def test_an_inexact_rerun_that_agrees_names_the_records_differences(tmp_path, capsys):
    a = write_run(tmp_path / "a", 0, env=env_record())
    b = write_run(tmp_path / "b", 1, env=env_record(dtype="bfloat16", isa=("avx2", "avx512_bf16")))
    assert main(["cells", str(a), str(b), "--experiment", "table2"]) == 0
    out = capsys.readouterr().out
    assert "(AMD EPYC (2 CPUs, avx2/avx512_bf16), target bfloat16) (B)" in out
    (line,) = verdict_and_after(out)
    assert line.startswith("verdict: agrees within intervals (")
    assert line.endswith(
        " figures; exact reproduction not expected: target dtype: A float32, B bfloat16; draft dtype: A float32, "
        "B bfloat16; CPU instruction sets: A avx2, B avx2/avx512_bf16)"
    )


def test_an_inexact_rerun_on_the_same_records_is_a_real_difference(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", 0, env=env_record()), write_run(tmp_path / "b", 1, env=env_record())
    main(["cells", str(a), str(b)])
    (line,) = verdict_and_after(capsys.readouterr().out)
    assert line.endswith("with the same dtype, ISA, versions, threads and machine: a real difference)")
    write_run(tmp_path / "c", 1)  # no env.json: nothing can be ruled out
    main(["cells", str(a), str(tmp_path / "c")])
    (line,) = verdict_and_after(capsys.readouterr().out)
    assert line.endswith("exact reproduction not expected: env.json: not recorded by B)")


def test_figures_outside_their_intervals_are_listed_after_the_verdict(tmp_path, capsys):
    a = write_run(tmp_path / "a", 0, env=env_record())
    b = write_run(tmp_path / "b", 1, calls_scale=1.6, env=env_record())
    assert main(["cells", str(a), str(b)]) == 1
    verdict, *listed = verdict_and_after(capsys.readouterr().out)
    assert verdict.startswith("verdict: differs (")
    assert "figures outside their intervals: listed below; " in verdict
    assert listed and all(line.startswith("- cnndm/") for line in listed)
    assert any(line.startswith("- cnndm/mtad: block_efficiency: A ") for line in listed)
