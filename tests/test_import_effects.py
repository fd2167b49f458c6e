"""Importing mtad's modules has no effects: no subprocess (git), no Hydra config registered, no
config directory resolved. Entry points do these in their main (provenance.capture, configs.setup)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

IMPORT_EVERYTHING = """
import importlib, pkgutil, subprocess, sys
calls = []
def refuse(*args, **kwargs):
    calls.append(args[0] if args else kwargs.get("args"))
    raise RuntimeError("a subprocess at import")
subprocess.run = subprocess.Popen = subprocess.check_output = refuse
import mtad.configs as configs
looked = []
configs.conf_dir = lambda *a, **k: looked.append(1)
import mtad
skip = ("mtad.tasks.humaneval.sandbox_child",)  # the sandboxed program itself, run as a script
names = [m.name for m in pkgutil.walk_packages(mtad.__path__, "mtad.") if m.name not in skip]
for name in names:
    importlib.import_module(name)
from hydra.core.config_store import ConfigStore
groups = sorted(k for k in ConfigStore.instance().repo if k.endswith("_defaults"))
from mtad import provenance
print(len(names), calls, groups, looked, provenance._process_state)
"""


def test_importing_every_module_runs_nothing():
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    count, rest = out.stdout.strip().split(" ", 1)
    assert int(count) > 60 and rest == "[] [] [] None", out.stdout
