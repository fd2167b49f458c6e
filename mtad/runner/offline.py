"""The Hugging Face hub, reachable or not, decided once per process.

Offline, every hub lookup (a tokenizer's files, a model id) would wait out its own retries and
print them; one short probe instead, and when the hub cannot be reached the process runs with
``HF_HUB_OFFLINE=1`` and says so once. Local paths, the packaged model and cached files work
the same either way. A user's own ``HF_HUB_OFFLINE`` is left as it is.
"""

from __future__ import annotations

import logging
import os
import sys

from mtad.models.pairs import hub_offline, hub_unreachable

log = logging.getLogger("mtad.run")


def settle_hub_access(timeout_s: float = 3.0, quiet: bool = False) -> bool:
    """True when the hub answers; otherwise switch this process to offline mode (once), with a
    warning unless `quiet` (a command that needs nothing from the hub)."""
    if hub_offline():
        return False
    why = hub_unreachable(timeout_s)
    if why is None:
        return True
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported already: its flag was read at import
        constants.HF_HUB_OFFLINE = True
    (log.debug if quiet else log.warning)(
        "the Hugging Face hub is unreachable (%s): running offline (HF_HUB_OFFLINE=1); local "
        "paths, the packaged model and cached files are used",
        why,
    )
    return False
