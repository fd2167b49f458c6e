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
