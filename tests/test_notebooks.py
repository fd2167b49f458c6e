"""The plotting notebooks run headlessly (nbclient) against a small synthetic results tree,
show a DataFrame and their figures, and are committed without outputs."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("make_results", REPO / "tests" / "fixtures" / "make_results.py")
make_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_results)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    make_results.build(root / "runs")
    return root


def test_the_four_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == [
        "01_table2.ipynb",
        "02_gamma_sweep.ipynb",
        "03_beam_width_sweep.ipynb",
        "04_threshold_sweep.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip outputs (nbstripout)"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_the_fixture(path, results, monkeypatch):
    monkeypatch.setenv("MTAD_RESULTS", str(results))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"cells under {results / 'runs'}" in text  # read the fixture, not the checkout's results
    assert "pair tiny_fixture" in text  # the caption of the shown frame
    data = [o.get("data", {}) for o in outputs if o.output_type in ("execute_result", "display_data")]
    assert any("text/html" in d and "<table" in d["text/html"] for d in data), "no DataFrame shown"
    assert any("image/png" in d for d in data), "no figure shown"
    source = "\n".join(cell.source for cell in nb.cells)
    assert "from_pretrained" not in source and "load_pair" not in source and "plt." not in source
