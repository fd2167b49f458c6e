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


@pytest.mark.parametrize("name", list_tasks())
def test_mtad_run_and_get_task_use_the_same_options(name):
    """``mtad-run task=<name>`` composes exactly the task's own defaults (one place: the class)."""
    from mtad.configs import compose

    options = OmegaConf.to_container(compose([f"task={name}"]).task, resolve=True)
    assert options.pop("name") == name
    assert options == get_task(name).options, f"conf/task/{name}.yaml overrides the task's defaults"


@pytest.mark.parametrize("name", ["spider", "cnndm", "mtbench", "humaneval"])
def test_task_end_to_end_on_real_data(name, suite_data, chat_tokenizer, plain_tokenizer):
    from mtad.configs import compose

    options = OmegaConf.to_container(compose([f"task={name}"]).task, resolve=True)
    task = get_task(name, data_root=suite_data, **options)
    assert task.name == name and task.max_new_tokens > 0 and task.samples_per_example >= 1
    examples = task.examples(limit=2)
    assert len(examples) == 2 and all(isinstance(e["id"], str) for e in examples)
    fresh = get_task(name, data_root=suite_data, **options)  # a new load gives the same examples
    assert [e["id"] for e in fresh.examples(limit=2)] == [e["id"] for e in examples] and examples is not fresh.examples(
        limit=2
    )
    assert task.primary_score in task.scores and task.label, "the task states its headline score and label"
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
    expected = task.primary_score
    assert expected in metrics and all(task.score_info(k) for k in metrics if k in task.scores)
    if name != "mtbench":  # mtbench: no judge configured by default, so the score is missing
        assert metrics[expected] == 1.0


@pytest.mark.slow
def test_embedded_target_on_every_task(suite_data):
    """The embedded target answers the first example of each task (greedy, short), and the
    answer is extracted, scored and re-scored for perplexity through the same calls the runner makes."""
    import math

    import torch

    from mtad.metrics.perplexity import mean_logprob, perplexity, sample_logprob
    from mtad.models.pairs import load_target_and_tokenizer, pair_config

    target, tokenizer = load_target_and_tokenizer(pair_config("smollm2_135m"), device="cpu")
    for name in list_tasks():
        task = get_task(name, data_root=suite_data)
        example = task.examples(limit=1)[0]
        history, means = [], []
        for _ in range(task.num_turns(example)):
            prompt = task.build_prompt(example, tokenizer, history=tuple(history))
            ids = torch.tensor([prompt])
            with torch.no_grad():
                out = target.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=24,
                    pad_token_id=tokenizer.eos_token_id,
                )
            new = out[0, len(prompt) :].tolist()
            history.append(task.postprocess(example, tokenizer.decode(new, skip_special_tokens=True)))
            means.append(mean_logprob(*sample_logprob(target, prompt, new)))
        scores = task.score(example, history)
        assert all(v is None or isinstance(v, (int, float)) for v in scores.values()), (name, scores)
        assert math.isfinite(perplexity(means)) and perplexity(means) >= 1.0
        assert task.aggregate([scores], [example["id"]])
