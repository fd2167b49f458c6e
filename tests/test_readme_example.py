"""The README's usage example runs as written (real embedded pair)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_decoding_example_runs(capsys):
    text = README.read_text()
    section = text[text.index("## Decoding methods and the contract") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) >= 2 and "block_efficiency" in printed[-1]
