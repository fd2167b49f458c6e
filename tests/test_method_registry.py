"""The method registry (mtad/decoding/registry.py): one MethodSpec per method, declared beside its class, read
by everything that lists methods. A method registered from a module of its own reaches DECODERS,
Table 2's order, the figures' styles, the bench's configs and the draft measurement with no other
file touched, and no module under mtad/ keeps a table of the study's methods of its own."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

from mtad.decoding import registry as methods
from mtad.decoding.params import SpSParams
from mtad.decoding.registry import MethodSpec, spec, specs, study_methods

PACKAGE = Path(__file__).resolve().parents[1] / "mtad"

# (file, the study methods a literal names) -> why that file names them itself
ALLOWED_TABLES = {
    ("paper.py", ("mtad", "mmtad")): "the paper's statement of which methods approximate exact MTJD (C5)",
}

TOY_MODULE = '''
from mtad.decoding.params import SpSParams
from mtad.decoding.sps import SpeculativeSampling
from mtad.decoding.registry import MethodSpec


class Toy(SpeculativeSampling):
    """SpS under another name: a method of its own module, registered by its spec alone."""

    spec = MethodSpec(
        name="toy",
        label="Toy",
        order=35,
        color="#123456",
        marker="h",
        settings=SpSParams,
        lossless=True,
        drafts="chain",
        test_settings={"gamma": 2},
        adaptive_stop=0.25,
    )
'''


def method_modules(root: Path) -> set[Path]:
    """The files under `root` that declare a MethodSpec (a `MethodSpec(...)` call)."""
    return {
        path
        for path in root.rglob("*.py")
        if any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "MethodSpec"
            for n in ast.walk(ast.parse(path.read_text()))
        )
    }


def method_tables(root: Path, names: set[str]) -> list[tuple[str, int, tuple[str, ...]]]:
    """(file, line, names) of every dict, tuple, list or set literal under `root` that spells two or
    more of `names` as string constants (a dict: its keys), outside the registry and the modules
    that declare a method."""
    skip = method_modules(root) | {root / "decoding" / "registry.py"}
    found = []
    for path in sorted(set(root.rglob("*.py")) - skip):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                items = node.elts
            elif isinstance(node, ast.Dict):
                items = [k for k in node.keys if k is not None]
            else:
                continue
            named = tuple(i.value for i in items if isinstance(i, ast.Constant) and i.value in names)
            if len(named) >= 2:
                found.append((path.relative_to(root).as_posix(), node.lineno, named))
    return found


def test_no_module_keeps_a_table_of_the_methods():
    found = method_tables(PACKAGE, set(study_methods()))
    unexplained = [
        f"mtad/{path}:{line} names {', '.join(named)}"
        for path, line, named in found
        if (path, named) not in ALLOWED_TABLES
    ]
    assert unexplained == [], "read these from the registry (mtad.decoding.registry) instead"
    stale = set(ALLOWED_TABLES) - {(path, named) for path, _, named in found}
    assert stale == set(), "allowed tables that no longer exist"


def test_the_table_check_finds_a_table_and_skips_the_method_modules(tmp_path):
    root = tmp_path / "mtad"
    (root / "decoding").mkdir(parents=True)
    (root / "decoding" / "registry.py").write_text('ORDER = ("a", "b")\n')
    (root / "decoding" / "a.py").write_text('spec = MethodSpec(name="a")\nOTHER = ["a", "b"]\n')
    (root / "report.py").write_text('STYLE = {"a": 1, "b": 2}\nONE = ("a", "x")\nCOLUMNS = {"x": "a", "y": "b"}\n')
    (root / "bench.py").write_text('def f(m):\n    return m in ["b", "a"]\n')
    assert method_tables(root, {"a", "b"}) == [("bench.py", 2, ("b", "a")), ("report.py", 1, ("a", "b"))]


def test_every_method_module_is_registered_and_every_study_method_has_its_config():
    declared = {path.stem for path in method_modules(PACKAGE / "decoding")}
    assert declared == set(specs(study_only=False))  # each module named as its method
    conf = {p.stem for p in (PACKAGE.parent / "conf" / "method").glob("*.yaml")}
    assert set(study_methods()) <= conf  # a cell of every study method
    assert conf <= set(specs(study_only=False))  # and of registered methods only (the references among them)


def test_a_spec_is_checked_where_it_is_declared():
    good = dict(name="x", label="X", order=1, color="k", marker="o", settings=SpSParams, lossless=True, drafts="chain")
    assert MethodSpec(**good).bench_params(3) == SpSParams(gamma=3)
    with pytest.raises(ValueError, match="drafts must be one of none, chain, chains, tree, beams"):
        MethodSpec(**good | {"drafts": "trees"})
    with pytest.raises(TypeError, match="beam_width"):
        MethodSpec(**good | {"test_settings": {"beam_width": 2}})
    with pytest.raises(ValueError, match="stop_below must be in"):
        MethodSpec(**good | {"adaptive_stop": 1.5})
    with pytest.raises(KeyError, match="unknown decoding method 'spx'; valid: sampling, sps, blockverify, spectr"):
        spec("spx")
    with pytest.raises(TypeError, match="beam_width"):
        MethodSpec(**good | {"exactness_settings": ({"beam_width": 2},)})
    with pytest.raises(ValueError, match="exactness_settings are for lossless methods"):
        MethodSpec(**good | {"lossless": False, "exactness_settings": ({"gamma": 2},)})


def test_every_lossless_method_is_checked_for_exactness():
    """C6, the distribution tests and the GPU check run every lossless method, each settings at a draft
    depth of 2, so that 3 tokens observe the bonus token of a fully accepted block."""
    from mtad.experiments.theory import ExactnessSettings
    from mtad.models.check_cases import dist_cases

    lossless = {name for name, s in specs().items() if s.lossless}
    assert {name for name, _ in methods.exactness_cases()} == lossless
    assert {method for _, _, method, _, _ in dist_cases()} == lossless
    assert [name for name, _ in ExactnessSettings().cases] == [name for name, _ in methods.exactness_cases()]
    for name, settings in methods.exactness_cases():
        depth = settings.get("gamma", len(settings.get("k_config", ())))
        assert depth in (0, 2), (name, settings)  # sampling has none


def test_a_name_is_declared_once(monkeypatch):
    monkeypatch.setattr(methods, "_REGISTERED", dict(methods._REGISTERED))

    class Twin:
        spec = spec("sps")

    with pytest.raises(ValueError, match="method 'sps' is declared twice"):
        methods.register(Twin)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A method in a module of its own (toy.py), registered for this test alone."""
    monkeypatch.setattr(methods, "_REGISTERED", dict(methods._REGISTERED))
    path = tmp_path / "toy.py"
    path.write_text(TOY_MODULE)
    module_spec = importlib.util.spec_from_file_location("toy_method_module", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.Toy


def test_a_method_registered_from_its_module_reaches_every_reader(toy, tmp_path):
    from mtad.bench.timings import default_configs
    from mtad.decoding import DECODERS
    from mtad.distill.draft_measurement import decoding_methods
    from mtad.report import figures

    order = ["sampling", "sps", "blockverify", "spectr", "specinfer", "toy", "mtad", "mmtad"]
    assert DECODERS["toy"] is toy and list(DECODERS)[: len(order)] == order and methods.METHODS == tuple(order)
    assert figures._style("toy") == ("#123456", "h") and figures._label("toy") == "Toy"
    configs = {c.label: c for c in default_configs(4, compiled=True) if c.method == "toy"}
    assert sorted(configs) == ["toy adaptive fast", "toy compiled", "toy eager", "toy fast"]
    assert configs["toy adaptive fast"].params == SpSParams(gamma=4, stop_below=0.25)
    assert decoding_methods()["toy"] == SpSParams()
    assert table2_methods(tmp_path, order) == order


def table2_methods(root: Path, methods_in_cells: list[str]) -> list[str]:
    """The methods of Table 2's rows, in its order, built from fixture cells of `methods_in_cells`."""
    from mtad.report.cells import load_cells
    from mtad.report.tables import table2

    fixture = importlib.util.spec_from_file_location(
        "make_results", Path(__file__).parent / "fixtures" / "make_results.py"
    )
    make_results = importlib.util.module_from_spec(fixture)
    fixture.loader.exec_module(make_results)
    for method in reversed(methods_in_cells):
        make_results.write_cell(root, "table2", "cnndm", method, **({"gamma": 4} if method == "toy" else {}))
    return list(table2(load_cells(root), "table2")["method"])


def test_a_method_registered_in_a_test_is_gone_after_it():
    assert "toy" not in specs(study_only=False)


def readme_blocks(language: str) -> list[str]:
    """The code blocks of mtad/decoding/README.md's "Adding a method"."""
    text = (PACKAGE / "decoding" / "README.md").read_text()
    section = text[text.index("## Adding a method") :].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_the_readme_example_method_runs_as_a_cell(tmp_path, monkeypatch):
    from tiny_cells import run_tiny_cell

    from mtad.decoding import DECODERS, get_decoder
    from mtad.models.tiny import tiny_llama

    (module_text,) = readme_blocks("python")
    (config_text,) = readme_blocks("yaml")
    monkeypatch.setattr(methods, "_REGISTERED", dict(methods._REGISTERED))
    (tmp_path / "greedy.py").write_text(module_text)  # mtad/decoding/greedy.py, here a module of its own
    loader = importlib.util.spec_from_file_location("greedy_readme_example", tmp_path / "greedy.py")
    loader.loader.exec_module(importlib.util.module_from_spec(loader))
    assert study_methods()[-1] == "greedy" and DECODERS["greedy"].params_type.__name__ == "GreedyParams"
    target = tiny_llama(0, 24, sharpness=2.0)
    prompt = torch.tensor([[5, 1, 9, 2, 7]])
    greedy = get_decoder("greedy", target=target).generate(prompt, max_new_tokens=6).tokens
    assert greedy == get_decoder("sampling", target=target, temperature=0).generate(prompt, max_new_tokens=6).tokens
    conf = tmp_path / "conf" / "method"
    conf.mkdir(parents=True)
    (conf / "greedy.yaml").write_text(config_text)  # conf/method/greedy.yaml, here in a config folder of one's own
    plan = run_tiny_cell(tmp_path / "runs", "greedy", extra=(f"hydra.searchpath=[file://{tmp_path / 'conf'}]",))
    result = json.loads((plan.cell.directory / "metrics.json").read_text())
    assert result["status"] == "complete" and result["examples"] == 2 and result["block_efficiency"] == 1.0


def modules_spelling(root: Path, names: set[str]) -> dict[str, set[str]]:
    """For each of `names`, the files under `root` holding it as a string constant."""
    found = {name: set() for name in names}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in found:
                found[node.value].add(path.relative_to(root).as_posix())
    return found


def test_a_method_name_is_spelled_in_its_module_the_registry_and_the_paper_alone():
    """A method's facts live in its record: other modules take a name from the registry (REFERENCE,
    VANILLA, the specs) or from the paper's statement (MTAD, MMTAD), so renaming a method is its module,
    its config and these two."""
    allowed = {"decoding/registry.py", "paper.py"}
    found = modules_spelling(PACKAGE, set(specs(study_only=False)))
    beyond = {name: sorted(files - allowed - {f"decoding/{name}.py"}) for name, files in found.items()}
    assert {name: files for name, files in beyond.items() if files} == {}


def test_the_spelling_check_finds_a_name(tmp_path):
    (tmp_path / "a.py").write_text('X = "sps"\nY = f"{X}_tokens"\n')
    (tmp_path / "b.py").write_text("Z = 1\n")
    assert modules_spelling(tmp_path, {"sps", "mtad"}) == {"sps": {"a.py"}, "mtad": set()}
