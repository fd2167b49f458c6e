"""Every task through the one interface the runner uses, configured by its conf/task file."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mtad.tasks import get_task, list_tasks

CONF = Path(__file__).resolve().parents[1] / "conf" / "task"

# an answer of the kind a model gives, per task, for the first example
ANSWERS = {
    "spider": lambda ex: "```sql\nSELECT count(*) FROM singer;\n```",
    "cnndm": lambda ex: ex["highlights"],
    "mtbench": lambda ex: "Here is my answer.",
    "humaneval": lambda ex: ex["canonical_solution"],
}


def test_every_task_has_a_config():
    assert sorted(p.stem for p in CONF.glob("*.yaml")) == sorted(list_tasks())


@pytest.mark.parametrize("name", ["spider", "cnndm", "mtbench", "humaneval"])
def test_task_end_to_end_on_real_data(name, eval_data_root, chat_tokenizer, plain_tokenizer):
    options = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"), resolve=True)
    task = get_task(name, data_root=eval_data_root, **options)
    assert task.name == name and task.max_new_tokens > 0 and task.samples_per_example >= 1
    examples = task.examples(limit=2)
    assert len(examples) == 2 and all(isinstance(e["id"], str) for e in examples)
    assert [e["id"] for e in task.examples(limit=2)] == [e["id"] for e in examples]  # deterministic
    example = examples[0]
    completions = []
    for tokenizer in (plain_tokenizer, chat_tokenizer):
        history: list[str] = []
        for _ in range(task.num_turns(example)):
            ids = task.build_prompt(example, tokenizer, history=tuple(history))
            assert ids and all(isinstance(i, int) for i in ids)
            history.append(task.postprocess(example, ANSWERS[name](example)))
        completions = history
    scores = task.score(example, completions)
    assert scores and all(v is None or isinstance(v, (int, float)) for v in scores.values())
    metrics = task.aggregate([scores], [example["id"]])
    expected = {"spider": "exec_acc", "cnndm": "rougeL", "mtbench": "judge_score", "humaneval": "pass@1"}[name]
    assert expected in metrics
    if name != "mtbench":  # mtbench: no judge configured by default, so the score is missing
        assert metrics[expected] == 1.0
