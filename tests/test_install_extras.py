"""`make install` installs what the docs tell a user to run: the extras its recipe names hold the tools
the READMEs call (jupyter lab for the notebooks), with no separate pip step left to the user."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")


def installed_requirements() -> list[str]:
    """The requirements of every extra that the Makefile's install recipe installs on every machine
    (`-e ".[a,b$$extras]"`: the ones named; `$$extras`, the machine's kernel extra, may add one)."""
    recipe = re.search(r'pip install .*-e "\.\[([^\]]+)\]"', (REPO / "Makefile").read_text())
    assert recipe, "the install recipe installs mtad with its extras"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = recipe.group(1).split("$$")[0].split(",")
    return [requirement for name in named for requirement in extras[name.strip()]]


def test_make_install_installs_jupyter_lab_which_the_report_readme_tells_users_to_run():
    readme = (REPO / "mtad" / "report" / "README.md").read_text()
    assert ".venv/bin/jupyter lab" in readme and "pip install jupyterlab" not in readme
    assert any(re.match(r"jupyterlab\b", requirement) for requirement in installed_requirements())
