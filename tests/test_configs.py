"""Every config group option and every experiment/sweep composes and instantiates (no model runs)."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from mtad import configs
from mtad.decoding import DECODERS, METHODS
from mtad.metrics.energy_meters import METER_KINDS, make_energy_meter
from mtad.runner.checks import check_method, task_settings
from mtad.tasks import get_task, list_tasks
from mtad.tracking import NullLogger

CONF_DIR = str(configs.setup())  # the code defaults registered, the config root found
CONF = Path(CONF_DIR)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_cfg(overrides=()):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # so ${hydra:...} interpolations resolve
    return cfg


def test_default_config_composes():
    cfg = compose_cfg()
    choices = cfg.hydra.runtime.choices
    assert (choices.pair, choices.method, choices.task, choices.logger, choices.energy) == (
        "smollm2_135m_head",
        "sampling",
        "cnndm",
        "wandb",
        "auto",
    )
    assert cfg.logger.mode == "offline" and cfg.hydra.job.chdir is False
    # every interpolation outside hydra's own node resolves, and nothing is left unset (???)
    resolved = {
        key: OmegaConf.to_container(cfg[key], resolve=True, throw_on_missing=True)
        if OmegaConf.is_config(cfg[key])
        else cfg[key]
        for key in cfg
        if key != "hydra"
    }
    assert "${" not in json.dumps(resolved)
    assert resolved["pair"]["name"] == "smollm2_135m_head" and resolved["results_root"] == "results/local/runs"


def configured_methods() -> list[str]:
    """The methods a cell can run: conf/method/ names the study's and the reference implementations."""
    return options("method")


def test_method_files_are_the_study_methods_and_the_references_with_contract_params():
    assert set(METHODS) <= set(configured_methods()) <= set(DECODERS)
    assert [m for m in configured_methods() if m not in METHODS] == ["hf_assisted", "hf_generate"]
    for method in configured_methods():
        params = OmegaConf.to_container(compose_cfg([f"method={method}"]).method)
        assert set(params) <= set(DECODERS[method].defaults), method  # only the contract's names
        assert (params["temperature"], params["top_k"], params["top_p"]) == (1.0, 10, 0.9)


@pytest.mark.parametrize("method", configured_methods())
def test_mtad_run_and_get_decoder_run_the_same_method(method):
    """``mtad-run method=<name>`` and ``get_decoder(<name>)`` from Python: the same parameters."""
    from mtad.decoding import get_decoder
    from mtad.models.tiny import tiny_llama

    from_config = OmegaConf.to_container(compose_cfg([f"method={method}"]).method, resolve=True)
    target, draft = tiny_llama(0, vocab=8), tiny_llama(1, vocab=8)
    from_python = get_decoder(method, target=target, draft=draft).params
    from_run = get_decoder(method, target=target, draft=draft, **from_config).params
    assert from_run == from_python, f"{method}: conf/method/{method}.yaml overrides the code's defaults"


@pytest.mark.parametrize("method", configured_methods())
def test_method_config_is_the_settings_class_with_its_defaults(method):
    """The composed ``method`` node: the settings class's fields, in field order, with the
    defaults' values and types (a tuple composes as a list)."""
    node = compose_cfg([f"method={method}"]).method
    settings = asdict(DECODERS[method].params_type())
    composed = OmegaConf.to_container(node)
    assert list(composed) == list(settings)
    assert composed == {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}
    assert [type(v) for v in composed.values()] == [
        list if isinstance(v, tuple) else type(v) for v in settings.values()
    ]
    assert OmegaConf.get_type(node) is DECODERS[method].params_type


@pytest.mark.parametrize(
    "method, override, key, value",
    [
        ("mtad", "method.gamma=3", "gamma", 3),
        ("mmtad", "method.threshold=0.3", "threshold", 0.3),
        ("specinfer", "method.k_config=[2,2]", "k_config", (2, 2)),
        ("mtad", "method.replacement=false", "replacement", False),
        ("sps", "method.temperature=0", "temperature", 0.0),
    ],
)
def test_method_overrides_reach_the_settings(method, override, key, value):
    composed = OmegaConf.to_container(compose_cfg([f"method={method}", override]).method)
    settings = check_method(method, composed)
    assert getattr(settings, key) == value and type(getattr(settings, key)) is type(value)


@pytest.mark.parametrize(
    "method, override, message",
    [
        ("mmtad", "method.gamma=three", "Value 'three' of type 'str' could not be converted to Integer"),
        ("mtad", "method.threshold=high", "Value 'high' of type 'str' could not be converted to Float"),
        ("mtad", "method.replacement=sometimes", "Value 'sometimes' is not a valid bool"),
        ("specinfer", "method.k_config=[2,x]", "Value 'x' of type 'str' could not be converted to Integer"),
        ("sps", "method.beam_width=2", "Key 'beam_width' not in 'SpSParams'"),
    ],
)
def test_mistyped_method_override_fails_naming_the_key(method, override, message):
    """Hydra refuses a value of the wrong type for the method's settings class, naming the key."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as failure:
        compose_cfg([f"method={method}", override])
    cause = str(failure.value.__cause__)
    assert message in cause and f"full_key: {override.split('=')[0]}" in cause


@pytest.mark.parametrize("pair", options("pair"))
def test_pair_files_compose(pair):
    from mtad.models import pair_config

    cfg = compose_cfg([f"pair={pair}"])
    resolved = pair_config(OmegaConf.to_container(cfg.pair, resolve=True))
    assert resolved["name"] == pair


@pytest.mark.parametrize("task", options("task"))
def test_task_files_build_tasks(task):
    assert task in list_tasks()
    cfg = compose_cfg([f"task={task}"])
    task_options, _ = task_settings(cfg, task)
    assert get_task(task, **task_options).name == task


@pytest.mark.parametrize("logger", options("logger"))
def test_logger_files(logger):
    cfg = compose_cfg([f"logger={logger}"])
    if logger == "none":
        assert isinstance(instantiate(cfg.logger), NullLogger)
    else:  # do not start a run here; test_tracking does
        assert get_class(cfg.logger._target_).__name__ == "WandbLogger"
        assert cfg.logger.mode == "offline" and "dir" in cfg.logger


@pytest.mark.parametrize("energy", options("energy"))
def test_energy_files(energy):
    assert energy in METER_KINDS
    meter, reason = make_energy_meter(compose_cfg([f"energy={energy}"]).energy.meter, devices=["cpu"])
    assert hasattr(meter, "start") and (reason is None or isinstance(reason, str))


@pytest.mark.parametrize("launcher", ["basic", "joblib", "submitit_slurm"] + options("hydra/launcher"))
def test_launchers(launcher):
    cfg = compose_cfg([f"hydra/launcher={launcher}"])
    assert get_class(cfg.hydra.launcher._target_).__name__.endswith("Launcher")


def grid(cfg) -> list[list[str]]:
    """The cells of a multirun config as override lists (the basic sweeper's cartesian product)."""
    from itertools import product

    params = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True) if cfg.hydra.sweeper.params else {}
    keys = list(params)
    values = [expand(str(params[k])) for k in keys]
    return [[f"{k}={v}" for k, v in zip(keys, combo)] for combo in product(*values)]


def expand(text: str) -> list[str]:
    if text.startswith("range("):
        lo, hi = (int(x) for x in text[6:-1].split(","))
        return [str(v) for v in range(lo, hi)]
    return text.split(",")


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiments_compose_every_cell(experiment, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-only-checked-for-presence")  # table2_full's judge needs one
    cfg = compose_cfg([f"experiment={experiment}"])
    assert cfg.experiment_name == experiment
    for task in cfg.per_task:
        assert task in list_tasks(), f"{experiment}: per_task names unknown task {task}"
    cells = (grid(cfg) or [[]]) + [beside_cell(grid(cfg)[0], list(beside)) for beside in cfg.beside_grid]
    for cell in cells:
        cell_cfg = compose_cfg([f"experiment={experiment}", *cell])
        task = cell_cfg.hydra.runtime.choices.task
        task_options, limit = task_settings(cell_cfg, task)
        get_task(task, **task_options)  # options accepted
        assert cell_cfg.hydra.runtime.choices.method in DECODERS
        check_method(cell_cfg.hydra.runtime.choices.method, OmegaConf.to_container(cell_cfg.method))


def beside_cell(cell: list[str], beside: list[str]) -> list[str]:
    """A cell of the grid with the keys of a `beside_grid` entry set to the entry's values."""
    keys = {o.split("=")[0] for o in beside}
    return [o for o in cell if o.split("=")[0] not in keys] + beside


PAPER_TASKS = ("spider", "cnndm", "mtbench", "humaneval")  # `chat` (held-out prompts) is no paper task


def test_table2_experiments_cover_every_method_and_task():
    for experiment in ("table2", "smoke", "table2_full"):
        cells = grid(compose_cfg([f"experiment={experiment}"]))
        assert {tuple(sorted(c)) for c in cells} == {
            tuple(sorted([f"task={t}", f"method={m}"])) for t in PAPER_TASKS for m in METHODS
        }, experiment


@pytest.mark.parametrize(
    "sweep, key, values",
    [
        ("gamma", "method.gamma", [str(g) for g in range(1, 9)]),
        ("beam_width", "method.beam_width", ["1", "2", "4", "8"]),
        ("threshold", "method.threshold", [f"0.{i}" for i in range(1, 10)]),
    ],
)
def test_sweeps(sweep, key, values):
    cfg = compose_cfg(["experiment=sweeps", f"sweep={sweep}"])
    assert cfg.hydra.mode.name == "MULTIRUN"
    cells = grid(cfg)
    assert sorted({c[1].split("=")[1] for c in cells}, key=float) == values
    for cell in cells[:: max(1, len(cells) // 4)]:  # a spread of cells: the override applies
        cell_cfg = compose_cfg(["experiment=sweeps", f"sweep={sweep}", *cell])
        assert str(OmegaConf.select(cell_cfg, key)) == cell[1].split("=")[1]


def test_conf_dir_is_found_once_for_every_reader(monkeypatch, tmp_path):
    from mtad import configs
    from mtad.models.pairs import pair_conf_dir

    assert configs.conf_dir() == CONF.resolve() and pair_conf_dir() == CONF.resolve() / "pair"
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    monkeypatch.setenv("MTAD_CONF_DIR", str(tmp_path))
    assert configs.conf_dir() == tmp_path.resolve() and pair_conf_dir() == tmp_path.resolve() / "pair"
    monkeypatch.setenv("MTAD_CONF_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="MTAD_CONF_DIR"):
        configs.conf_dir()


def test_a_wheel_ships_every_config_folder():
    """pyproject's data-files list every folder of conf/ that holds configs, so a wheel
    (non-editable) install finds them under <prefix>/share/mtad/conf."""
    import tomllib

    shipped = tomllib.loads((CONF.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    folders = {str(p.parent.relative_to(CONF.parent)) for p in CONF.rglob("*.yaml")}
    assert {dest.removeprefix("share/mtad/"): files for dest, files in shipped.items()} == {
        folder: [f"{folder}/*.yaml"] for folder in folders
    }


def changed(value):
    """Another value of the same type (what a user would type instead)."""
    if value is None:  # a null limit (all examples): a number instead
        return 3
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, list):
        return [*value, *value[-1:]]
    return f"{value}-changed"


def leaves(settings: dict, prefix: str = ""):
    """(dotted key, value) of every leaf of a nested settings dict."""
    for key, value in settings.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


PER_TASK_SETTINGS = [
    (experiment, task, key, value)
    for experiment in options("experiment")
    for task, settings in (OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml").get("per_task") or {}).items()
    for key, value in leaves(OmegaConf.to_container(settings))
]


def lookup(options: dict, key: str):
    for part in key.split("."):
        options = options[part]
    return options


@pytest.mark.parametrize("experiment,task,key,value", PER_TASK_SETTINGS, ids=lambda v: str(v))
def test_a_task_setting_on_the_command_line_wins_over_the_experiments_per_task(
    experiment, task, key, value, monkeypatch
):
    """What names the cell (`task.<key>=...` in its folder) is what it runs and records."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-only-checked-for-presence")  # table2_full's judge needs one
    given = changed(value)
    override = f"task.{key}={json.dumps(given) if not isinstance(given, str) else given}"
    cfg = compose_cfg([f"experiment={experiment}", f"task={task}", override])
    options_, limit = task_settings(cfg, task, [override])
    assert (limit if key == "limit" else lookup(options_, key)) == given
    plain, plain_limit = task_settings(cfg, task)  # without it on the command line: the experiment's value
    assert (plain_limit if key == "limit" else lookup(plain, key)) == value


def test_table2_the_sweeps_and_the_reproduction_check_run_every_method_the_registry_holds():
    from mtad.configs import methods_value, planned_grid
    from mtad.decoding.registry import specs, study_methods

    assert planned_grid("table2")["method"] == list(study_methods())
    assert planned_grid("sweeps", "temperature")["method"] == list(study_methods())
    assert planned_grid("verify")["method"] == list(study_methods())
    drafting = [name for name, s in specs().items() if s.drafts != "none"]
    assert planned_grid("sweeps", "stop_below")["method"] == drafting and "sampling" not in drafting
    assert methods_value("lossless").split(",") == [name for name, s in specs().items() if s.lossless]
    with pytest.raises(ValueError, match="valid: study, drafting, lossless"):
        methods_value("fast")
