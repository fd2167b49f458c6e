"""``make claims``: run the claims experiment, then write the claims report.

    python -m mtad.experiments.claims                                       # experiment=claims (embedded pair)
    python -m mtad.experiments.claims experiment=claims pair=llama2_13b_7b  # the same design on a GPU pair
    python -m mtad.experiments.claims experiment=table2_full pair=opt_66b_350m  # a finished grid: report only
    python -m mtad.experiments.claims --report-only                         # rebuild from the cells, run nothing

An experiment with a ``claims:`` section that lists ``tasks`` (``conf/experiment/claims*.yaml``) is
run: every method on the same prompts with the same per-sample seeds, methods alternating within
each prompt (``interleaved``), into ordinary cells. C5 and C6 are computed on enumerable tiny
models (``theory``) into the experiment's ``theory.json``, unless one computed with the same
settings is there. Then ``mtad.report.claims`` builds the report from those files.
"""

from __future__ import annotations

import logging
import sys

from mtad.experiments.interleaved import run_interleaved
from mtad.experiments.theory import ExactnessSettings, TheorySettings, run_theory, stored_theory, write_theory
from mtad.report.claims import ClaimsSettings, arguments, publish, report_config, with_experiment
from mtad.runner import provenance
from mtad.runner.layout import theory_path

log = logging.getLogger("mtad.claims")


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
    if stored_theory(path, theory, exactness, settings.confidence) is not None:
        log.info("C5 and C6: %s holds them for these settings", path)
        return
    log.info("C5 and C6 on enumerable tiny models (a few minutes)")
    write_theory(path, run_theory(theory, exactness, settings.confidence))


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--report-only", action="store_true", help="build the report from the cells, run nothing")
    args = parser.parse_intermixed_args(argv)
    provenance.capture()  # the code state this process starts from, before any cell runs
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    overrides = with_experiment(args.overrides)
    stopped = False
    try:
        cfg, settings, name = report_config(overrides)
        checks = None if (args.report_only or args.no_theory) else theory_settings(settings)  # checked first
        if settings.tasks and not args.report_only:
            summary = run_interleaved(
                overrides, settings.methods, settings.tasks, settings.max_minutes, progress=bool(cfg.progress)
            )
            stopped = summary["stopped_by_time_limit"]
            log.info(
                "prompts ran for %.1f min%s",
                summary["minutes"],
                " (time limit reached: rerun to continue)" if stopped else "",
            )
        if checks is not None:
            run_theory_checks(cfg, settings, *checks)
    except (ValueError, FileNotFoundError) as err:
        print(f"claims: {err}", file=sys.stderr)
        return 1
    note = "; the time limit stopped the run: rerun `make claims` to continue" if stopped else ""
    return publish(cfg, settings, name, args, note)


if __name__ == "__main__":
    sys.exit(main())
