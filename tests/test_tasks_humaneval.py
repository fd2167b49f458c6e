"""HumanEval: canonical solutions pass, wrong ones fail, completion extraction, pass@k."""

from concurrent.futures import ThreadPoolExecutor
from itertools import combinations

import pytest

from mtad.tasks import get_task
from mtad.tasks.humaneval import extract_completion
from mtad.tasks.humaneval.passk import pass_at_k, pass_at_k_by_problem


@pytest.fixture(scope="module")
def humaneval(wheel_data):
    return get_task("humaneval", data_root=wheel_data)


def test_canonical_solutions_all_pass(humaneval):
    problems = humaneval.examples()
    assert len(problems) == 164
    # the canonical solution goes through the same extraction a generated completion does
    with ThreadPoolExecutor(max_workers=2) as pool:
        scores = list(
            pool.map(lambda p: humaneval.score(p, [humaneval.postprocess(p, p["canonical_solution"])]), problems)
        )
    failed = [p["id"] for p, s in zip(problems, scores) if not s["passed"]]
    assert not failed
    metrics = humaneval.aggregate(scores, [p["id"] for p in problems])
    assert metrics["pass@1"] == 1.0 and metrics["problems"] == 164 and metrics["timeout"] == 0


def test_wrong_completion_scores_zero(humaneval):
    problems = humaneval.examples(limit=3)
    wrong = ["    return None\n", "    return 'wrong'\n", "    raise ValueError\n"]
    scores = [humaneval.score(p, [w]) for p, w in zip(problems, wrong)]
    assert humaneval.aggregate(scores, [p["id"] for p in problems])["pass@1"] == 0.0


def test_exit_before_tests_is_a_failure(humaneval):
    problem = humaneval.examples(limit=1)[0]
    assert humaneval.score(problem, ["    import sys\n    sys.exit(0)\nimport sys\nsys.exit(0)\n"])["passed"] == 0


def test_chat_style_answer_is_extracted_and_passes(humaneval):
    problem = humaneval.examples(limit=1)[0]
    body = problem["canonical_solution"]
    answer = (
        f"Sure! Here is the function:\n\n```python\nfrom typing import List\n\n\n"
        f"def {problem['entry_point']}(numbers: List[float], threshold: float) -> bool:\n{body}\n\n"
        f"print({problem['entry_point']}([1.0, 2.0], 0.5))\n```\n\nIt compares every pair."
    )
    completion = humaneval.postprocess(problem, answer)
    assert "print(" not in completion and "Sure" not in completion
    assert humaneval.score(problem, [completion])["passed"] == 1


def test_prompt_helpers_are_kept(humaneval):
    # HumanEval/38 (decode_cyclic) needs encode_cyclic, defined in its prompt
    problem = next(p for p in humaneval.examples() if p["id"] == "HumanEval/38")
    assert "def encode_cyclic" in problem["prompt"]
    answer = f"```python\ndef decode_cyclic(s: str):\n{problem['canonical_solution']}```"
    assert humaneval.score(problem, [humaneval.postprocess(problem, answer)])["passed"] == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("    return 1\n\ndef other():\n    pass\n", "    return 1\n"),
        ("    return 1\nif __name__ == '__main__':\n    print(f())\n", "    return 1\n"),
        ("    x = 1\n\n    return x\n```\nDone", "    x = 1\n\n    return x\n"),
        ("def f(a):\n    return a\n\nassert f(1) == 1\n", "\ndef f(a):\n    return a\n"),
    ],
)
def test_extract_completion(text, expected):
    assert extract_completion(text, "f") == expected


def test_prompts(humaneval, plain_tokenizer, chat_tokenizer):
    problem = humaneval.examples(limit=1)[0]
    plain = plain_tokenizer.decode(humaneval.build_prompt(problem, plain_tokenizer), skip_special_tokens=True)
    assert plain == problem["prompt"]  # a plain model continues the function itself
    chat = chat_tokenizer.decode(humaneval.build_prompt(problem, chat_tokenizer), skip_special_tokens=True)
    assert problem["prompt"] in chat and "```python" in chat


def test_pass_at_k_matches_brute_force():
    for n, c in [(5, 0), (5, 1), (5, 3), (6, 6), (7, 2)]:
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(combinations(samples, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_over_problems():
    passed = [1, 0, 0, 0, 1, 1, 1, 1]
    ids = ["a"] * 4 + ["b"] * 4
    result = pass_at_k_by_problem(passed, ids, [1, 2, 4, 5])
    assert result["pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert result["pass@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert result["pass@4"] == 1.0
    assert result["pass@5"] is None and "needs >= 5" in result["pass@5_note"]


def test_k_larger_than_n_is_rejected(wheel_data):
    with pytest.raises(ValueError, match="samples_per_example"):
        get_task("humaneval", data_root=wheel_data, samples_per_example=2, k=[1, 5])
    assert get_task("humaneval", data_root=wheel_data, samples_per_example=5, k=[1, 5]).samples_per_example == 5
