"""pass@k with the unbiased estimator of Chen et al. (2021), HumanEval."""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 - C(n-c, k) / C(n, k), n samples of which c passed."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:  # every k-subset contains a passing sample
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), stable for large n
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_by_problem(passed: list[int | bool], problem_ids: list[str], ks: list[int]) -> dict:
    """Mean pass@k over problems from one pass flag per sample.

    Returns ``pass@k`` for every k (None when some problem has fewer than k samples, with the
    reason under ``pass@k_note``), ``problems`` and ``samples_per_problem`` (min n).
    """
    if len(passed) != len(problem_ids):
        raise ValueError("one problem id per sample is needed")
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # id -> [n, c]
    for flag, pid in zip(passed, problem_ids):
        counts[pid][0] += 1
        counts[pid][1] += int(bool(flag))
    result: dict = {"problems": len(counts), "samples_per_problem": min((n for n, _ in counts.values()), default=0)}
    for k in ks:
        if not counts or result["samples_per_problem"] < k:
            result[f"pass@{k}"] = None
            result[f"pass@{k}_note"] = f"needs >= {k} samples per problem, min is {result['samples_per_problem']}"
            continue
        result[f"pass@{k}"] = float(np.mean([pass_at_k(n, c, k) for n, c in counts.values()]))
    return result
