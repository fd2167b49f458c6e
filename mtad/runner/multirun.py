"""A multirun's settings checked before its first cell runs: every value of every swept key.

Hydra's basic sweeper runs the cartesian product of the experiment's grid
(``hydra.sweeper.params``) and the command line's sweeps (``key=a,b``; the command line wins
for a key both set), one job after another, so a bad value in the last job would only show
after the others ran. ``first_bad_job`` composes the first job and, for each swept key, the
first job with each of its other values (each value checked once, not each combination: a
setting that only some method or task lacks is caught by ``check_override_keys`` before),
and plans each cell as ``mtad-run`` would (``plan_cell``: nothing is loaded or written).

An experiment may declare cells beside its grid (``beside_grid``: lists of overrides, e.g.
``[method=sps, method.stop_below=0.3]``), which no product expresses: each entry runs as a
multirun of its own over the grid with the entry's keys taken out (``beside_launches``), after
the grid, and its first job is checked with the grid's.
"""

from __future__ import annotations

from mtad.runner.grid import grid_jobs, sweep_grid

BESIDE = "beside_grid"  # the experiment's key of the cells beside its grid (conf/config.yaml)


def jobs_to_check(overrides: list[str]) -> list[list[str]]:
    """The first job, then the first job with each other value of each swept key; then the first
    job of each launch beside the grid (``beside_launches``)."""
    return grid_checks(overrides) + [grid_checks(launch)[0] for launch in beside_launches(overrides)]


def grid_checks(overrides: list[str]) -> list[list[str]]:
    """The grid's first job, then the first job with each other value of each swept key."""
    shared, swept = sweep_grid(overrides)
    first = [values[0] for values in swept.values()]
    jobs = [shared + first]
    for i, values in enumerate(swept.values()):
        jobs += [shared + first[:i] + [v] + first[i + 1 :] for v in values[1:]]
    return jobs


def all_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job the command runs: its grid's (``grid_jobs``), then those of each launch beside it."""
    return grid_jobs(overrides) + [job for launch in beside_launches(overrides) for job in grid_jobs(launch)]


def beside_launches(overrides: list[str]) -> list[list[str]]:
    """The command lines of the cells the experiment declares beside its grid (``beside_grid``), one
    per entry: the given overrides less the keys the entry sets, then the entry, then
    ``beside_grid=[]`` (a launch of one grid). An entry that a command-line value or sweep of one of
    its keys leaves out (``method=mtad`` leaves out ``[method=sps, ...]``) is dropped; a command line
    that sets ``beside_grid`` itself has none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mtad.configs import compose

    parser = OverridesParser.create()
    given = parser.parse_overrides(overrides)
    if any(o.get_key_element() == BESIDE for o in given):
        return []
    fixed = [o.input_line for o in given if not o.is_sweep_override()]
    launches = []
    for entry in compose(fixed).get(BESIDE) or []:
        entry = [str(e) for e in entry]
        values = {o.get_key_element(): o.get_value_element_as_str() for o in parser.parse_overrides(entry)}
        if all(values[o.get_key_element()] in _values(o) for o in given if o.get_key_element() in values):
            kept = [o.input_line for o in given if o.get_key_element() not in values]
            launches.append(kept + entry + [f"{BESIDE}=[]"])
    return launches


def _values(override) -> list[str]:
    """The values a command-line override gives its key: its sweep's, or its one value."""
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


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
