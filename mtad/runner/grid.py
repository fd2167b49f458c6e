"""A multirun's grid: the jobs Hydra's basic sweeper runs, from the experiment's grid
(``hydra.sweeper.params``) and the command line's sweeps, in its order. Read by the multirun's
checks (``multirun``) and by the progress lines (``progress``), which count the grid's cells."""

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


def grid_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job of the multirun's grid, in the basic sweeper's order."""
    shared, swept = sweep_grid(overrides)
    return [shared + list(combo) for combo in product(*swept.values())]
