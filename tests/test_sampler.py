"""The teacher pass's sampler and scorer on a tiny random model: refilled slots and a compacted
cache give every prompt the answer it gets alone; length buckets keep order and the token budget."""

from __future__ import annotations

import random

import torch

from mtad.distill.corpus import length_buckets, score
from mtad.distill.sampler import sample_stream
from mtad.models.tiny import tiny_model

torch.set_num_threads(1)
GREEDY = (0.0, 0, 1.0)


def _greedy_alone(model, prompt: list[int], max_new: int, eos: int) -> list[int]:
    """The answer of a plain greedy loop without any cache."""
    seq = list(prompt)
    for _ in range(max_new):
        with torch.no_grad():
            seq.append(int(model(torch.tensor(seq)[None]).logits[0, -1].argmax()))
        if seq[-1] == eos:
            break
    return seq[len(prompt) :]


def test_refilled_slots_and_compaction_give_each_prompt_its_own_answer():
    model = tiny_model("llama", 64, seed=3).double()
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 64) for _ in range(rng.randrange(1, 20))] for _ in range(9)]
    # 2 slots for 9 prompts: every slot is refilled several times; max_prompt 20 + 25 new tokens
    # make a 109-column buffer that 9 x 25 / 2 decode steps overflow, so it is compacted
    got = sample_stream(model, prompts, 25, GREEDY, eos=2, seed=0, slots=2, max_prompt=20)
    assert got == [_greedy_alone(model, p, 25, eos=2) for p in prompts]
    assert all(0 < len(a) <= 25 for a in got)


def test_compacting_at_every_step_changes_no_answer():
    """With no slack the buffer drops its dead columns after every step (and prompts of every
    length start in length order): each prompt still gets the answer it gets alone."""
    model = tiny_model("llama", 64, seed=3).double()
    rng = random.Random(2)
    prompts = [[rng.randrange(3, 64) for _ in range(rng.randrange(1, 30))] for _ in range(7)]
    got = sample_stream(model, prompts, 15, GREEDY, eos=2, seed=0, slots=3, max_prompt=24, slack=1)
    assert got == [_greedy_alone(model, p[-24:], 15, eos=2) for p in prompts]


def test_a_slot_per_prompt_and_more_slots_than_prompts_agree():
    model = tiny_model("llama", 64, seed=4).double()
    prompts = [[5, 6, 7], [8], [9, 10, 11, 12, 13, 14]]
    one_each = sample_stream(model, prompts, 12, GREEDY, eos=2, seed=0, slots=3)
    assert one_each == sample_stream(model, prompts, 12, GREEDY, eos=2, seed=0, slots=16)
    assert one_each == sample_stream(model, prompts, 12, GREEDY, eos=2, seed=0, slots=1)


def test_length_buckets_cover_every_index_once_within_the_budget():
    lengths = [30, 5, 17, 5, 40, 12, 33, 8]
    batches = length_buckets(lengths, max_tokens=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 60
    # sorted by length: no batch mixes a short sequence with a much longer one than its neighbours
    assert [lengths[i] for b in batches for i in b] == sorted(lengths)


def test_bucketed_scoring_returns_records_in_prompt_order():
    model = tiny_model("llama", 64, seed=5).float()
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12], [9, 10], [3, 4, 5]]
    answers = [[11, 12], [14, 15, 16, 17, 18, 19, 20], [7]]
    together = score(model, prompts, answers, 8, features=True, max_tokens=10)  # forces one batch each
    for p, a, rec in zip(prompts, answers, together):
        alone = score(model, [p], [a], 8, features=True)[0]
        assert rec["prompt_ids"].tolist() == p and rec["answer_ids"].tolist() == a
        assert torch.equal(rec["top_ids"], alone["top_ids"])
        assert torch.allclose(rec["features"].float(), alone["features"].float(), atol=1e-3)
        assert rec["features"].shape == (len(p) + len(a), model.config.hidden_size)


def test_the_sampling_forwards_are_the_teacher_pass_scoring_would_compute():
    """keep_top_k: the top-K log-probs and hidden states kept while sampling (refills and a compacted
    cache included) equal a teacher-forced scoring of the same answers, but for the last answer
    token's features, which no forward computes."""
    model = tiny_model("llama", 64, seed=3, num_layers=4).double()
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 64) for _ in range(rng.randrange(1, 20))] for _ in range(7)]
    answers, passes = sample_stream(
        model,
        prompts,
        25,
        (1.0, 0, 1.0),
        eos=2,
        seed=0,
        slots=2,
        max_prompt=20,
        keep_top_k=8,
        keep_features=True,
        depths=(1, 2, 4),
    )
    plain = sample_stream(model, prompts, 25, (1.0, 0, 1.0), eos=2, seed=0, slots=2, max_prompt=20)
    assert answers == plain  # keeping the pass changes no draw
    scored = score(model, prompts, answers, top_k=8, features=True)
    for answer, kept, ref in zip(answers, passes, scored):
        n = len(answer)
        assert kept["top_ids"].shape == (n, 8) and torch.equal(kept["top_ids"], ref["top_ids"])
        assert torch.allclose(kept["top_logprobs"].float(), ref["top_logprobs"].float(), atol=1e-3)
        assert kept["features"].shape == ref["features"].shape
        assert torch.allclose(kept["features"][:-1].float(), ref["features"][:-1].float(), atol=1e-3)
        assert torch.allclose(kept["depth_features"][:-1].float(), ref["depth_features"][:-1].float(), atol=1e-3)
        assert not kept["features"][-1].any() and not kept["depth_features"][-1].any()
