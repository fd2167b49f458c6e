"""The official implementation's settings offered as options: the chain MTAD's beam weighting and
its stopping rule; a setting added later leaves the cells recorded before it valid."""

import pytest
import torch
from omegaconf import OmegaConf

from mtad.decoding import get_decoder
from mtad.decoding.beam import chosen_weights
from mtad.models.tiny import tiny_llama
from mtad.runner.checks import SettingError, check_run_settings

PROMPT = torch.tensor([[1, 3, 2]])


def test_the_official_weighting_is_a_softmax_of_probabilities_and_nearly_uniform():
    scores = torch.tensor([0.30, 0.01], dtype=torch.float64)
    assert chosen_weights(scores, "proportional").tolist() == pytest.approx([0.30 / 0.31, 0.01 / 0.31])
    official = chosen_weights(scores, "official_softmax")
    assert official.tolist() == pytest.approx([1 / (1 + torch.e**-0.29), 1 / (1 + torch.e**0.29)])
    assert float(official.max() / official.min()) < 1.34  # against 30x in proportion


def test_mtad_runs_with_either_weighting_and_refuses_another():
    target, draft = tiny_llama(0, vocab=8), tiny_llama(1, vocab=8)
    outs = {}
    for weighting in ("proportional", "official_softmax"):
        dec = get_decoder("mmtad", target=target, draft=draft, beam_weighting=weighting)
        outs[weighting] = [
            dec.generate(PROMPT, 24, generator=torch.Generator().manual_seed(s)).tokens for s in range(6)
        ]
    assert outs["proportional"] != outs["official_softmax"]  # the weights choose other beams
    with pytest.raises(ValueError, match="beam_weighting must be one of .*official_softmax"):
        get_decoder("mtad", target=target, draft=draft, beam_weighting="uniform")


def test_the_block_rule_is_the_official_window_over_the_sequence():
    """The official loop stops after a block once an EOS is among the sequence's last γ tokens, and
    keeps the block: with q = p every block is γ + 1 tokens, so an EOS opening a block falls outside
    the window and the generation goes on (until a later window holds it, or the length runs out)."""
    model, gamma, eos_id, n = tiny_llama(0, vocab=8), 4, 5, 40  # q = p: every block of γ + 1 is accepted
    missed = 0
    for seed in range(16):
        runs = {
            rule: get_decoder("sps", target=model, draft=model, gamma=gamma)
            .generate(PROMPT, n, eos_token_id=eos_id, generator=torch.Generator().manual_seed(seed), stop_rule=rule)
            .tokens
            for rule in ("eos", "block")
        }
        eos, block = runs["eos"], runs["block"]
        assert block[: len(eos)] == eos  # the same draws up to the first EOS
        sequence = PROMPT[0].tolist() + block
        ends = [len(PROMPT[0]) + min(k, n) for k in range(gamma + 1, n + gamma + 1, gamma + 1)]  # after each block
        stops = [end for end in ends if end <= len(sequence) and eos_id in sequence[end - gamma : end]]
        assert len(sequence) == (stops[0] if stops else len(PROMPT[0]) + n)  # the first block whose window holds one
        missed += eos_id in eos and len(block) > len(eos) + gamma  # an EOS opened a block, and was missed
    assert missed  # the window's blind spot is exercised
    with pytest.raises(ValueError, match="stop_rule must be one of"):
        get_decoder("sampling", target=model).generate(PROMPT, 4, stop_rule="never")


def test_a_bad_stop_rule_is_refused_before_anything_loads():
    cfg = OmegaConf.create({"seed": 0, "threads": 1, "warmup_tokens": 0, "progress": False, "stop_rule": "late"})
    with pytest.raises(SettingError, match="stop_rule must be one of eos, block"):
        check_run_settings(cfg)
