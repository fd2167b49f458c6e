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


def test_a_relative_mtad_results_is_taken_from_the_repository_root(results, tmp_path, monkeypatch):
    """Wherever the notebook runs (its own folder, a home directory), `MTAD_RESULTS=results/local` means
    the checkout's results/local; a results root and its runs folder name the same cells."""
    import os

    from mtad.report.sweeps import runs_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a relative name taken from here would find nothing
    relative = os.path.relpath(results, REPO)
    for named in (relative, os.path.join(relative, "runs"), str(results)):
        monkeypatch.setenv("MTAD_RESULTS", named)
        assert runs_dir().resolve() == (results / "runs").resolve()


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_folder_without_cells_fails_naming_it_and_the_command_that_fills_it(state, tmp_path, monkeypatch):
    from mtad.report.roots import NoResults
    from mtad.report.sweeps import runs_dir

    root = tmp_path / "mine"
    if state == "empty":
        (root / "runs" / "table2").mkdir(parents=True)  # folders, no cell
    monkeypatch.setenv("MTAD_RESULTS", str(root))
    with pytest.raises(NoResults) as err:
        runs_dir()
    message = str(err.value)
    looked = root / "runs" if state == "empty" else root
    assert f"no results at {looked} (MTAD_RESULTS={root})" in message and "make reproduce-table2" in message
