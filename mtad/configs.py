"""Where the Hydra configs (``conf/``) are: one function for every reader.

A checkout has ``conf/`` beside the package; a wheel installs a copy under
``<prefix>/share/mtad/conf`` (pyproject.toml, ``data-files``); ``$MTAD_CONF_DIR`` overrides both.
"""

from __future__ import annotations

import copy
import os
import sys
from functools import lru_cache
from pathlib import Path

from mtad import PACKAGE

CHECKOUT_CONF = Path(__file__).resolve().parents[1] / "conf"
INSTALLED_CONF = Path(sys.prefix) / "share" / PACKAGE / "conf"


def conf_dir() -> Path:
    """The config root holding ``config.yaml``: $MTAD_CONF_DIR, else the checkout's ``conf/``,
    else the copy a wheel installs; a clear error naming all three when none has it."""
    env = os.environ.get("MTAD_CONF_DIR")
    candidates = [Path(env).expanduser()] if env else [CHECKOUT_CONF, INSTALLED_CONF]
    for candidate in candidates:
        if (candidate / "config.yaml").is_file():
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"mtad configs not found (no config.yaml in {looked}); set MTAD_CONF_DIR to a copy "
        "of the repository's conf/ folder" + (" (MTAD_CONF_DIR is set)" if env else "")
    )


def register_code_defaults() -> None:
    """Register every method's settings class (``params_type`` of its decoder,
    mtad/decoding/params.py) as the Hydra structured config ``method_defaults/<name>``, and every
    task's options (the ``defaults`` dict of its class) as ``task_defaults/<name>``: the one place
    each is written. Each ``conf/method/<name>.yaml`` and ``conf/task/<name>.yaml`` starts from its
    node, so ``mtad-run method=<m> task=<t>`` runs what ``get_decoder(<m>)`` and ``get_task(<t>)``
    give from Python; a method's node is typed, so Hydra refuses a value of the wrong type (a
    string for ``gamma``) and a key the class lacks. Idempotent."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from mtad.decoding import DECODERS
    from mtad.tasks import TASKS

    OmegaConf.register_new_resolver("methods", methods_value, replace=True)
    OmegaConf.register_new_resolver("adaptive_cells", adaptive_cells, replace=True)
    store = ConfigStore.instance()
    for name, cls in DECODERS.items():
        node = OmegaConf.structured(cls.params_type)
        # OmegaConf makes a frozen dataclass's node read-only, which would refuse every override
        # (method.gamma=3); the settings object built from the composed values is frozen instead
        OmegaConf.set_readonly(node, False)
        store.store(group="method_defaults", name=name, node=node)
    for name, cls in TASKS.items():
        store.store(group="task_defaults", name=name, node=dict(cls.defaults))


METHOD_SETS = {
    "study": lambda spec: True,
    "drafting": lambda spec: spec.drafts != "none",
    "lossless": lambda spec: spec.lossless,
}


def methods_value(which: str = "study") -> str:
    """``${methods:<which>}`` in a config: the registry's study methods (``study``), those that
    draft (``drafting``) or the lossless ones (``lossless``), in table order, as a sweep's
    comma-separated value, so that Table 2 and the sweeps run a newly registered method unasked."""
    from mtad.decoding.registry import specs

    if which not in METHOD_SETS:
        raise ValueError(f"${{methods:{which}}}: unknown set; valid: {', '.join(METHOD_SETS)}")
    return ",".join(name for name, spec in specs().items() if METHOD_SETS[which](spec))


def adaptive_cells() -> list[list[str]]:
    """``${adaptive_cells:}``: each lossless study method with an adaptive threshold at it
    (``[method=<name>, method.stop_below=<t>]``, the registry's), the cells Table 2 runs beside its
    grid."""
    from mtad.decoding.registry import specs

    return [[f"method={n}", s.adaptive_override] for n, s in specs().items() if s.lossless and s.adaptive_override]


def setup() -> Path:
    """What every entry point that composes configs does first: the code defaults registered
    (``register_code_defaults``) and the config root found (``conf_dir``)."""
    register_code_defaults()
    return conf_dir()


def compose(overrides: list[str], hydra: bool = False):
    """The runner's config (conf/config.yaml) with Hydra overrides, as ``mtad-run`` composes it;
    ``hydra=True`` keeps the ``hydra`` node too (a multirun's sweeper grid)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(setup()), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra)


def group_option(group: str, name: str) -> dict:
    """One option of a config group (e.g. ``pair=<name>``) as ``mtad-run`` composes it, resolved
    to a plain dict (a fresh copy: the caller may change it)."""
    return copy.deepcopy(_group_option(group, name, str(conf_dir())))


@lru_cache(maxsize=64)
def _group_option(group: str, name: str, root: str) -> dict:  # root: a changed $MTAD_CONF_DIR composes anew
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose([f"{group}={name}"])[group], resolve=True)


def planned_grid(experiment: str, sweep: str | None = None) -> dict[str, list]:
    """``{override key: [values]}`` of the multirun grid that ``conf/experiment/<experiment>.yaml``
    (plus ``conf/sweep/<sweep>.yaml``) declares, e.g. ``{"method": [...], "method.gamma": [1, ..., 8]}``.
    Empty when the experiment file does not exist (an ad-hoc experiment name)."""
    return {key: list(values) for key, values in _planned_grid(experiment, sweep, str(conf_dir()))}


def planned_beside_grid(experiment: str) -> list[list[str]]:
    """The override lists of the cells ``conf/experiment/<experiment>.yaml`` declares beside its grid
    (``beside_grid``, e.g. ``[["method=sps", "method.stop_below=0.3"]]``; run by
    ``mtad.runner.multirun.beside_launches``); empty when it declares none or does not exist."""
    return [list(entry) for entry in _planned_beside_grid(experiment, str(conf_dir()))]


@lru_cache(maxsize=32)
def _planned_beside_grid(experiment: str, root: str) -> tuple[tuple[str, ...], ...]:
    if not (Path(root) / "experiment" / f"{experiment}.yaml").exists():
        return ()
    return tuple(
        tuple(str(o) for o in entry) for entry in compose([f"experiment={experiment}"]).get("beside_grid") or []
    )


@lru_cache(maxsize=32)
def _planned_grid(experiment: str, sweep: str | None, root: str) -> tuple[tuple[str, tuple], ...]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not (Path(root) / "experiment" / f"{experiment}.yaml").exists():
        return ()
    cfg = compose([f"experiment={experiment}"] + ([f"sweep={sweep}"] if sweep else []), hydra=True)
    params = cfg.hydra.sweeper.get("params") or {}
    parser = OverridesParser.create()
    grid = []
    for key, value in params.items():
        override = parser.parse_overrides([f"{key}={value}"])[0]
        grid.append((key, tuple(override.sweep_iterator()) if override.is_sweep_override() else (override.value(),)))
    return tuple(grid)
