"""Processed distributions kept on their support (`Dist`) are the dense rows they stand for: the
same probabilities, the same draws from the same uniforms, and so, for every method and
setting, the same tokens as decoding on dense vocabulary-wide rows."""

import pytest
import torch

import mtad.decoding.base as base
import mtad.decoding.mtad as mtad_module
from mtad.decoding import METHODS, get_decoder
from mtad.decoding.logits import Dist, Support, logits_to_dist, logits_to_probs, sample
from mtad.decoding.registry import specs
from mtad.models.check_cases import TOKEN_PROMPT, TOKEN_VOCAB
from mtad.models.tiny import tiny_head, tiny_llama

TOKEN_PARAMS = {m: dict(s.test_settings) for m, s in specs().items()}  # each method's small settings

PROMPT = torch.tensor([TOKEN_PROMPT])
VOCAB = TOKEN_VOCAB
SETTINGS = {  # where a Dist holds k entries, one, or the whole vocabulary
    "paper": {"temperature": 1.0, "top_k": 10, "top_p": 0.9},
    "top_k only": {"temperature": 0.7, "top_k": 5, "top_p": 1.0},
    "greedy": {"temperature": 0.0},
    "dense": {"temperature": 1.0, "top_k": 0, "top_p": 0.8},
}


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_a_dist_is_its_dense_row(setting):
    logits = torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(3)) * 3
    dist = logits_to_dist(logits, **SETTINGS[setting])
    assert bool((dist.ids[:, 1:] > dist.ids[:, :-1]).all()), "ids must ascend: a dense row's order"
    dense = logits_to_probs(logits, **SETTINGS[setting])
    assert torch.equal(dist.dense(), dense)
    tokens = torch.arange(VOCAB).expand(6, -1).T  # every token of every row
    assert torch.equal(dist.prob_of(tokens).T, dense)
    for seed in range(20):
        draw = sample(dist, torch.Generator().manual_seed(seed))
        assert torch.equal(draw, sample(dense, torch.Generator().manual_seed(seed)))


def dense_dists(logits, temperature=1.0, top_k=0, top_p=1.0, support=None):
    """The same processed distribution as a vocabulary-wide Dist: how decoding ran on dense rows
    (a restricted head's logits expanded to the vocabulary first)."""
    logits = support.expand(logits) if support is not None else logits
    return Dist.dense_of(logits_to_probs(logits, temperature, top_k, top_p))


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_processing_on_a_support_is_processing_the_expanded_row(setting):
    """Logits over a restricted head's tokens give the Dist their vocabulary-wide expansion
    (-inf elsewhere) gives, whether processed on the support or expanded first."""
    ids = torch.tensor([0, 3, 4, 7, 9, 10, 12, 13, 15, 17, 18, 20, 22, 23])  # ascending, 14 of the 24 tokens
    support = Support(ids, VOCAB)
    logits = torch.randn(6, ids.numel(), generator=torch.Generator().manual_seed(4)) * 3
    on_support = logits_to_dist(logits, **SETTINGS[setting], support=support)
    expanded = logits_to_dist(support.expand(logits), **SETTINGS[setting])
    assert torch.equal(on_support.dense(), expanded.dense())
    assert bool((on_support.ids[:, 1:] > on_support.ids[:, :-1]).all()), "ids must ascend"


@pytest.mark.parametrize("draft_kind", ["model", "head", "restricted head"])
@pytest.mark.parametrize("setting", SETTINGS, ids=str)
@pytest.mark.parametrize("method", METHODS)
def test_tokens_equal_decoding_on_dense_rows(method, setting, draft_kind, monkeypatch):
    target = tiny_llama(0, VOCAB, sharpness=2.0)
    heads = {"head": None, "restricted head": list(range(0, VOCAB, 3))}  # a third of the vocabulary
    draft = (
        tiny_head(target, 1, sharpness=2.0, head_token_ids=heads[draft_kind])
        if draft_kind in heads
        else tiny_llama(1, VOCAB, sharpness=2.0)
    )
    params = {**TOKEN_PARAMS[method], **SETTINGS[setting]}
    if method in ("specinfer", "mtad", "mmtad") and setting == "paper":
        params["replacement"] = False  # the draws without replacement (Gumbel top-k over the support)

    def run():
        decoder = get_decoder(method, target=target, draft=draft, decode_path="static", **params)
        return decoder.generate(PROMPT, max_new_tokens=24, generator=torch.Generator().manual_seed(5)).tokens

    on_support = run()
    monkeypatch.setattr(base, "logits_to_dist", dense_dists)
    monkeypatch.setattr(mtad_module, "logits_to_dist", dense_dists)
    assert run() == on_support


@pytest.mark.parametrize("vocab", [49152, 50272, 32000, 24])
def test_two_stage_top_k_is_top_k(vocab):
    g = torch.Generator().manual_seed(vocab)
    from mtad.decoding.logits import top_k_of

    distinct = torch.randn(5, vocab, generator=g) * 3  # float32 draws: no ties
    assert all(torch.equal(a, b) for a, b in zip(top_k_of(distinct, 10), torch.topk(distinct, 10)))
    tied = distinct.bfloat16().float()  # bf16 logits: ties at the k-th place are common
    values, ids = top_k_of(tied, 10)
    assert torch.equal(values, torch.topk(tied, 10).values)  # the same values; either tied id may be kept
    assert torch.equal(tied.gather(-1, ids), values)
