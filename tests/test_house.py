"""House rules read from the source and the committed results:

- a module's file name says what it holds, so no two modules of the package share one (package
  markers and the per-family `base`/`task` aside);
- one module outside the engine builds decoders (`mtad.generation`);
- records spell a dtype one way (`provenance.dtype_name`);
- every committed JSON result outside the cells is a file of one of the three kinds of
  `mtad.result_files`, named for its kind or a stem of it;
- no function in the package or the scripts is over sixty lines."""

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_NAMES = {"__init__.py", "base.py", "task.py"}  # a package's marker, a family's base class, a task's module


def test_no_two_modules_share_a_file_name():
    where = defaultdict(list)
    for path in (ROOT / "mtad").rglob("*.py"):
        if path.name not in SHARED_NAMES:
            where[path.name].append(str(path.relative_to(ROOT)))
    repeated = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not repeated, f"modules sharing a file name: {repeated}"


def _builds_a_decoder(path: Path) -> bool:
    """Whether a module calls `get_decoder(` or `DECODERS[...](`: builds a decoder itself."""
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "get_decoder":
                return True
            if isinstance(f, ast.Attribute) and f.attr == "get_decoder":
                return True
            if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id == "DECODERS":
                return True
    return False


def test_one_module_outside_the_engine_builds_decoders():
    """Every measurement builds its decoders through `mtad.generation.build_decoder`, so a method's
    settings reach the engine one way, and is seeded and timed by one rule."""
    builders = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "mtad").rglob("*.py")
        if "decoding" not in p.relative_to(ROOT / "mtad").parts[:1] and _builds_a_decoder(p)
    )
    assert builders == ["mtad/generation.py"]


def test_the_builder_count_sees_every_form(tmp_path):
    """The check finds a call by name, through the package, and through the registry."""
    forms = ["get_decoder('sps', t)", "mtad.decoding.get_decoder('sps', t)", "DECODERS['sps'](target=t)"]
    for i, form in enumerate(forms):
        (tmp_path / f"m{i}.py").write_text(f"x = {form}\n")
        assert _builds_a_decoder(tmp_path / f"m{i}.py"), form
    (tmp_path / "no.py").write_text("DECODERS['sps'].settings(gamma=2)\n")
    assert not _builds_a_decoder(tmp_path / "no.py")


def test_every_result_file_spells_a_dtype_one_way():
    """Records spell a dtype as `provenance.dtype_name` does ("bfloat16"), never torch's repr
    ("torch.bfloat16"), so that no reader strips a prefix of its own."""
    import re

    torch_repr = re.compile(r'"torch\.(float16|bfloat16|float32|float64)"')
    found = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "results").rglob("*")
        if p.suffix in (".json", ".jsonl") and torch_repr.search(p.read_text())
    ]
    assert found == []


def test_dtype_name_spells_models_dtypes_and_formats():
    import torch

    from mtad.provenance import dtype_name

    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert dtype_name(model) == dtype_name(torch.bfloat16) == dtype_name("torch.bfloat16") == "bfloat16"
    model.mtad_dtype = "q4_1"  # a quantized target names its format
    assert dtype_name(model) == "q4_1"


MAX_FUNCTION_LINES = 60


def test_no_function_is_over_sixty_lines():
    """Small functions (decorators and docstring counted) in the package and the scripts."""
    import ast

    long = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for folder in ("mtad", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def committed_result_files() -> list[Path]:
    """The committed JSON files under results/ outside the cells (runs/, verify/) and the local runs."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True).stdout
    outside = ("results/runs/", "results/verify/", "results/local/")
    return [ROOT / f for f in listed.split() if f.endswith(".json") and not f.startswith(outside)]


def test_every_result_file_outside_the_cells_is_one_of_three_kinds():
    from mtad.result_files import KINDS, read_file

    files = committed_result_files()
    assert files, "no committed result file found"
    kinds = {}
    for path in files:
        kind = next((k for k in KINDS.values() if path.stem.startswith(k.name)), None)
        assert kind is not None, f"{path.relative_to(ROOT)} is not named for a kind of mtad.result_files"
        assert read_file(kind, path.parent, path.stem), f"{path.relative_to(ROOT)} holds no section"
        kinds[kind.name] = kinds.get(kind.name, 0) + 1
    assert len(KINDS) <= 3 and set(kinds) <= set(KINDS)
