"""``make claims``: run the claims experiment, then write the claims report.

    python -m mtad.experiments.claims                                       # experiment=claims (embedded pair)
    python -m mtad.experiments.claims experiment=claims pair=llama2_13b_7b  # the same design on a GPU pair
    python -m mtad.experiments.claims experiment=table2_full pair=opt_66b_350m  # a finished grid: report only
    python -m mtad.experiments.claims --report-only                         # rebuild from the cells, run nothing

An experiment with a ``claims:`` section that lists ``tasks`` (``conf/experiment/claims*.yaml``) is
run: every method, and every variant (a method with options of its own, in its own cells: the
report's ``Variant``), on the same prompts with the same per-sample seeds, alternating within each
prompt (``interleaved``), into ordinary cells. C5 and C6 are computed on enumerable tiny
models (``theory``) into the experiment's ``theory.json``, unless one computed with the same
settings is there. Then ``mtad.report.claims_report`` builds the report from those files.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from mtad import provenance
from mtad.configs import compose
from mtad.experiments.interleaved import run_interleaved
from mtad.experiments.theory import ExactnessSettings, TheorySettings, run_theory, stored_theory, write_theory
from mtad.report.claims_report import ReportSettings, publish, report_name
from mtad.runner.checks import check_group_options
from mtad.runner.interrupt import INTERRUPTED, cells_under, interrupted_line
from mtad.runner.layout import theory_path

log = logging.getLogger("mtad.claims")
INCOMPLETE = 2  # exit status of a run the time limit stopped: its report is partial, and `make results` reruns it


@dataclass
class ClaimsSettings:
    """An experiment's ``claims:`` section (every key optional): what this command runs, and the
    report's keys (``ReportSettings``: methods, variants, planned tasks, statistics) under ``report``."""

    max_minutes: float | None = None  # stop starting prompts after this long (a rerun continues)
    theory: dict = field(default_factory=dict)  # C5's settings (mtad.experiments.theory.TheorySettings)
    exactness: dict = field(default_factory=dict)  # C6's settings (mtad.experiments.theory.ExactnessSettings)
    report: ReportSettings = field(default_factory=ReportSettings)

    @property
    def tasks(self) -> list | None:
        """The tasks to run (interleaved) before the report; None: report from finished cells only."""
        return self.report.tasks

    @classmethod
    def from_config(cls, cfg) -> "ClaimsSettings":
        from omegaconf import OmegaConf

        section = OmegaConf.to_container(cfg.claims, resolve=True) if "claims" in cfg else {}
        own = {f.name for f in fields(cls)} - {"report"}
        reported = {f.name for f in fields(ReportSettings)}
        unknown = sorted(set(section) - own - reported)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} under claims:; valid: {sorted(own | reported)}")
        run = {k: v for k, v in section.items() if k in own and (v is not None or k == "max_minutes")}
        return cls(**run, report=ReportSettings(**{k: v for k, v in section.items() if k in reported}))


def with_experiment(overrides: list[str]) -> list[str]:
    """The overrides, naming ``experiment=claims`` unless they name an experiment."""
    named = any(o.startswith("experiment=") for o in overrides)
    return list(overrides) if named else ["experiment=claims", *overrides]


def claims_config(overrides: list[str]):
    """(config, settings, report name) of the experiment the overrides name (default: claims)."""
    overrides = with_experiment(overrides)
    cfg = compose(overrides)
    experiment_only = [o for o in overrides if o.split("=", 1)[0] == "experiment"]
    own_pair = any(o.startswith("pair=") for o in overrides)
    default_pair = compose(experiment_only).pair.name if own_pair else cfg.pair.name
    return cfg, ClaimsSettings.from_config(cfg), report_name(cfg.experiment_name, cfg.pair.name, default_pair)


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default experiment=claims)")
    parser.add_argument(
        "--out",
        default="results/local/claims",
        help="output directory (default results/local/claims; the committed results/claims only when named)",
    )
    parser.add_argument("--name", default=None, help="file stem (default claims, or claims_<experiment>[_<pair>])")
    parser.add_argument("--no-theory", action="store_true", help="leave out C5 and C6 (the tiny-model checks)")
    parser.add_argument("--report-only", action="store_true", help="build the report from the cells, run nothing")
    return parser


def _tuples(values: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def theory_settings(settings: ClaimsSettings) -> tuple[TheorySettings, ExactnessSettings]:
    """The ``claims.theory`` and ``claims.exactness`` sections as the checks' settings."""
    exact = dict(settings.exactness)
    if "cases" in exact:
        exact["cases"] = tuple((c["method"], _tuples(c.get("params", {}))) for c in exact["cases"])
    try:
        return TheorySettings(**_tuples(settings.theory)), ExactnessSettings(**exact)
    except TypeError as exc:
        raise ValueError(f"claims.theory / claims.exactness: {exc}") from None


def run_theory_checks(cfg, settings: ClaimsSettings, theory: TheorySettings, exactness: ExactnessSettings) -> None:
    """C5 and C6 into the experiment's theory.json, unless it holds them for these settings."""
    path = theory_path(cfg.results_root, cfg.experiment_name)
    if stored_theory(path, theory, exactness, settings.report.confidence) is not None:
        log.info("C5 and C6: %s holds them for these settings", path)
        return
    log.info("C5 and C6 on enumerable tiny models (a few minutes)")
    write_theory(path, run_theory(theory, exactness, settings.report.confidence))


def one_line(err: Exception) -> str:
    """An error as one line; Hydra's unknown option keeps its list of the valid ones."""
    lines = [line.strip() for line in str(err).split("Config search path")[0].splitlines() if line.strip()]
    lines = lines or [type(err).__name__]
    valid = [line for line in lines[1:] if not line.startswith("Available options")]
    return f"{lines[0]}; valid: {', '.join(valid)}" if valid and "Could not find" in lines[0] else lines[0]


def main(argv: list[str] | None = None) -> int:
    """The claims command; Ctrl-C ends it with one line (the examples its cells keep) and status 130."""
    args = arguments(__doc__).parse_intermixed_args(argv)
    provenance.capture()  # the code state this process starts from, before any cell runs
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    cells_folder = []  # the experiment's cells (<results_root>/<experiment>/<pair>), once composed
    try:
        return run_and_report(args, cells_folder)
    except KeyboardInterrupt:  # one line, not a traceback: every finished example is in its cell
        cells = cells_under(cells_folder[0]) if cells_folder else []
        print(interrupted_line("claims", cells, cells_folder[0] if cells else None), file=sys.stderr)
        return INTERRUPTED


def run_and_report(args, cells_folder: list) -> int:
    """Run what the experiment's ``claims:`` section asks (unless ``--report-only``), then publish
    the report; ``cells_folder`` receives the folder of the experiment's cells once it is known."""
    from hydra.errors import HydraException

    overrides = with_experiment(args.overrides)
    stopped = False
    try:
        problem = check_group_options(overrides)  # before Hydra, whose message spans a dozen lines
        if problem:
            raise ValueError(problem)
        cfg, settings, name = claims_config(overrides)
        cells_folder.append(Path(cfg.results_root) / cfg.experiment_name / cfg.pair.name)
        checks = None if (args.report_only or args.no_theory) else theory_settings(settings)  # checked first
        if settings.tasks and not args.report_only:
            summary = run_interleaved(
                overrides,
                settings.report.planned_methods,
                settings.tasks,
                settings.max_minutes,
                progress=bool(cfg.progress),
                variants=[(v.method, v.overrides) for v in settings.report.variants],
            )
            stopped = summary["stopped_by_time_limit"]
            log.info(
                "prompts ran for %.1f min%s",
                summary["minutes"],
                " (time limit reached: rerun to continue)" if stopped else "",
            )
        if checks is not None:
            run_theory_checks(cfg, settings, *checks)
    except (ValueError, FileNotFoundError, HydraException) as err:  # a setting, a file, a config name
        print(f"claims: {one_line(err)}", file=sys.stderr)
        return 1
    note = "; the time limit stopped the run: rerun `make claims` to continue" if stopped else ""
    return publish(cfg, settings.report, name, args, note) or (INCOMPLETE if stopped else 0)


if __name__ == "__main__":
    sys.exit(main())
