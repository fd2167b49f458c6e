"""The statistical reproduction check on synthetic result sets: two machines that measure the
same thing agree; a machine whose block efficiency or perplexity really differs does not."""

import json
from pathlib import Path

import numpy as np

from mtad.report.agreement import compare_cells, compare_claims, main


def write_run(root: Path, seed: int, calls_scale: float = 1.0, logprob_shift: float = 0.0, examples: int = 30):
    """One experiment's cells (sampling and mtad on one task), per-example figures drawn at random."""
    rng = np.random.default_rng(seed)
    for method in ("sampling", "mtad"):
        cell = root / "table2" / "pair" / "cnndm" / method
        cell.mkdir(parents=True)
        (cell / "metrics.json").write_text(json.dumps({"status": "complete"}))
        lines = []
        for i in range(examples):
            tokens = 48
            calls = tokens if method == "sampling" else max(1, int(rng.binomial(tokens, 0.45) * calls_scale))
            accepted = 0 if method == "sampling" else tokens - calls
            stats = {
                "new_tokens": tokens,
                "target_calls": calls,
                "drafted": 0 if method == "sampling" else 4 * calls,
                "accepted": accepted,
                "seconds": 1.0,
            }
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
