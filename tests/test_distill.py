"""Draft distillation on tiny random pairs: the loss goes down, the loop resumes, helpers are sane."""
from __future__ import annotations

import json

import pytest
import torch

from mtad.models.distill import (
    Corpus, DistillConfig, Distiller, choose_head_tokens, draft_head_logprobs, evaluate_on_topk,
    full_to_head_index, generate_chunk, kl_loss, pair_stats, process_probs, train_step, trainable_parameters,
    _batch,
)
from mtad.models.draft import build_draft_from_target
from mtad.models.prompts import make_prompts
from mtad.models.tiny import tiny_model, tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    target = tiny_model("llama", len(tokenizer), seed=0, num_layers=3).float()
    return target, tokenizer


@pytest.fixture(scope="module")
def chunk(tiny):
    target, tokenizer = tiny
    return generate_chunk(target, tokenizer, make_prompts(6, seed=0), (1.0, 0, 1.0), max_new_tokens=12,
                          top_k_store=16, seed=0)


def test_generated_chunk_holds_target_topk_at_answer_positions(tiny, chunk):
    target, tokenizer = tiny
    rec = chunk["records"][0]
    n = len(rec["answer_ids"])
    assert rec["top_ids"].shape == rec["top_logprobs"].shape == (n, 16)
    # the stored log-probs are the target's own at those positions (teacher-forced check)
    seq = torch.cat([rec["prompt_ids"], rec["answer_ids"]]).long()[None]
    with torch.no_grad():
        logp = torch.log_softmax(target(seq).logits[0].float(), -1)
    P = len(rec["prompt_ids"])
    expected = logp[P - 1:P - 1 + n].gather(-1, rec["top_ids"].long())
    assert torch.allclose(expected, rec["top_logprobs"].float(), atol=2e-2)
    assert torch.allclose(chunk["mass"].sum(), torch.tensor(float(sum(len(r["answer_ids"]) for r in chunk["records"])),
                                                            dtype=torch.float64), rtol=1e-4)


def test_distillation_steps_lower_the_kl(tiny, chunk):
    target, _ = tiny
    torch.manual_seed(0)
    draft = build_draft_from_target(target, [0], head_token_ids=list(range(0, 250)))
    optimizer = torch.optim.AdamW(trainable_parameters(draft), lr=3e-3)
    head_index = full_to_head_index(draft)
    records = chunk["records"]

    def kl_now() -> float:
        ids, mask, rows, cols, top_ids, top_lp = _batch(records, torch.device("cpu"))
        with torch.no_grad():
            return float(kl_loss(draft_head_logprobs(draft, ids, mask, rows, cols), top_ids, top_lp, head_index))

    before = kl_now()
    for _ in range(8):
        train_step(draft, optimizer, records, head_index, torch.device("cpu"), autocast_dtype=None)
    after = kl_now()
    assert after < 0.8 * before, (before, after)
    assert not draft.model.embed_tokens.weight.requires_grad  # the shared embedding stays the target's


def test_kl_loss_is_zero_when_draft_equals_target_distribution():
    logp = torch.log_softmax(torch.randn(5, 20), -1)
    top = logp.topk(20, dim=-1)
    loss = kl_loss(logp, top.indices, top.values, torch.arange(20))
    assert abs(float(loss)) < 1e-5
    # restricted head: the target is renormalised over the head's tokens
    head = torch.arange(10, 20)
    index = torch.full((20,), -1)
    index[head] = torch.arange(10)
    logq = torch.log_softmax(logp[:, head], -1)  # exactly p restricted and renormalised
    assert abs(float(kl_loss(logq, top.indices, top.values, index))) < 1e-5


def test_choose_head_tokens_keeps_specials_and_mass():
    tokenizer = tiny_tokenizer()
    mass = torch.zeros(len(tokenizer), dtype=torch.float64)
    mass[[100, 200, 300]] = torch.tensor([5.0, 3.0, 1.0], dtype=torch.float64)
    head = choose_head_tokens(mass, 8, tokenizer)
    assert len(head) == 8 and head == sorted(head)
    assert {100, 200, 300} <= set(head)
    assert set(tokenizer.all_special_ids) <= set(head)


def test_process_probs_and_pair_stats():
    logits = torch.randn(4, 50)
    for k, top_p in [(0, 1.0), (10, 1.0), (0, 0.9), (10, 0.9)]:
        probs = process_probs(logits, 1.0, k, top_p)
        assert torch.allclose(probs.sum(-1), torch.ones(4))
        if k:
            assert ((probs > 0).sum(-1) <= k).all()
    same = pair_stats(logits, logits)
    assert torch.allclose(same["accept_t1"], torch.ones(4)) and torch.allclose(same["accept_paper"], torch.ones(4))
    assert same["argmax_agree"].mean() == 1
    other = pair_stats(logits, torch.randn(4, 50))
    assert (other["accept_t1"] < 1).all() and (other["accept_t1"] > 0).all()


def test_distiller_resumes_and_accumulates(tiny, tmp_path):
    target, tokenizer = tiny
    cfg = DistillConfig(workdir=str(tmp_path), layers=[0], head_size=64, gen_batch=4, max_new_tokens=8,
                        heldout_seqs=2, batch_seqs=2, max_train_tokens=40, eval_every_tokens=20, store_top_k=8)
    Distiller(cfg, target, tokenizer).run()
    state = json.loads((tmp_path / "state.json").read_text())
    first_tokens, first_step = state["trained_tokens"], state["step"]
    assert first_tokens >= 40 and (tmp_path / "draft.safetensors").is_file()
    cfg.max_train_tokens = 100
    distiller = Distiller(cfg, target, tokenizer)
    draft = distiller.run()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] > first_step and state["trained_tokens"] >= 100
    assert draft.is_restricted and len(draft.head_token_ids) == 64
    curve = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert curve[0]["trained_tokens"] == 0 and curve[-1]["trained_tokens"] >= 100
    assert Corpus(tmp_path).n_chunks >= 2
    stats = evaluate_on_topk(draft, Corpus(tmp_path).records[:2], torch.device("cpu"))
    assert 0 <= stats["accept_paper"] <= 1 and stats["positions"] > 0

    # a fresh work dir continues from an exported draft file (what `make draft` does on a new clone)
    fresh = tmp_path / "fresh"
    cfg2 = DistillConfig(**{**cfg.__dict__, "workdir": str(fresh), "init_from": str(tmp_path / "draft.safetensors"),
                            "max_train_tokens": state["trained_tokens"] + 20})
    continued = Distiller(cfg2, target, tokenizer).run()
    state2 = json.loads((fresh / "state.json").read_text())
    assert state2["trained_tokens"] >= state["trained_tokens"] + 20 and state2["warm_start"]
    assert torch.equal(continued.head_token_ids, draft.head_token_ids)


def test_held_out_prompts_share_no_topic_with_training():
    from mtad.models.prompts import CODE_TASKS, TOPICS

    train = " ".join(make_prompts(400, seed=3))
    held = " ".join(make_prompts(400, seed=3, held_out=True))
    import re

    for topic in TOPICS + CODE_TASKS:
        pattern = re.compile(rf"\b{re.escape(topic)}\b")
        assert not (pattern.search(train) and pattern.search(held)), topic
