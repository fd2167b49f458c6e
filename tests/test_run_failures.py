"""Failures that must not pass as results: bad settings stop before any work, a failed rerun
leaves a complete cell alone, the judge's failures leave the cell incomplete and are judged
again, corrupted records are reported, errors are one line naming the setting."""

import json
import logging
import os
import re
import shutil
import stat

import pytest
from judge_stub import Endpoint, endpoint  # noqa: F401  (a fixture)
from test_run import TASK_ARGS, cell_dirs, lines, mtad_run

from mtad.decoding.registry import specs

TINY = ["pair=tiny_llama", "logger=none"]


@pytest.fixture
def data_args(suite_data):
    return [f"data_root={suite_data}"]


def plan(overrides, tmp_path):
    """The runner's settings check for these overrides, in process (nothing is loaded)."""
    from hydra.core.hydra_config import HydraConfig
    from test_configs import compose_cfg

    from mtad.run import plan_cell
    from mtad.runner.layout import resolve_cell

    cfg = compose_cfg([*overrides, f"results_root={tmp_path / 'runs'}", f"data_root={tmp_path / 'no-data'}"])
    return plan_cell(cfg, resolve_cell(cfg, HydraConfig.get()))


@pytest.mark.parametrize(
    "override, message",
    [
        ("limit=-1", "limit must be a positive integer"),
        ("limit=0", "limit must be a positive integer"),
        ("limit=two", "limit must be a positive integer"),
        ("limit=2.5", "limit must be a positive integer"),
        ("per_task.cnndm.limit=-3", "per_task.cnndm.limit must be a positive integer"),
        ("method.gamma=0", "gamma must be an int >= 1"),
        ("method.threshold=1.5", "threshold must be in (0, 1]"),
        ("task.judge.kind=gpt5", "valid: none, hf, openai"),
        ("missing_data=skip", "missing_data must be one of fail, mark"),
        ("task.max_new_tokens=-5", "option max_new_tokens of task 'cnndm' must be > 0"),
        ("task.article_token_budget=many", "option article_token_budget of task 'cnndm' must be an integer"),
        ("seed=abc", "seed must be an integer"),
        ("threads=-1", "threads must be a positive integer"),
        ("warmup_tokens=-2", "warmup_tokens must be an integer >= 0"),
        ("progress=maybe", "progress must be true or false"),
    ],
)
def test_bad_settings_are_caught_before_any_work(tmp_path, override, message):
    from mtad.runner.checks import SettingError

    task = "task=mtbench" if override.startswith("task.judge") else "task=cnndm"
    with pytest.raises(SettingError, match=re.escape(message)):
        plan([*TINY, "method=mtad", task, override], tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["method=mtad", "method.tau=-1"],
            "method.tau: not a setting of method 'mtad'; valid: beam_weighting, beam_width, gamma, "
            "replacement, stop_below, temperature, threshold, top_k, top_p",
        ),
        (["method=mtad,mmtad", "method.denominator=node"], "method.denominator: not a setting of method 'mtad'"),
        (["task=cnndm", "task.tokens=3"], "task.tokens: not a setting of task 'cnndm'; valid: article_token_budget"),
        (["+method.nonsense=1"], "method.nonsense: not a setting of method 'sampling'"),
    ],
)
def test_unknown_setting_keys_list_the_valid_ones_before_hydra_runs(overrides, message):
    from mtad.runner.checks import check_override_keys

    assert message in check_override_keys(overrides)
    assert check_override_keys(["method=mmtad", "method.denominator=node", "task=spider", "task.timeout_s=2"]) is None
    assert check_override_keys(["experiment=sweeps", "method.gamma=3"]) is None  # the sweep names the methods


def test_unknown_setting_key_from_the_command_line(tmp_path):
    proc = mtad_run([*TINY, "method=mtad", "method.tau=-1"], tmp_path, check=False)
    assert (
        proc.returncode == 1 and "valid: beam_weighting, beam_width, gamma" in proc.log and "Traceback" not in proc.log
    )


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "method=mtda",
            "unknown method 'mtda'; did you mean 'mtad'? valid: mtad, mmtad, blockverify, hf_assisted, hf_generate, "
            "sampling, specinfer, spectr, sps",
        ),
        (
            "task=cnndn",
            "unknown task 'cnndn'; did you mean 'cnndm'? valid: cnndm, chat, heldout, humaneval, mtbench, spider",
        ),
        ("pair=tiny_lama", "unknown pair 'tiny_lama'; did you mean 'tiny_llama'? valid: tiny_llama, "),
        ("experiment=tabel2", "unknown experiment 'tabel2'; did you mean 'table2'? valid: table2, "),
        (
            "sweep=gama",
            "unknown sweep 'gama'; did you mean 'gamma'? valid: gamma, beam_width, stop_below, temperature, threshold",
        ),
        ("logger=wandbb", "unknown logger 'wandbb'; did you mean 'wandb'? valid: wandb, none"),
        ("energy=nvm", "unknown energy 'nvm'; did you mean 'nvml'? valid: nvml, "),
        ("pair=gpt5", "unknown pair 'gpt5'; valid: llama2_13b_68m, "),
        ("method=sps,mtda", "unknown method 'mtda'; did you mean 'mtad'?"),  # a multirun's list
        ("+method=choice(sps,mtda)", "unknown method 'mtda'; did you mean 'mtad'?"),
    ],
)
def test_an_unknown_group_option_is_one_line_with_the_nearest_names_first(override, message):
    from mtad.runner.checks import check_group_options

    problem = check_group_options(["-m", "logger=none", override])
    assert problem.startswith(message) and "\n" not in problem


def test_group_options_are_the_files_of_the_config_folder(tmp_path, monkeypatch):
    from mtad.configs import conf_dir
    from mtad.runner.checks import check_group_options

    shutil.copytree(conf_dir(), tmp_path / "conf")
    shutil.copy(tmp_path / "conf" / "method" / "mtad.yaml", tmp_path / "conf" / "method" / "mine.yaml")
    monkeypatch.setenv("MTAD_CONF_DIR", str(tmp_path / "conf"))
    assert (
        check_group_options(["method=mine,mtad", "~sweep", "experiment=null", "hydra/launcher=local_parallel"]) is None
    )
    assert check_group_options(["method=mien"]).startswith("unknown method 'mien'; did you mean 'mine'? valid: mine, ")


def test_group_options_include_the_command_lines_search_path_and_subfolders(tmp_path):
    """A pair in a config folder of the user's (``hydra.searchpath``) or in a subfolder of a group is
    an option; a package on the search path (``pkg://``) is left to Hydra, which can list it."""
    from mtad.runner.checks import check_group_options

    (tmp_path / "mine" / "pair" / "lab").mkdir(parents=True)
    (tmp_path / "mine" / "pair" / "my_pair.yaml").write_text("name: my_pair\n")
    (tmp_path / "mine" / "pair" / "lab" / "big.yaml").write_text("name: big\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'mine'}]"
    assert check_group_options([searchpath, "pair=my_pair,lab/big,tiny_llama"]) is None
    assert check_group_options(["pair=my_pair"]).startswith("unknown pair 'my_pair'")
    assert check_group_options([searchpath, "pair=my_pari"]).startswith(
        "unknown pair 'my_pari'; did you mean 'my_pair'?"
    )
    assert check_group_options(["hydra.searchpath=[pkg://elsewhere.conf]", "pair=my_pair"]) is None


def test_an_unknown_group_option_stops_mtad_run_and_the_claims_command_in_one_line(tmp_path, capsys):
    proc = mtad_run([*TINY, "task=chat", "method=sps,mtda", "-m"], tmp_path, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        "mtad-run: unknown method 'mtda'; did you mean 'mtad'? valid: mtad, mmtad, blockverify, hf_assisted, "
        "hf_generate, sampling, specinfer, spectr, sps\n"
    )
    from mtad.experiments.claims import main

    assert main(["--report-only", "task=cnndn", f"results_root={tmp_path / 'runs'}"]) == 1
    err = capsys.readouterr().err
    valid = "cnndm, chat, heldout, humaneval, mtbench, spider"
    assert err == f"claims: unknown task 'cnndn'; did you mean 'cnndm'? valid: {valid}\n"
    assert not (tmp_path / "runs").exists()


def test_mistyped_method_value_from_the_command_line(tmp_path):
    """The method's node is its typed settings class: Hydra refuses the value, naming key and type."""
    proc = mtad_run([*TINY, "method=mtad", "method.replacement=sometimes"], tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.log
    assert "'sometimes' is not a valid bool" in proc.log and "full_key: method.replacement" in proc.log
    assert not (tmp_path / "runs").exists()


def test_good_settings_pass_the_check(tmp_path):
    checked = plan([*TINY, "method=mtad", "task=cnndm", "limit=3"], tmp_path)
    assert checked.limit == 3 and checked.method_params["gamma"] == 4
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["task.judge.base_url=http://127.0.0.1:9/v1", "task.judge.api_key_env=MTAD_UNSET_JUDGE_KEY"],
            "MTAD_UNSET_JUDGE_KEY",
        ),
        (["task.judge.base_url=null"], "judge.base_url"),
        (["task.judge.kind=hf", "task.judge.model=null"], "the hf judge needs judge.model"),
    ],
)
def test_bad_judge_settings_are_caught_before_any_work(tmp_path, monkeypatch, extra, message):
    from mtad.runner.checks import SettingError

    monkeypatch.delenv("MTAD_UNSET_JUDGE_KEY", raising=False)
    with pytest.raises(SettingError, match=message):
        plan([*TINY, "method=sps", "task=mtbench", "task.judge.kind=openai", "task.judge.model=m", *extra], tmp_path)


@pytest.mark.slow
def test_a_bad_limit_stops_the_command_with_one_line(tmp_path):
    # a data root that does not exist: reaching the data would fail differently
    proc = mtad_run(
        [*TINY, "method=mtad", *TASK_ARGS, f"data_root={tmp_path / 'no-data'}", "limit=-1"], tmp_path, check=False
    )
    assert proc.returncode != 0
    assert "limit must be a positive integer (examples per cell) or null (all), got -1" in proc.log
    assert "Traceback" not in proc.log
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_failed_rerun_leaves_a_complete_cell_alone(tmp_path, data_args):
    args = [*TINY, "method=sampling", "limit=1", *TASK_ARGS]
    mtad_run([*args, *data_args], tmp_path)
    (cell,) = cell_dirs(tmp_path / "runs")
    before = {name: (cell / name).read_bytes() for name in ("samples.jsonl", "metrics.json", "env.json")}
    wrong = tmp_path / "wrong" / "cnndm"
    wrong.mkdir(parents=True)
    (wrong / "test.jsonl").write_text(json.dumps({"text": "no article"}) + "\n")  # a broken data file
    proc = mtad_run([*args, f"data_root={tmp_path / 'wrong'}", "limit=2"], tmp_path, check=False)
    assert proc.returncode != 0 and "line 1 lacks field(s)" in proc.log
    assert not (cell / "error.txt").exists()
    assert {name: (cell / name).read_bytes() for name in before} == before

    from mtad.report.cells import load_cells

    assert list(load_cells(tmp_path / "runs")["status"]) == ["complete"]


# root ignores directory permissions: there, the folder refuses writes through a patched mkdir
REFUSE_WRITES_UNDER = """
import os, pathlib
LOCKED = os.environ["MTAD_TEST_LOCKED"]
_mkdir = pathlib.Path.mkdir
def mkdir(self, *args, **kwargs):
    if str(self.absolute()).startswith(LOCKED + "/"):
        raise PermissionError(13, "Permission denied", str(self))
    return _mkdir(self, *args, **kwargs)
pathlib.Path.mkdir = mkdir
"""


@pytest.mark.slow
def test_unwritable_results_root_is_one_line_naming_the_setting(tmp_path, data_args):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        proc = mtad_run(
            [*TINY, "method=sampling", "limit=1", *TASK_ARGS, *data_args, f"results_root={locked}/runs"],
            tmp_path,
            check=False,
            prefix=REFUSE_WRITES_UNDER if os.geteuid() == 0 else None,
            env={"MTAD_TEST_LOCKED": str(locked)},
        )
    finally:
        locked.chmod(stat.S_IRWXU)
    assert proc.returncode != 0
    assert f"{locked}" in proc.log and "results_root" in proc.log and "ermission denied" in proc.log
    assert "Traceback" not in proc.log


def test_permission_errors_name_the_setting_of_their_folder(tmp_path):
    from mtad.runner.checks import SettingError, check_writable, explain_os_error

    cache, runs = tmp_path / "cache", tmp_path / "runs"
    exc = PermissionError(13, "Permission denied", str(cache / "targets" / "smollm2_135m" / "model.safetensors"))
    message = str(explain_os_error(exc, {"results_root": runs, "MTAD_CACHE": cache}))
    assert "MTAD_CACHE" in message and str(cache / "targets") in message and "\n" not in message
    assert explain_os_error(FileNotFoundError(2, "No such file", "x"), {"MTAD_CACHE": cache}) is None
    if os.geteuid() != 0:
        runs.mkdir()
        runs.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            with pytest.raises(SettingError, match="results_root"):
                check_writable(runs / "exp" / "cell", "results_root")
        finally:
            runs.chmod(stat.S_IRWXU)


UNWRITABLE_CACHE = """
import mtad.runner.session as r
from mtad.data import cache_root
def load_pair_cached(cfg):
    raise PermissionError(13, "Permission denied", str(cache_root() / "targets" / "x" / "model.safetensors"))
r.load_pair_cached = load_pair_cached
"""


@pytest.mark.slow
def test_unwritable_cache_names_mtad_cache(tmp_path, data_args):
    proc = mtad_run(
        [*TINY, "method=sampling", "limit=1", *TASK_ARGS, *data_args],
        tmp_path,
        check=False,
        prefix=UNWRITABLE_CACHE,
        env={"MTAD_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode != 0
    assert "MTAD_CACHE" in proc.log and str(tmp_path / "cache") in proc.log
    assert "Traceback" not in proc.log


def valid_record(example_id: str) -> str:
    turn = {
        "token_ids": [1, 2],
        "text": "ab",
        "completion": "ab",
        "logprob_sum": -0.5,
        "logprob_n": 2,
        "stats": {"new_tokens": 2, "seconds": 0.1, "target_calls": 2},
    }
    return json.dumps({"id": example_id, "samples": [{"turns": [turn], "scores": {}}]}) + "\n"


def test_a_corrupted_middle_line_is_reported_and_the_lines_after_it_kept(tmp_path, caplog):
    from mtad.records import read_records

    path = tmp_path / "samples.jsonl"
    a, c, d = valid_record("a"), valid_record("c"), valid_record("d")
    path.write_text(a + '{"id": "b", "sam\n' + c + d + valid_record("e")[:-9])
    with caplog.at_level(logging.WARNING):
        records = read_records(path, repair=True)
    assert [r["id"] for r in records] == ["a", "c", "d"]  # e: a torn last line, cut off
    assert f"{path} line 2 is rejected: not JSON" in caplog.text and "torn last line" in caplog.text
    assert path.read_text() == a + c + d
    assert (tmp_path / "samples.jsonl.corrupt").read_text() == '{"id": "b", "sam\n'


def test_a_record_failing_the_schema_is_quarantined_with_its_file_and_line(tmp_path, caplog):
    """Valid JSON without a field every reader needs (`turns`) is not a finished example."""
    from mtad.records import read_records
    from mtad.report.examples import read_records

    path = tmp_path / "samples.jsonl"
    broken = json.dumps({"id": "b", "samples": [{"scores": {}}]}) + "\n"
    path.write_text(valid_record("a") + broken)
    with caplog.at_level(logging.WARNING):
        assert [r["id"] for r in read_records(path)] == ["a"]  # the report's read: skipped, file untouched
        assert f"{path} line 2 skipped: sample 0 lacks 'turns'" in caplog.text and path.read_text().endswith(broken)
        assert [r["id"] for r in read_records(path, repair=True)] == ["a"]
    assert f"{path} line 2 is rejected: sample 0 lacks 'turns'" in caplog.text
    assert (tmp_path / "samples.jsonl.corrupt").read_text() == broken and path.read_text() == valid_record("a")


def test_duplicate_records_are_read_once_and_said(tmp_path, caplog):
    from mtad.records import read_records
    from mtad.report.examples import read_records

    path = tmp_path / "samples.jsonl"
    path.write_text(valid_record("a") + valid_record("b") + valid_record("a"))
    with caplog.at_level(logging.WARNING):
        assert [r["id"] for r in read_records(path)] == ["a", "b"]
        assert "line 3 skipped: a second record of example 'a'" in caplog.text
        assert [r["id"] for r in read_records(path, repair=True)] == ["a", "b"]
    assert path.read_text() == valid_record("a") + valid_record("b")


JUDGE = [
    "task=mtbench",
    "task.max_new_tokens=4",
    "task.judge.kind=openai",
    "task.judge.model=judge-model",
    "task.judge.api_key_env=MTAD_TEST_JUDGE_KEY",
    "task.judge.retries=1",
    "task.judge.timeout_s=5",
]


@pytest.mark.slow
def test_judge_failures_leave_the_cell_incomplete_and_are_judged_again(tmp_path, wheel_data, endpoint):
    args = [*TINY, "method=sps", "limit=1", *JUDGE, f"+task.judge.base_url={endpoint}", f"data_root={wheel_data}"]
    args = [a.replace("+task.judge.base_url", "task.judge.base_url") for a in args]
    env = {"MTAD_TEST_JUDGE_KEY": "sk-stub"}
    Endpoint.replies = [("status", 503), ("garbage", "<html>bad gateway</html>")]
    first = mtad_run(args, tmp_path, check=False, env=env)
    assert first.returncode != 0, first.log[-2000:]
    (cell,) = cell_dirs(tmp_path / "runs")
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["status"] == "incomplete" and "HTTP 503" in metrics["incomplete_reason"]
    assert (
        "unparsable reply" in metrics["scores"]["judge_missing_reason"]
        or "HTTP 503" in metrics["scores"]["judge_missing_reason"]
    )
    assert not (cell / "error.txt").exists()
    assert [auth for _, auth, _ in Endpoint.requests] == ["Bearer sk-stub"] * 2
    generated = lines(cell / "samples.jsonl")

    Endpoint.requests.clear()
    Endpoint.replies = [("rating", "Fine. Rating: [[7]]"), ("rating", "Rating: [[5]]")]
    second = mtad_run(args, tmp_path, check=False, env=env)
    assert second.returncode == 0, second.log[-2000:]
    assert "1 to score again" in second.log
    rejudged = lines(cell / "samples.jsonl")
    assert len(Endpoint.requests) == 2  # the two turns, judged again
    assert [t["token_ids"] for t in rejudged[0]["samples"][0]["turns"]] == [
        t["token_ids"] for t in generated[0]["samples"][0]["turns"]
    ]  # not generated again
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["status"] == "complete" and metrics["scores"]["judge_score"] == 6.0

    from mtad.report.cells import load_cells

    assert list(load_cells(tmp_path / "runs")["status"]) == ["complete"]


@pytest.mark.slow
def test_without_spider_questions_the_grid_marks_that_task_missing_and_exits_0(tmp_path, wheel_data):
    """A data root with HumanEval only: CNN/DM's shipped articles are read, Spider's questions
    (a wheel not fetched) are missing, with the command that gets them."""
    data_root = tmp_path / "data"
    shutil.copytree(wheel_data / "humaneval", data_root / "humaneval")
    proc = mtad_run(
        [
            "-m",
            *TINY,
            "method=sampling",
            "task=spider,cnndm,humaneval",
            "limit=1",
            "missing_data=mark",
            "+per_task.humaneval.max_new_tokens=8",
            "+per_task.cnndm.max_new_tokens=8",
            "+per_task.cnndm.article_token_budget=48",
            f"data_root={data_root}",
        ],
        tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.log[-3000:]
    from mtad.report.cells import load_cells
    from mtad.report.tables import build_table2

    cells = load_cells(tmp_path / "runs").set_index("task")
    assert cells.loc["humaneval", "status"] == "complete" and cells.loc["cnndm", "status"] == "complete"
    assert cells.loc["spider", "status"] == "missing"
    assert "spider data not found" in cells.loc["spider", "missing_reason"]
    assert f"python scripts/get_data.py --data-root {data_root} --only spider" in cells.loc["spider", "missing_reason"]
    md, _ = build_table2(
        tmp_path / "runs", tmp_path / "tables", experiment="default", overrides=None, allow_mixed_provenance=True
    )
    text = md.read_text()
    assert "| spider | sampling | missing |" in text and "python scripts/get_data.py" in text


def test_get_data_says_which_spider_databases_ship_and_how_to_get_the_others(tmp_path, suite_data):
    import subprocess
    import sys

    from test_run import REPO

    data_root = tmp_path / "data"  # the questions (as from the wheel), no databases
    shutil.copytree(suite_data / "spider", data_root / "spider", ignore=shutil.ignore_patterns("database"))
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "get_data.py"), "--data-root", str(data_root), "--only", "spider"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "1 shipped with mtad (concert_singer" in result.stdout and "--spider-dir DIR" in result.stdout
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "get_data.py"),
            "--data-root",
            str(data_root),
            "--only",
            "spider",
            "--spider-dir",
            str(tmp_path / "nonexistent"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "no such directory" in result.stderr


def test_a_second_run_of_a_cell_being_written_stops_naming_the_holder(tmp_path, data_args):
    """One writer per cell: while another run holds the cell, a run of it writes nothing and says
    who holds it; once free, the same command runs it."""
    from mtad.runner.lock import cell_lock

    args = [*TINY, "method=sampling", "limit=1", *TASK_ARGS, *data_args]
    cell = (
        tmp_path
        / "runs"
        / "default"
        / "tiny_llama"
        / "cnndm"
        / "sampling"
        / "task.article_token_budget=48,task.max_new_tokens=12"
    )  # TASK_ARGS name the cell's overrides folder
    with cell_lock(cell, "held by this test"):
        busy = mtad_run(args, tmp_path, check=False)
    assert busy.returncode == 1 and "is being written by another run" in busy.log
    assert f"pid {os.getpid()}" in busy.log and "Traceback" not in busy.log
    assert not (cell / "samples.jsonl").exists() and not (cell / "error.txt").exists()
    mtad_run(args, tmp_path)
    assert len((cell / "samples.jsonl").read_text().splitlines()) == 1 and not (cell / ".cell.lock.holder").exists()


def head_file_of_another_model(tmp_path):
    """A feature head saved for a tiny Llama wider than tiny_llama_head's target."""
    from mtad.models.head import build_head, save_head
    from mtad.models.tiny import tiny_model

    wider = tiny_model("llama", 300, seed=0, hidden_size=48)
    return save_head(build_head(wider, 1, seed=1), tmp_path / "wider_head.safetensors")


def bad_draft_files(tmp_path):
    """(file, what the one-line error says) for each way a draft file can be wrong."""
    from mtad.models.pairs import ASSETS_DIR

    head = ASSETS_DIR / "drafts" / "smollm2_135m_head.safetensors"
    truncated, noise = tmp_path / "truncated.safetensors", tmp_path / "noise.safetensors"
    truncated.write_bytes(head.read_bytes()[: head.stat().st_size // 2])
    noise.write_bytes(os.urandom(4096))
    return [
        (truncated, "is not a readable safetensors file"),
        (noise, "is not a readable safetensors file"),
        (ASSETS_DIR / "drafts" / "smollm2_135m_draft.safetensors", "is not an mtad feature head file"),
        (tmp_path, "is a directory, not a feature head file"),
    ]


def test_a_bad_draft_file_is_one_line_naming_it_before_any_work(tmp_path):
    from mtad.runner.checks import SettingError

    for path, message in bad_draft_files(tmp_path):
        with pytest.raises(SettingError, match=re.escape(message)) as refused:
            plan(["pair=smollm2_135m_head", f"pair.draft.file={path}", "task=chat", "method=sps"], tmp_path)
        assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_head_of_another_models_shape_stops_the_run_in_one_line_and_leaves_no_folder(tmp_path):
    path = head_file_of_another_model(tmp_path)
    args = ["pair=tiny_llama_head", f"pair.draft.file={path}", "task=chat", "method=sps", "limit=1", "logger=none"]
    proc = mtad_run(args, tmp_path, check=False)
    assert proc.returncode != 0
    assert "was made for another model" in proc.log and str(path) in proc.log and "Traceback" not in proc.log
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*"))


@pytest.mark.slow
def test_missing_data_stops_the_run_in_one_line_and_leaves_no_folder(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for task, limit in (("humaneval", 1), ("spider", 46)):
        args = [*TINY, f"task={task}", "method=sampling", f"limit={limit}", f"data_root={empty}"]
        proc = mtad_run(args, tmp_path, check=False)
        assert proc.returncode != 0 and f"{task} data not found" in proc.log and "Traceback" not in proc.log
        assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file()], task


def test_a_multirun_refuses_a_bad_value_before_its_first_cell(tmp_path):
    from mtad.runner.multirun import all_jobs, first_bad_job

    swept = [*TINY, "task=chat", "method=sps", "method.gamma=2,0", f"results_root={tmp_path / 'runs'}"]
    assert [j[-1] for j in all_jobs(swept)] == ["method.gamma=2", "method.gamma=0"]
    problem = first_bad_job(swept)
    assert problem.endswith("method=sps: gamma must be an int >= 1, got 0") and "method.gamma=0" in problem
    assert first_bad_job([*TINY, "task=chat", "method=sps", "method.gamma=2,3"]) is None
    # the experiment's grid (4 tasks x the study's methods) and 4 adaptive cells beside it per lossless method with
    # a threshold, a command-line value taking its key out of both
    adaptive = sum(1 for s in specs().values() if s.lossless and s.adaptive_stop is not None)
    assert len(all_jobs(["experiment=table2"])) == 4 * len(specs()) + 4 * adaptive
    assert len(all_jobs(["experiment=table2", "method=mtad"])) == 4
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_multirun_with_a_bad_value_runs_nothing(tmp_path):
    proc = mtad_run(["-m", *TINY, "task=chat", "method=sps", "limit=1", "method.gamma=2,0"], tmp_path, check=False)
    assert proc.returncode != 0 and "nothing ran" in proc.log and "gamma must be an int >= 1" in proc.log
    assert "Traceback" not in proc.log and not list((tmp_path / "runs").rglob("samples.jsonl"))


def test_a_full_disk_is_one_line_naming_results_root_and_that_runs_resume(tmp_path):
    import errno

    from mtad.runner.checks import explain_os_error

    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "runs" / "x" / "samples.jsonl"))
    explained = explain_os_error(full, {"results_root": tmp_path / "runs", "MTAD_CACHE": tmp_path / "cache"})
    assert "no space left on the device" in str(explained) and f"results_root={tmp_path / 'runs'}" in str(explained)
    assert "finished examples are kept" in str(explained)


def test_a_plain_run_of_a_paper_task_is_bounded_by_a_documented_limit(tmp_path):
    for task in ("cnndm", "spider", "mtbench", "humaneval"):
        from test_configs import compose_cfg

        from mtad.runner.checks import task_settings

        cfg = compose_cfg([f"task={task}"])
        assert task_settings(cfg, task)[1] == 10
        assert task_settings(compose_cfg([f"task={task}", "limit=null"]), task, ["limit=null"])[1] is None
