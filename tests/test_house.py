"""House rules read from the source (nothing imported): a module's file name says what it holds, so
no two modules of the package share one (package markers and the per-family `base`/`task` aside)."""

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
