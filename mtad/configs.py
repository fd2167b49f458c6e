"""Where the Hydra configs (``conf/``) are: one function for every reader.

A checkout has ``conf/`` beside the package; a wheel installs a copy under
``<prefix>/share/mtad/conf`` (pyproject.toml, ``data-files``); ``$MTAD_CONF_DIR`` overrides both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CHECKOUT_CONF = Path(__file__).resolve().parents[1] / "conf"
INSTALLED_CONF = Path(sys.prefix) / "share" / "mtad" / "conf"


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

    store = ConfigStore.instance()
    for name, cls in DECODERS.items():
        node = OmegaConf.structured(cls.params_type)
        # OmegaConf makes a frozen dataclass's node read-only, which would refuse every override
        # (method.gamma=3); the settings object built from the composed values is frozen instead
        OmegaConf.set_readonly(node, False)
        store.store(group="method_defaults", name=name, node=node)
    for name, cls in TASKS.items():
        store.store(group="task_defaults", name=name, node=dict(cls.defaults))


def setup() -> Path:
    """What every entry point that composes configs does first: the code defaults registered
    (``register_code_defaults``) and the config root found (``conf_dir``)."""
    register_code_defaults()
    return conf_dir()


def compose(overrides: list[str]):
    """The runner's config (conf/config.yaml) with Hydra overrides, as ``mtad-run`` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(setup()), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))
