"""Every command-line setting has one default: where a script's option feeds a library function or
config class that declares a default of its own for the same setting, the two are one value read from
one place (the script's option reads the library's, or the library's parameter is required)."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REQUIRED = inspect.Parameter.empty  # what `library_default` gives for a parameter without a default


def script(name: str):
    """scripts/<name>.py as a module (nothing run)."""
    spec = importlib.util.spec_from_file_location(f"script_defaults_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the script looks its module up
    spec.loader.exec_module(module)
    return module


DISTILL = script("distill_draft")
library_default = DISTILL.library_default  # a field's or a parameter's default, REQUIRED where it has none


def divergent(given: dict, owner) -> dict:
    """The settings of `given` (parameter or field of `owner` -> what the script passes when no option is
    given) whose library default exists and differs: each a second default that disagrees."""
    defaults = {name: library_default(owner, name) for name in given}
    return {n: (given[n], d) for n, d in defaults.items() if d is not REQUIRED and d != given[n]}


def bench_cases():
    from mtad.bench.target_distance import q4_tv
    from mtad.experiments.bench_cells import measure_pair

    bench = script("bench")
    args = bench.parser().parse_args([])
    q4 = {"pair": args.pair, "prompts": args.q4_tv, "new_tokens": args.max_new_tokens}
    return [("bench: measure_pair", bench.measure_settings(args), measure_pair), ("bench: q4_tv", q4, q4_tv)]


def distill_cases():
    from mtad.distill import DistillConfig, HeadTrainConfig
    from mtad.distill.gpu_round import run_round, scratch_arms
    from mtad.distill.pipeline import produce

    a = DISTILL.fill_library_defaults(DISTILL.parser().parse_args(["train"]))
    shared = {"max_minutes": a.max_minutes, "threads": a.threads}
    layer = {"lr": a.lr, "ab_tokens": a.ab_tokens, "losses": a.losses, "slots": a.slots, "seed": a.seed}
    head = {"lr": a.head_lr, "steps": a.unroll, "num_layers": a.head_layers}
    round_ = {"minutes": a.max_minutes, "batch_seqs": a.round_batch, "curve_every": a.curve_every, "seed": a.seed}
    round_ |= {"lr_floor": a.lr_floor, "scratch": scratch_arms(a.round_arms)}
    return [
        ("distill_draft: DistillConfig", layer | shared, DistillConfig),
        ("distill_draft: HeadTrainConfig", head | shared, HeadTrainConfig),
        ("distill_draft: produce", {"name": a.name}, produce),
        ("distill_draft: run_round", round_, run_round),
    ]


def other_cases():
    from mtad.bench import gpu_check
    from mtad.report.figures import build_all
    from mtad.report.tables import build_table2

    checks = script("gpu_check")
    options = dataclasses.asdict(checks.options(checks.parser(gpu_check).parse_args([]), gpu_check))
    table = script("make_table").parser().parse_args(["--results", "r"])
    figures = script("make_figures").parser().parse_args([])
    verify = script("verify")
    return [
        ("gpu_check: Options", options, gpu_check.Options),
        ("gpu_check: run", {"out": checks.parser(gpu_check).parse_args([]).out}, gpu_check.run),
        ("make_table: build_table2", {"pair": table.pair, "name": table.name}, build_table2),
        ("make_figures: build_all", {"sweep_experiment": figures.sweep_experiment}, build_all),
        ("verify: run_cells", {"kernels": verify.parser().parse_args([]).kernels}, verify.run_cells),
    ]


@pytest.mark.parametrize("cases", [bench_cases, distill_cases, other_cases])
def test_no_script_option_and_library_default_disagree(cases):
    """What each script passes when given no option is what the function or config it feeds would
    take by itself: no second default that says otherwise."""
    disagreeing = {label: d for label, given, owner in cases() if (d := divergent(given, owner))}
    assert not disagreeing, f"script default vs library default: {disagreeing}"


def test_divergent_finds_a_second_default_that_disagrees():
    def feed(long_prompts: int = 0, reps: int = 5, *, threads: int):
        return long_prompts, reps, threads

    assert divergent({"long_prompts": 3, "reps": 5, "threads": 2}, feed) == {"long_prompts": (3, 0)}


def test_the_settings_every_call_passes_have_no_library_default():
    """Where the script always passes a setting, the library's parameter is required: the script's
    option is its one default (the bench, the GPU round, verify's kernels)."""
    from mtad.distill.gpu_round import run_round
    from mtad.experiments.bench_cells import measure_pair

    bench = script("bench")
    passed = {
        measure_pair: bench.measure_settings(bench.parser().parse_args([])),
        run_round: ("minutes", "batch_seqs", "curve_every", "special_ids", "seed", "scratch", "lr_floor"),
        script("verify").run_cells: ("kernels",),
    }
    defaulted = {
        fn.__name__: [n for n in names if library_default(fn, n) is not REQUIRED] for fn, names in passed.items()
    }
    assert not any(defaulted.values()), defaulted


def test_the_distill_options_read_the_configs_defaults():
    """distill_draft.py's training options name no number of their own: argparse leaves them unset and
    the configs' defaults fill them."""
    unset = vars(DISTILL.parser().parse_args(["train"]))
    assert all(unset[dest] is None for dest in DISTILL.LIBRARY_DEFAULTS)
    given = DISTILL.fill_library_defaults(DISTILL.parser().parse_args(["train", "--lr", "0.01", "--losses", "kl_raw"]))
    assert (given.lr, given.losses) == (0.01, ["kl_raw"])  # a given option is kept as given


def test_distill_help_loads_no_torch():
    """--help stays fast: the training options' defaults are read only after parsing."""
    code = (
        "import sys, runpy; sys.modules['torch'] = None; sys.argv = ['distill_draft.py', '--help']; "
        f"runpy.run_path({str(REPO / 'scripts' / 'distill_draft.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "DistillConfig's lr" in " ".join(proc.stdout.split())
