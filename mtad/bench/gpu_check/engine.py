"""The decoding engine's names that the checks run over: its methods (the study's, from the method
registry `mtad.decoding.registry`) and its decode paths (`mtad.decoding.static_kv.DECODE_PATHS`), each read
from the engine's source when the engine cannot be imported (a python without torch still names
them in its dry run), and the subsets of those paths that some checks keep to."""

from __future__ import annotations

import ast
from pathlib import Path

DECODING_SOURCE = Path(__file__).resolve().parents[2] / "decoding"
STATIC_KV_SOURCE = DECODING_SOURCE / "static_kv.py"

# the paths that never compile: the exactness check and the cost curve run these (a compiled
# forward would compile again for every tiny model and every width's bucket)
UNCOMPILED_PATHS = ("eager", "static")
# the paths that compile on CUDA (fast reuses what compiled compiled): the decode-path check runs
# them after the others, and leaves compiled out on a CPU unless asked for it
COMPILING_PATHS = ("compiled", "fast")


def methods() -> tuple[str, ...]:
    """Every method of the study, in table order."""
    try:
        from mtad.decoding.registry import study_methods

        return study_methods()
    except Exception:  # noqa: BLE001 - the registry loads the engine, which needs torch; its source does not
        return source_methods(DECODING_SOURCE)


def decode_paths() -> tuple[str, ...]:
    """Every decode path of the engine, in its order."""
    try:
        from mtad.decoding.static_kv import DECODE_PATHS
    except Exception:  # noqa: BLE001 - the engine needs torch (a broken install as well); its source does not
        return tuple(source_literal(STATIC_KV_SOURCE, "DECODE_PATHS"))
    return tuple(DECODE_PATHS)


def source_methods(folder: Path) -> tuple[str, ...]:
    """The study's methods in table order as the method modules in `folder` declare them: the literal
    `name`, `order` and `study` of each `MethodSpec(...)` call in their source."""
    declared = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "MethodSpec":
                spec = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("name", "order", "study")}
                if spec.get("study", True):
                    declared.append((spec["order"], spec["name"]))
    return tuple(name for _, name in sorted(declared))


def source_literal(path: Path, name: str):
    """The literal that the module-level assignment `name = ...` of the source file `path` gives."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no module-level assignment of {name} in {path}")
