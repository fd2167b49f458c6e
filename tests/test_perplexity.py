"""Perplexity: one teacher-forced forward equals token-by-token NLL computed by hand."""

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mtad.metrics.perplexity import mean_logprob, perplexity, sample_logprob, sample_logprobs


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
    )
    return LlamaForCausalLM(config).double().eval()


def nll_by_hand(model, prompt, output):
    """Each output token's -log p from its own forward over the prefix before it."""
    total = 0.0
    for t, token in enumerate(output):
        prefix = torch.tensor([prompt + output[:t]])
        with torch.no_grad():
            logits = model(input_ids=prefix).logits[0, -1]  # [V]
        probs = torch.exp(logits - logits.max())
        total -= math.log(float(probs[token] / probs.sum()))
    return total


SAMPLES = [([1, 5, 7], [3, 3, 9, 30]), ([2], [11]), ([4, 4, 4, 4, 4], [0, 31, 16, 8, 2, 5])]


def test_sample_logprob_matches_hand_computation(model):
    for prompt, output in SAMPLES:
        total, n = sample_logprob(model, prompt, output)
        assert n == len(output)
        assert -total == pytest.approx(nll_by_hand(model, prompt, output), rel=1e-9)


def test_perplexity_is_exp_of_mean_nll(model):
    means = [mean_logprob(*sample_logprob(model, p, o)) for p, o in SAMPLES]
    by_hand = [nll_by_hand(model, p, o) / len(o) for p, o in SAMPLES]
    assert perplexity(means) == pytest.approx(math.exp(sum(by_hand) / len(by_hand)), rel=1e-9)
    assert perplexity([mean_logprob(0.0, 0), means[0]]) == pytest.approx(math.exp(by_hand[0]))  # empty skipped
    assert perplexity([]) is None


def test_batched_equals_one_by_one(model):
    prompts, outputs = zip(*SAMPLES)
    batched = sample_logprobs(model, list(prompts), list(outputs), batch_size=2)
    for (p, o), (total, n) in zip(SAMPLES, batched):
        single_total, single_n = sample_logprob(model, p, o)
        assert n == single_n and total == pytest.approx(single_total, rel=1e-9, abs=1e-12)


def test_uniform_model_has_vocabulary_perplexity(model):
    import copy

    flat = copy.deepcopy(model)
    with torch.no_grad():
        flat.lm_head.weight.zero_()  # all logits 0: p = 1/32 everywhere
    means = [mean_logprob(*sample_logprob(flat, p, o)) for p, o in SAMPLES]
    assert perplexity(means) == pytest.approx(32.0)


def test_edge_cases(model):
    assert sample_logprob(model, [1, 2], []) == (0.0, 0)
    with pytest.raises(ValueError):
        sample_logprob(model, [], [1, 2])
