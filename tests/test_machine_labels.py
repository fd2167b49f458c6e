"""Where a machine is labelled for a comparison, the label carries what decides its rounding: the
instruction sets and the target dtype."""

import importlib.util
import json
from pathlib import Path

from mtad.report.cells import load_cells
from mtad.report.tables import table2, to_markdown

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)


def header_machine(runs: Path) -> str:
    markdown = to_markdown(table2(load_cells(runs)), "table2")
    return next(line for line in markdown.splitlines() if line.startswith("- machine: "))


def test_the_table2_header_labels_the_machine_with_its_instruction_sets_and_target_dtype(tmp_path):
    for method in ("sampling", "sps"):
        cell = make_results.write_cell(tmp_path / "runs", "table2", "cnndm", method)
        env = json.loads((cell / "env.json").read_text())
        env |= {"cpu": "Fixture CPU", "cpu_count": 2, "cpu_isa": ["avx2", "avx512f"], "dtype": "bfloat16,float32"}
        env["cell"]["pair"] |= {"target_dtype": "auto", "draft_dtype": "float32"}
        (cell / "env.json").write_text(json.dumps(env))
    assert header_machine(tmp_path / "runs") == "- machine: Fixture CPU (2 CPUs, avx2/avx512f), dtype bfloat16,float32"
    for cell in (tmp_path / "runs").rglob("env.json"):  # the models ran in one dtype: the target's is known
        cell.write_text(json.dumps(json.loads(cell.read_text()) | {"dtype": "bfloat16"}))
    assert header_machine(tmp_path / "runs") == "- machine: Fixture CPU (2 CPUs, avx2/avx512f), target bfloat16"


def test_a_measured_dtype_and_the_targets_kernels_are_named(tmp_path):
    for method in ("sampling", "sps"):
        cell = make_results.write_cell(tmp_path / "runs", "table2", "cnndm", method)
        env = json.loads((cell / "env.json").read_text())
        env |= {"cpu": "Fixture CPU", "cpu_count": 2, "cpu_isa": ["avx512_bf16"], "dtype": "bfloat16"}
        by_width = {"1": "native", "2-4": "zentorch", "5-17": "zentorch", "wider": "onednn"}
        env |= {"kernels": {"target": {"by_width": by_width, "source": "cached"}}, "dtype_choice": {"source": "stored"}}
        (cell / "env.json").write_text(json.dumps(env))
    assert header_machine(tmp_path / "runs") == (
        "- machine: Fixture CPU (2 CPUs, avx512_bf16), target bfloat16 (auto: measured), "
        "kernels 1 native, 2-17 zentorch, wider onednn"
    )
