"""The package's layers, read from the source (ast, nothing imported). From the ground up:

- the shared facts (``stats``, ``paper``, ``records``, ``result_files``, ``split``, ``decode_stats``,
  ``markdown``, ``provenance``, ``devices``, ``data``, ``tracking``, ``configs``) import nothing that
  runs a cell, reports, trains or benchmarks;
- the decoding engine and the tasks nothing from the draft architectures or distillation;
- one generation as every measurement runs it (``generation``: build, seed, time) nothing but the
  engine, the devices and the records' seeding rule;
- the metrics nothing from the models or above; the model layer nothing from distillation, the
  report or the runner;
- the runner nothing above it; the report nothing that runs (decoding, models, cells, experiments);
- distillation nothing from the benchmark, the runner, the report or the experiments; the bench
  nothing from the runner's cells, the report or the experiments;
- the experiments' modules nothing from the report, except the claims command, which runs the
  claims experiment and then writes its report, nothing from distillation, except the draft
  measurement, which runs the draft's cells and then computes the figures distillation defines, and
  nothing from the bench, except the bench and the block profile, which run their cells and then
  read them into the rows the bench defines;
- the regeneration of every committed result (``regeneration``, `make results`) nothing that a step
  runs or reports: it runs each step through make.

Every top-level module and subpackage of ``mtad`` has a rule here: a new one fails the test until
it is given its place. Every layer may read the method registry (``mtad.decoding.registry``),
plain records that the engine's method modules declare."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mtad"

RUNS_CELLS = ("mtad.run", "mtad.runner", "mtad.experiments")
ABOVE_FACTS = (*RUNS_CELLS, "mtad.report", "mtad.distill", "mtad.bench", "mtad.models")

# place (subpackage, or module file) -> the modules none of its files may import
FORBIDDEN = {
    "stats": ("mtad.decoding", "mtad.tasks", "mtad.metrics", *ABOVE_FACTS),
    "paper.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "decode_stats.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "markdown.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "records.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "result_files.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "split.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "data.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", *ABOVE_FACTS),
    "tracking.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", *ABOVE_FACTS),
    "devices.py": ("mtad.decoding", "mtad.tasks", "mtad.metrics", *ABOVE_FACTS),  # the engine syncs through it
    "provenance.py": ABOVE_FACTS,
    "configs.py": ABOVE_FACTS,
    "decoding": ("mtad.models", "mtad.distill", "mtad.metrics", "mtad.generation", *ABOVE_FACTS),  # stats: decode_stats
    # one generation as every measurement runs it: the engine, the devices and the seeding rule only
    "generation.py": ("mtad.tasks", "mtad.metrics", "mtad.stats", *ABOVE_FACTS),
    "tasks": ("mtad.models", "mtad.distill", "mtad.decoding", *ABOVE_FACTS),
    "metrics": ABOVE_FACTS,
    "models": ("mtad.distill", "mtad.report", "mtad.bench", *RUNS_CELLS),
    "runner": ("mtad.experiments", "mtad.report", "mtad.distill", "mtad.bench", "mtad.run"),
    "run.py": ("mtad.experiments", "mtad.report", "mtad.distill", "mtad.bench"),
    # the report only reads cells: nothing that runs a model, a cell or an experiment
    "report": (
        "mtad.experiments",
        "mtad.run",
        "mtad.runner.cell",
        "mtad.runner.loop",
        "mtad.runner.session",
        "mtad.decoding",
        "mtad.generation",
        "mtad.models",
        "mtad.distill",
        "mtad.bench",
    ),
    "distill": ("mtad.bench", "mtad.report", *RUNS_CELLS),
    "bench": ("mtad.distill", "mtad.report", *RUNS_CELLS),
    "experiments": ("mtad.report", "mtad.distill", "mtad.bench"),
    # `make results`: every step runs through make; the pin and the stamps come from the models and provenance
    "regeneration.py": ("mtad.report", "mtad.distill", "mtad.bench", *RUNS_CELLS),
}
# what every layer may read: the method registry, plain records the engine's modules declare
EVERYWHERE = ("mtad.decoding.registry",)
# file -> imports its place forbids that it alone may make, and why
ALLOWED = {
    "experiments/claims.py": ("mtad.report",),
    # the bench: its timed generations as cells, then the rows, curve and report the bench defines
    "experiments/bench_cells.py": ("mtad.bench",),
    # the block profile: its generations as cells, then the rows the bench's profile defines
    "experiments/block_profiles.py": ("mtad.bench",),  # the claims command: run the experiment, then write its report
    # the draft measurement: run the draft's cells, then the draft's figures (distillation's) from them
    "experiments/drafts.py": ("mtad.distill",),
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


def place_files(root: Path, place: str) -> list[Path]:
    """The source files of a place: a module file, or every file under a subpackage."""
    path = root / place
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def violations(root: Path, place: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file:line imports name` for every forbidden import in `root`/`place` (a subpackage or a
    module file), less what ``ALLOWED`` lets a file import."""
    out = []
    for path in place_files(root, place):
        allowed = ALLOWED.get(path.relative_to(root).as_posix(), ())
        for line, name in imported_names(path, root):
            hit = any(name == f or name.startswith(f + ".") for f in forbidden)
            allowed_here = (*allowed, *EVERYWHERE)
            if hit and not any(name == a or name.startswith(a + ".") for a in allowed_here):
                out.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return sorted(set(out))


@pytest.mark.parametrize("place", list(FORBIDDEN))
def test_lower_layers_do_not_import_higher_ones(place):
    assert (PACKAGE / place).exists()
    assert violations(PACKAGE, place, FORBIDDEN[place]) == []


def test_every_module_and_subpackage_has_a_place():
    places = {p.name for p in PACKAGE.iterdir() if (p.suffix == ".py" and p.name != "__init__.py")}
    places |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert sorted(places - set(FORBIDDEN)) == []


def test_an_allowed_import_is_allowed_only_to_its_file(tmp_path):
    root = tmp_path / "mtad"
    (root / "experiments").mkdir(parents=True)
    (root / "experiments" / "claims.py").write_text("from mtad.report.claims_report import publish\n")
    (root / "experiments" / "theory.py").write_text("from mtad.stats import intervals\nfrom mtad.report import x\n")
    assert violations(root, "experiments", FORBIDDEN["experiments"]) == [
        "mtad/experiments/theory.py:2 imports mtad.report",
        "mtad/experiments/theory.py:2 imports mtad.report.x",
    ]


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
        "    from mtad.distill.draft_measurement import measure\n"
        "    importlib.import_module('mtad.models.tiny')\n"
        "import mtad.modelsx\n"  # another package that only starts alike
        "from mtad.decoding import kv\n"
    )
    found = violations(root, "decoding", FORBIDDEN["decoding"])
    assert sorted({int(v.split(":")[1].split()[0]) for v in found}) == [1, 2, 3, 5, 6, 8, 9]


def test_the_readme_layout_names_every_module():
    """Each row of the README's layout table that names a package (`mtad/<package>/`) names every
    module of it, and every top-level module is named in some row."""
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme[readme.index("## Layout") :].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in layout.splitlines() if line.startswith("| `")}
    missing = []
    for package in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        row = next((text for where, text in rows.items() if f"`mtad/{package.name}/`" in where), None)
        if row is None:
            missing.append(f"mtad/{package.name}/ (no row)")
            continue
        for module in sorted(package.rglob("*.py")):
            if module.name != "__init__.py" and f"`{module.name}`" not in row:
                missing.append(str(module.relative_to(PACKAGE.parent)))
    for module in sorted(PACKAGE.glob("*.py")):
        if module.name != "__init__.py" and f"`mtad/{module.name}`" not in layout:
            missing.append(str(module.relative_to(PACKAGE.parent)))
    assert missing == []
