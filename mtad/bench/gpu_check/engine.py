"""The decoding engine's names that the checks run over: its methods (`mtad.methods.METHODS`,
torch-free) and its decode paths (`mtad.decoding.static_kv.DECODE_PATHS`, read from the engine's
source when the engine cannot be imported: a python without torch still names them in its dry run),
and the subsets of those paths that some checks keep to."""

from __future__ import annotations

import ast
from pathlib import Path

from mtad.methods import METHODS

STATIC_KV_SOURCE = Path(__file__).resolve().parents[2] / "decoding" / "static_kv.py"

# the paths that never compile: the exactness check and the cost curve run these (a compiled
# forward would compile again for every tiny model and every width's bucket)
UNCOMPILED_PATHS = ("eager", "static")
# the paths that compile on CUDA (fast reuses what compiled compiled): the decode-path check runs
# them after the others, and leaves compiled out on a CPU unless asked for it
COMPILING_PATHS = ("compiled", "fast")


def methods() -> tuple[str, ...]:
    """Every method of the study, in table order."""
    return tuple(METHODS)


def decode_paths() -> tuple[str, ...]:
    """Every decode path of the engine, in its order."""
    try:
        from mtad.decoding.static_kv import DECODE_PATHS
    except Exception:  # noqa: BLE001 - the engine needs torch (a broken install as well); its source does not
        return tuple(source_literal(STATIC_KV_SOURCE, "DECODE_PATHS"))
    return tuple(DECODE_PATHS)


def source_literal(path: Path, name: str):
    """The literal that the module-level assignment `name = ...` of the source file `path` gives."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"no module-level assignment of {name} in {path}")
