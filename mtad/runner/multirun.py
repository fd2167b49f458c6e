"""A multirun's settings checked before its first cell runs: every value of every swept key.

Hydra's basic sweeper runs the cartesian product of the experiment's grid
(``hydra.sweeper.params``) and the command line's sweeps (``key=a,b``; the command line wins
for a key both set), one job after another, so a bad value in the last job would only show
after the others ran. ``first_bad_job`` composes the first job and, for each swept key, the
first job with each of its other values (each value checked once, not each combination: a
setting that only some method or task lacks is caught by ``check_override_keys`` before),
and plans each cell as ``mtad-run`` would (``plan_cell``: nothing is loaded or written).
"""

from __future__ import annotations

from itertools import product


def sweep_grid(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the overrides every job shares, {swept key: ["key=value", ...]}) of a multirun: the
    experiment's grid, a command-line sweep replacing a key's values, a command-line value
    taking the key out of the grid."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mtad.configs import compose

    parser = OverridesParser.create()
    given = parser.parse_overrides(overrides)
    fixed = [o.input_line for o in given if not o.is_sweep_override()]
    params = compose(fixed, hydra=True).hydra.sweeper.get("params") or {}
    grid = {}
    for o in [*parser.parse_overrides([f"{k}={v}" for k, v in params.items()]), *given]:
        key = o.get_key_element()
        if o.is_sweep_override():
            grid[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        elif o in given:
            grid.pop(key, None)
        else:
            grid[key] = [f"{key}={o.get_value_element_as_str()}"]
    return fixed, grid


def jobs_to_check(overrides: list[str]) -> list[list[str]]:
    """The first job, then the first job with each other value of each swept key."""
    shared, swept = sweep_grid(overrides)
    first = [values[0] for values in swept.values()]
    jobs = [shared + first]
    for i, values in enumerate(swept.values()):
        jobs += [shared + first[:i] + [v] + first[i + 1 :] for v in values[1:]]
    return jobs


def all_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job of the multirun, in the basic sweeper's order."""
    shared, swept = sweep_grid(overrides)
    return [shared + list(combo) for combo in product(*swept.values())]


def first_bad_job(overrides: list[str], jobs: list[list[str]] | None = None) -> str | None:
    """`<the job's overrides>: <why>` for the first checked job (`jobs_to_check`, unless given)
    whose settings are refused, or None."""
    from hydra.core.hydra_config import HydraConfig

    from mtad.configs import compose
    from mtad.runner.cell import plan_cell
    from mtad.runner.layout import resolve_cell

    for job in jobs if jobs is not None else jobs_to_check(overrides):
        cfg = compose(job, hydra=True)
        HydraConfig.instance().set_config(cfg)  # so ${hydra:...} interpolations resolve
        try:
            plan_cell(cfg, resolve_cell(cfg, cfg.hydra))
        except ValueError as exc:  # a SettingError, or a cell folder that holds another config
            return f"{' '.join(job)}: {exc}"
    return None


def runs_several(argv: list[str], first_job) -> bool:
    """Whether `mtad-run argv` is a multirun: asked with -m/--multirun, or set by the experiment
    (`first_job`: the first job's config, composed with its `hydra` node)."""
    return "-m" in argv or "--multirun" in argv or str(first_job.hydra.mode) == "RunMode.MULTIRUN"


def needs_hub(first_job) -> bool:
    """Whether the pair of the first job (its composed config) loads anything from the Hugging Face hub."""
    pair = first_job.pair
    return any(pair[part].get("source") == "hub" or pair[part].get("format") == "eagle" for part in ("target", "draft"))
