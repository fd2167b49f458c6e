"""Settings checked before any data or model is loaded and before a cell directory exists.

A bad ``limit``, method parameter, task option or judge setting, or an unwritable results
folder, fails here with one line that names the setting; nothing has been written yet.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


class SettingError(ValueError):
    """A setting that cannot work; the message names it and says how to fix it (one line)."""


def check_run_settings(cfg) -> None:
    """The run-level settings of config.yaml have their types and ranges."""

    def integer(value):
        return isinstance(value, int) and not isinstance(value, bool)

    if not integer(cfg.seed):
        raise SettingError(f"seed must be an integer, got {cfg.seed!r}")
    if cfg.threads is not None and not (integer(cfg.threads) and cfg.threads >= 1):
        raise SettingError(
            f"threads must be a positive integer (torch threads) or null (torch's default), got {cfg.threads!r}"
        )
    if not (integer(cfg.warmup_tokens) and cfg.warmup_tokens >= 0):
        raise SettingError(f"warmup_tokens must be an integer >= 0 (0: no warm-up), got {cfg.warmup_tokens!r}")
    if not isinstance(cfg.progress, bool):
        raise SettingError(f"progress must be true or false, got {cfg.progress!r}")
    from mtad.decoding.base import STOP_RULES

    if cfg.stop_rule not in STOP_RULES:
        raise SettingError(f"stop_rule must be one of {', '.join(STOP_RULES)}, got {cfg.stop_rule!r}")


def unknown_name(kind: str, name: str, valid) -> str:
    """One line for a name that is not one of ``valid``: the nearest ones first (and suggested), then the rest."""
    from difflib import get_close_matches

    nearest = get_close_matches(str(name), sorted(valid), n=3, cutoff=0.6)
    rest = sorted(v for v in valid if v not in nearest)
    guess = f"; did you mean {nearest[0]!r}?" if nearest else ";"
    return f"unknown {kind} {name!r}{guess} valid: {', '.join([*nearest, *rest])}"


def group_values(override) -> list[str]:
    """The option names a parsed ``group=...`` override picks (each value of a sweep), or [] when it
    picks none (a deletion, null) or Hydra expands them itself (``glob(...)``)."""
    from hydra.errors import HydraException

    if override.is_delete():
        return []
    try:
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
    except HydraException:
        return []
    return [str(v) for v in values if v is not None and str(v) != "null"]


def searchpath_folders(overrides: list[str]) -> list[Path] | None:
    """The folders a command line's ``hydra.searchpath=[file://...]`` adds to conf/; None when it
    names a place that is not a folder (``pkg://``), whose options cannot be listed here."""
    folders: list[Path] = []
    for text in overrides:
        key, _, value = text.partition("=")
        if key.lstrip("+") != "hydra.searchpath":
            continue
        for item in filter(None, (i.strip().strip("'\"") for i in value.strip("[]").split(","))):
            if not item.startswith("file://"):
                return None
            folders.append(Path(item[len("file://") :]))
    return folders


def group_options(folders: list[Path], group: str) -> list[str]:
    """The options of config group ``group`` over ``folders`` (a subfolder's as ``sub/name``)."""
    return sorted(
        {p.relative_to(f / group).with_suffix("").as_posix() for f in folders for p in (f / group).rglob("*.yaml")}
    )


def check_group_options(overrides: list[str]) -> str | None:
    """Why a command-line ``<group>=<option>`` (pair, method, task, experiment, sweep, logger,
    energy: the folders of conf/ and of the command line's ``hydra.searchpath``), or one value of a
    sweep over it, names no option of its group (the nearest ones first), or None. Checked before
    Hydra composes, whose own message spans a dozen lines and suggests nothing."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from mtad.configs import conf_dir

    extra = searchpath_folders(overrides)
    if extra is None:  # options in a package: Hydra checks them itself
        return None
    folders, parser = [conf_dir(), *extra], OverridesParser.create()
    for text in overrides:
        if text.startswith("-") or "=" not in text:
            continue
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException:  # not an override Hydra can read: its own one-line message follows
            continue
        group = override.key_or_group
        if group == "hydra" or "/" in group or not (folders[0] / group).is_dir():  # hydra/launcher: plugins too
            continue
        valid = group_options(folders, group)
        wrong = [v for v in group_values(override) if v not in valid]
        if wrong:
            return unknown_name(group, wrong[0], valid)
    return None


def check_override_keys(overrides: list[str]) -> str | None:
    """Why a command-line ``method.<key>`` or ``task.<key>`` names no setting of the method(s) or
    task(s) it applies to (the valid keys listed), or None. Checked before Hydra composes, whose
    own message would not list them."""
    from mtad.decoding import DECODERS
    from mtad.tasks import TASKS

    given = dict(o.lstrip("+~").split("=", 1) for o in overrides if "=" in o and not o.startswith("-"))
    for group, registry, valid_of in (
        ("method", DECODERS, lambda c: c.defaults),
        ("task", TASKS, lambda c: {**c.defaults, "name": None}),
    ):
        named = [n for n in given.get(group, "").split(",") if n in registry]
        for key in (k.split(".", 2)[1] for k in given if k.startswith(f"{group}.")):
            # named ones: each must have the key; none named (an experiment's sweep picks): one must
            wrong = (
                [n for n in named if key not in valid_of(registry[n])]
                if named
                else ([] if any(key in valid_of(c) for c in registry.values()) else [next(iter(registry))])
            )
            if wrong:
                n = wrong[0]
                return (
                    f"{group}.{key}: not a setting of {group} {n!r}; valid: "
                    f"{', '.join(sorted(k for k in valid_of(registry[n]) if k != 'name'))}"
                )
    return None


def check_limit(value, setting: str = "limit") -> int | None:
    """``limit`` is a positive number of examples, or null for all of them."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingError(f"{setting} must be a positive integer (examples per cell) or null (all), got {value!r}")
    return value


def override_keys(command_line: tuple[str, ...] | list[str]) -> list[str]:
    """The keys a command line's overrides set (``key=value``, with or without +/~)."""
    return [o.lstrip("+~").partition("=")[0] for o in command_line]


def _with_given(options: dict, task: dict, path: tuple[str, ...]) -> None:
    """options[path] = task[path], the nested dicts on the way copied (a per_task dict is not shared)."""
    source, target = task, options
    for key in path[:-1]:
        if not isinstance(source.get(key), dict):
            return
        source = source[key]
        target[key] = dict(target.get(key) or {})
        target = target[key]
    if path[-1] in source:
        target[path[-1]] = source[path[-1]]


def task_settings(cfg, task_name: str, command_line: tuple[str, ...] | list[str] = ()) -> tuple[dict, int | None]:
    """Task options (conf/task/<task>.yaml + per_task overrides) and the checked example limit.

    An experiment's ``per_task.<task>`` settings win over the task file's, and a ``task.<key>``
    given on the ``command_line`` wins over both: the cell named after it runs it. The limit is
    the top-level ``limit`` when set (a quick cap from the command line; ``limit=null`` there: all
    examples), else ``task.limit`` from
    the command line, else ``per_task.<task>.limit``, else the task file's ``limit``. It is not an
    option of the cell's identity: raising it extends the same cell.
    """
    from omegaconf import OmegaConf

    task = OmegaConf.to_container(cfg.task, resolve=True) or {}
    per_task = OmegaConf.to_container(cfg.per_task, resolve=True).get(task_name) or {}
    keys = override_keys(command_line)
    given = [tuple(k.split(".")[1:]) for k in keys if k.startswith("task.")]  # task option paths
    options = task | per_task
    for path in given:
        _with_given(options, task, path)
    from_per_task = "limit" in per_task and ("limit",) not in given
    limit = check_limit(options.pop("limit", None), f"per_task.{task_name}.limit" if from_per_task else "task.limit")
    if cfg.limit is not None or "limit" in keys:  # limit=null on the command line: all examples
        limit = check_limit(cfg.limit, "limit")
    return options, limit


def check_pair(pair: dict, method: str | None = None) -> None:
    """The pair's settings, files, device and hub models, checked without loading a model, and
    whether ``method`` takes its kind of draft (a prompt lookup: only the methods that copy)."""
    from mtad.decoding import DECODERS
    from mtad.models.pairs import check_pair_settings

    try:
        check_pair_settings(pair)
    except (KeyError, ValueError, FileNotFoundError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise SettingError(f"pair={pair.get('name')}: {message}") from None
    refusal = DECODERS[method].lookup_refusal() if method in DECODERS else None
    if refusal and (pair.get("draft") or {}).get("source") == "lookup":
        raise SettingError(f"pair={pair.get('name')}: {refusal}")


def check_method(name: str, params: dict):
    """The method's settings object (its frozen settings class built from ``params``, without
    loading a model): what ``get_decoder(name, params=...)`` runs and the records state."""
    from mtad.decoding import DECODERS

    if name not in DECODERS:
        raise SettingError(unknown_name("method", name, DECODERS))
    try:
        return DECODERS[name].settings(**params)
    except (TypeError, ValueError) as exc:
        raise SettingError(f"method={name}: {exc}") from None


def build_task(name: str, data_root, options: dict):
    """The task object with its options (and judge settings) checked; its data is not read yet."""
    from mtad.tasks import get_task

    try:
        return get_task(name, data_root=data_root, **options)
    except (TypeError, ValueError) as exc:
        raise SettingError(f"task={name}: {exc}") from None


def refusal_reason(exc: OSError) -> str:
    """Why a folder refused this process, in a few words."""
    return {
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOENT: "no folder can be created there",
    }.get(exc.errno, exc.strerror or type(exc).__name__)


def nearest_existing(path: Path) -> tuple[Path, OSError | None]:
    """``path`` or the nearest folder above it that exists, with the error met on the way when a
    folder above cannot be searched (the path below it cannot even be looked at), else None."""
    existing, blocked = path, None
    while existing != existing.parent:
        try:
            if existing.exists():
                break
        except OSError as exc:  # e.g. EACCES: a folder on the way denies this user its contents
            blocked = exc
        existing = existing.parent
    return existing, blocked


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or become) a folder this process reads and writes, in a few words
    naming the path at fault: not a directory, read-only, permission, or a place where no folder can
    be made; None when it can. Probed with a temporary folder, removed at once (nothing else is created)."""
    path = Path(path).expanduser().absolute()
    existing, blocked = nearest_existing(path)
    needed = "" if existing == path else f" (needed for {path})"
    if blocked is not None:
        return f"cannot read {existing}: {refusal_reason(blocked)}{needed}"
    if not existing.is_dir():
        return f"{existing} is not a directory{needed}"
    if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):  # a run resumes: it reads what it wrote
        return f"cannot read and write {existing}: permission denied{needed}"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mtad-probe-", dir=existing))
    except OSError as exc:
        return f"cannot write to {existing}: {refusal_reason(exc)}{needed}"
    return None


def check_writable(path: Path, setting: str) -> None:
    """``path`` (or the nearest folder above it that exists) can be read and written; else one line
    naming the path, the cause and the setting to change."""
    problem = folder_problem(path)
    if problem:
        raise SettingError(f"{problem}; point {setting} to a folder this user can read and write")


def check_task_limit(task, name: str, limit: int | None) -> None:
    """A limit beyond the examples the task has stops the cell before anything loads (data that is
    not there yet is reported by the cell itself, under ``missing_data``)."""
    from mtad.data import DataMissingError
    from mtad.tasks.base import LimitError

    if limit is None:
        return
    try:
        task.examples(limit=limit)
    except LimitError as exc:
        raise SettingError(f"task={name}: {exc}") from None
    except DataMissingError:
        return


def explain_os_error(exc: OSError, settings: dict[str, Path]) -> SettingError | None:
    """One line for a permission/read-only error or a full disk: the path and the setting that
    controls it (``settings`` maps a setting's name to its folder); None for other errors."""
    if exc.errno == errno.ENOSPC:  # records written so far stand: free space and run again to resume
        where = next((f"{k}={v}" for k, v in settings.items() if k == "results_root"), "its folder")
        return SettingError(
            f"no space left on the device{f' writing {exc.filename}' if exc.filename else ''} (under {where}): "
            "free some space or point the setting elsewhere, then run again: finished examples are kept"
        )
    if not isinstance(exc, PermissionError) and exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    path = Path(exc.filename or "").absolute() if exc.filename else None
    if path is not None:
        for setting, folder in settings.items():
            folder = Path(folder).expanduser().absolute()
            if path == folder or folder in path.parents:
                return SettingError(
                    f"cannot write {path}: {exc.strerror}; it lies under {folder}, "
                    f"set by {setting}: point it to a writable folder"
                )
    where = f" {path}" if path else ""
    return SettingError(
        f"cannot access{where}: {exc.strerror} (settings that choose folders: "
        f"{', '.join(f'{k}={v}' for k, v in settings.items())})"
    )
