"""The package's layers, read from the source (ast, nothing imported): the decoding engine and
the tasks import nothing from the draft architectures or distillation, the model layer (pairs,
loading, draft architectures) nothing from distillation, the report or the runner, the report
nothing that runs (decoding, models, cells, experiments), and the runner nothing above it."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mtad"

# subpackage -> the packages none of its modules may import
FORBIDDEN = {
    "decoding": ("mtad.models", "mtad.distill"),
    "tasks": ("mtad.models", "mtad.distill"),
    "models": ("mtad.distill", "mtad.report", "mtad.runner"),
    # the report only reads cells: nothing that runs a model, a cell or an experiment
    "report": (
        "mtad.experiments",
        "mtad.run",
        "mtad.runner.cell",
        "mtad.runner.loop",
        "mtad.decoding",
        "mtad.models",
        "mtad.distill",
    ),
    "runner": ("mtad.experiments", "mtad.report", "mtad.distill"),
}


def imported_names(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of everything `path` imports, relative imports resolved against
    its package under `root`; `from a import b` yields both a and a.b (b may be a module)."""
    package = list(path.parent.relative_to(root.parent).parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(root: Path, subpackage: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file:line imports name` for every forbidden import in `root`/`subpackage`."""
    out = []
    for path in sorted((root / subpackage).rglob("*.py")):
        for line, name in imported_names(path, root):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return sorted(set(out))


@pytest.mark.parametrize("subpackage", list(FORBIDDEN))
def test_lower_layers_do_not_import_higher_ones(subpackage):
    assert (PACKAGE / subpackage).is_dir()
    assert violations(PACKAGE, subpackage, FORBIDDEN[subpackage]) == []


def test_the_check_sees_every_form_of_import(tmp_path):
    root = tmp_path / "mtad"
    (root / "decoding" / "inner").mkdir(parents=True)
    (root / "decoding" / "inner" / "deep.py").write_text(
        "import mtad.models.draft\n"
        "from mtad.models import load_pair\n"
        "from mtad import models\n"
        "from ..models.head import FeatureHead\n"  # mtad.decoding.models: not the model layer
        "from ...models.head import FeatureHead\n"
        "from ... import distill\n"
        "def f():\n"
        "    from mtad.distill.measure import measure\n"
        "    importlib.import_module('mtad.models.tiny')\n"
        "import mtad.modelsx\n"  # another package that only starts alike
        "from mtad.decoding import kv\n"
    )
    found = violations(root, "decoding", FORBIDDEN["decoding"])
    assert sorted({int(v.split(":")[1].split()[0]) for v in found}) == [1, 2, 3, 5, 6, 8, 9]
