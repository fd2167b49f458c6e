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
    raise FileNotFoundError(f"mtad configs not found (no config.yaml in {looked}); set MTAD_CONF_DIR to a copy "
                            "of the repository's conf/ folder" + (" (MTAD_CONF_DIR is set)" if env else ""))
