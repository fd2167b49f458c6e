"""transformers' generate() and assisted generation behind the decoders' contract: the bench's
reference rows run as cells like every method."""

import pytest
import torch

from mtad.decoding import get_decoder
from mtad.models.tiny import tiny_head, tiny_llama


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(0, vocab=16, sharpness=3.0), tiny_llama(1, vocab=16, sharpness=3.0)


def greedy(method: str, target, draft=None, **settings) -> list[int]:
    dec = get_decoder(method, target=target, draft=draft, temperature=0.0, **settings)
    return dec.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=12, generator=torch.Generator().manual_seed(0)).tokens


def test_greedy_generate_and_assisted_generation_emit_our_greedy_tokens(pair):
    """At temperature 0 every implementation emits the argmax chain: a check that the references run
    the same target on the same prompt and are read back the same way."""
    target, draft = pair
    ours = greedy("sampling", target)
    assert greedy("hf_generate", target) == ours
    assert greedy("hf_assisted", target, draft, gamma=3) == ours


def test_a_reference_record_counts_what_generate_lets_us_see(pair):
    target, draft = pair
    prompt = torch.tensor([[1, 2, 3, 4]])
    runs = [
        get_decoder("hf_generate", target=target).generate(prompt, 9, generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    ]
    assert runs[0].tokens == runs[1].tokens  # seeded from the generator it is given
    stats = runs[0].stats
    assert (stats.new_tokens, stats.prompt_tokens, stats.target_calls) == (9, 4, 9)
    assert stats.seconds > 0 and stats.decode_path == "transformers"
    assert runs[0].settings == {
        "method": "hf_generate",
        "temperature": 1.0,
        "top_k": 10,
        "top_p": 0.9,
        "static_compile": False,
        "decode_path": "transformers",
        "stop_rule": "eos",
    }
    assisted = get_decoder("hf_assisted", target=target, draft=draft, gamma=2).generate(prompt, 9)
    assert assisted.stats.new_tokens == 9 and assisted.stats.target_calls == 0  # not seen: none counted


def test_a_reference_stops_at_eos_and_refuses_the_block_rule(pair):
    target, _ = pair
    dec = get_decoder("hf_generate", target=target, temperature=0.0)
    prompt = torch.tensor([[1, 2, 3]])
    first = dec.generate(prompt, 12).tokens[0]
    assert dec.generate(prompt, 12, eos_token_id=first).tokens == [first]
    with pytest.raises(ValueError, match="stop_rule 'eos'"):
        dec.generate(prompt, 12, stop_rule="block")


def test_assisted_generation_refuses_a_feature_head(pair):
    target, _ = pair
    with pytest.raises(ValueError, match="feature head"):
        get_decoder("hf_assisted", target=target, draft=tiny_head(target, 1))
