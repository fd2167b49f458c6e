"""The decoding contract on tiny Llama and OPT models: greedy equality, caches, seeds, EOS,
MTAD with draft = target, MTAD against exact MTJD, and clear errors."""

import re

import pytest
import torch

from mtad.decoding import DECODERS, METHODS, get_decoder
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.mtjd_exact import exact_block_distribution
from mtad.decoding.registry import specs
from mtad.decoding.static_kv import StaticKV
from mtad.models.check_cases import TOKEN_PROMPT, TOKEN_VOCAB
from mtad.models.tiny import BUILDERS, tiny_head, tiny_llama

PROMPT = torch.tensor([TOKEN_PROMPT])
VOCAB = TOKEN_VOCAB
# each method at its small settings (MethodSpec.test_settings): the GPU check runs the same cases
METHOD_PARAMS = {m: dict(s.test_settings) for m, s in specs().items()}


# every contract test runs on both decode paths; Llama takes the static cache on "static",
# OPT has no lean forward and runs eager on both (static_kv.fast_unsupported); and with both
# draft kinds: a separate model, or a feature head reading the target's hidden states
PAIRS = [
    ("llama", "eager", "model"),
    ("llama", "static", "model"),
    ("opt", "eager", "model"),
    ("llama", "eager", "head"),
    ("llama", "static", "head"),
    ("opt", "eager", "head"),
]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: "-".join(p))
def pair(request):
    arch, path, kind = request.param
    build = BUILDERS[arch]
    target = build(0, VOCAB, sharpness=2.0)
    draft = tiny_head(target, 1, sharpness=2.0) if kind == "head" else build(1, VOCAB, sharpness=2.0)
    return target, draft, path


def generate(method, pair, n=16, seed=0, eos=None, **params):
    target, draft, path = pair if len(pair) == 3 else (*pair, "fast")
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **{**METHOD_PARAMS[method], **params})
    return decoder, decoder.generate(
        PROMPT, max_new_tokens=n, eos_token_id=eos, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("method", ["sps", "spectr", "specinfer"])
def test_greedy_equals_greedy_sampling(pair, method):
    _, ref = generate("sampling", pair, n=20, temperature=0)
    _, out = generate(method, pair, n=20, temperature=0)
    assert out.tokens == ref.tokens
    _, no_repl = generate(
        method, pair, n=20, temperature=0, **({"replacement": False} if method == "specinfer" else {})
    )
    assert no_repl.tokens == ref.tokens


@pytest.mark.parametrize(
    "method,params",
    [("sps", {}), ("spectr", {}), ("specinfer", {"replacement": True}), ("specinfer", {"replacement": False})],
    ids=str,
)
@pytest.mark.parametrize("arch", list(BUILDERS))
def test_greedy_equals_greedy_sampling_when_drafts_are_accepted(arch, method, params):
    """A draft close to the target (its head perturbed): greedy blocks are accepted in part and
    in whole, so accepted tokens and bonus tokens both reach the output, which must still be
    greedy sampling's token for token."""
    target = BUILDERS[arch](0, VOCAB, sharpness=2.0)
    draft = BUILDERS[arch](0, VOCAB, sharpness=2.0)
    with torch.no_grad():
        head = draft.get_output_embeddings().weight
        head.add_(
            0.3 * head.std() * torch.randn(head.shape, generator=torch.Generator().manual_seed(1), dtype=head.dtype)
        )
    pair = (target, draft)
    _, ref = generate("sampling", pair, n=30, temperature=0)
    _, out = generate(method, pair, n=30, temperature=0, **params)
    assert out.tokens == ref.tokens
    s = out.stats
    assert s.accepted > 0 and max(s.accept_lengths) == s.drafted // s.target_calls, s.accept_lengths
    assert min(s.accept_lengths) < max(s.accept_lengths), "no rejection: the test would not see the residual"


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_with_consistent_stats(pair, method):
    _, out = generate(method, pair, n=17)
    s = out.stats
    assert len(out.tokens) == s.new_tokens == 17 and all(0 <= t < VOCAB for t in out.tokens)
    assert s.target_calls >= 1 and s.seconds > 0
    assert s.block_efficiency == pytest.approx(s.new_tokens / s.target_calls)
    if method == "sampling":
        assert s.target_calls == 17 and s.drafted == s.draft_calls == 0
    else:
        assert s.accepted == sum(s.accept_lengths) <= s.drafted and len(s.accept_lengths) == s.target_calls
        assert s.new_tokens <= s.accepted + s.target_calls  # one target token per iteration at most
    assert (s.tree_nodes > 0) == (method in ("spectr", "specinfer", "mmtad"))


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_tokens(pair, method):
    a = generate(method, pair, seed=3)[1].tokens
    assert a == generate(method, pair, seed=3)[1].tokens
    assert any(generate(method, pair, seed=s)[1].tokens != a for s in (4, 5, 6))


@pytest.mark.parametrize("method", METHODS)
def test_kept_cache_equals_a_fresh_forward(pair, method):
    decoder, out = generate(method, pair, n=15)
    sequence = torch.cat([PROMPT[0], torch.tensor(out.tokens)])
    for lm in filter(None, (decoder.target_lm, decoder.draft_lm)):
        assert lm.num_nodes == 0 and lm.seq_length() == lm.committed  # no tree leftovers
        assert lm.committed <= sequence.numel() + METHOD_PARAMS[method].get("gamma", 3)  # cropped, flat
        kept = min(lm.committed, sequence.numel() - 1)
        if reads_target_features(lm.model):  # every kept slot was computed from the target's features
            assert lm.exact == lm.committed
            with torch.no_grad():
                features = decoder.target.model(input_ids=sequence[None]).last_hidden_state
                fresh = lm.model.unroll(sequence[None], features)[0][0, :kept]  # [kept, H]
            assert torch.allclose(lm.features.buf[:kept], fresh, atol=1e-9)
            scored = min(decoder.target_lm.committed, sequence.numel())
            assert torch.allclose(decoder.target_lm.features.buf[:scored], features[0, :scored], atol=1e-9)
            continue
        with torch.no_grad():
            fresh = lm.model(input_ids=sequence[None, :kept], use_cache=True).past_key_values
        if isinstance(lm.cache, StaticKV):  # buffers [layers, 1, kv_heads, capacity, head_dim]
            mine = list(zip(lm.cache.keys, lm.cache.values))
        else:  # a DynamicCache
            mine = [(layer.keys, layer.values) for layer in lm.cache.layers]
        assert len(mine) == len(fresh.layers)
        for (keys, values), ref in zip(mine, fresh.layers):
            assert torch.allclose(keys[..., :kept, :], ref.keys, atol=1e-9)
            assert torch.allclose(values[..., :kept, :], ref.values, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_prompt_encoded_once_and_memory_flat(pair, method):
    """Over a long generation every model sees the prompt once and then only new positions;
    its cache never holds more than the sequence plus one draft block."""
    decoder, out = generate(method, pair, n=120)
    s, prompt, gamma = out.stats, PROMPT.shape[1], METHOD_PARAMS[method].get("gamma", 0)
    # the target sees the prompt once (prefill + pending token), then per iteration the pending
    # token plus the drafted chain (γ) or tree (tree_nodes)
    block = s.tree_nodes if method in ("spectr", "specinfer", "mmtad") else s.target_calls * gamma
    fed = prompt - 1 + s.target_calls + block
    assert decoder.target_lm.tokens_fed == fed
    assert decoder.target_lm.seq_length() <= prompt + s.new_tokens + 3
    if decoder.draft_lm is not None:
        assert decoder.draft_lm.seq_length() <= prompt + s.new_tokens + 3
        assert decoder.draft_lm.tokens_fed <= prompt + s.new_tokens + s.draft_calls * 9


@pytest.mark.parametrize(
    "method, params",
    [("mtad", {}), ("mtad", {"replacement": False}), ("mmtad", {}), ("mmtad", {"denominator": "node"})],
)
@pytest.mark.parametrize("arch", list(BUILDERS))
def test_draft_equal_target_accepts_every_block(method, params, arch):
    model = BUILDERS[arch](0, VOCAB, sharpness=2.0)
    gamma = 4
    decoder = get_decoder(method, target=model, draft=model, gamma=gamma, beam_width=3, threshold=0.9, **params)
    out = decoder.generate(PROMPT, max_new_tokens=4 * (gamma + 1), generator=torch.Generator().manual_seed(0))
    assert out.stats.accept_lengths == [gamma] * 4
    assert out.stats.block_efficiency == gamma + 1


@pytest.mark.parametrize("method", METHODS[1:])
def test_eos_inside_an_accepted_block_ends_the_output(method):
    model = tiny_llama(0, VOCAB, sharpness=2.0)
    pair = (model, model)  # draft = target: long accepted blocks
    _, free = generate(method, pair, n=16, seed=1)
    cut = next(i for i in range(2, 16) if free.tokens[i] not in free.tokens[:i])
    eos = free.tokens[cut]
    _, out = generate(method, pair, n=16, seed=1, eos=eos)
    assert out.tokens == free.tokens[: cut + 1] and out.stats.new_tokens == cut + 1
    assert out.stats.accepted <= cut + 1


def test_mtad_beam_search_finds_the_exact_best_block():
    """Draft = target, temperature 0, beams wide enough to be exhaustive: MTAD's block is the
    joint argmax that exact MTJD (top-1 over all |V|^γ blocks) picks."""
    vocab, gamma = 6, 3
    model = tiny_llama(2, vocab, sharpness=3.0)
    blocks, probs = exact_block_distribution(model, PROMPT[0] % vocab, gamma, temperature=0)
    best = blocks[int(probs.argmax())].tolist()
    decoder = get_decoder(
        "mtad", target=model, draft=model, gamma=gamma, beam_width=vocab ** (gamma - 1), temperature=0, threshold=0.5
    )
    assert decoder.generate(PROMPT % vocab, max_new_tokens=gamma).tokens == best
    exact = get_decoder("mtjd_exact", target=model, gamma=gamma, temperature=0)
    assert exact.generate(PROMPT % vocab, max_new_tokens=gamma).tokens == best


def test_mtad_lowers_block_nll_against_sampling():
    """The point of MTJD: blocks with higher joint target likelihood than ancestral sampling."""
    vocab, gamma, runs = 6, 3, 150
    model, draft = tiny_llama(2, vocab, sharpness=3.0), tiny_llama(3, vocab, sharpness=3.0)
    blocks, logp = exact_block_distribution(model, PROMPT[0] % vocab, gamma)
    joint = {tuple(b): float(p.log()) for b, p in zip(blocks.tolist(), logp)}

    def mean_logp(method, **params):
        dec = get_decoder(method, target=model, draft=draft, **params)
        outs = [
            dec.generate(PROMPT % vocab, gamma, generator=torch.Generator().manual_seed(s)).tokens for s in range(runs)
        ]
        return sum(joint[tuple(o)] for o in outs) / runs

    assert mean_logp("mtad", gamma=gamma, beam_width=4, threshold=0.1) > mean_logp("sampling")


def test_registry_and_errors(pair):
    target, draft, _ = pair
    assert list(DECODERS)[: len(METHODS)] == list(METHODS)
    with pytest.raises(KeyError, match="valid: sampling, sps, blockverify, spectr, specinfer, mtad, mmtad"):
        get_decoder("beam", target=target)
    with pytest.raises(ValueError, match="needs a draft"):
        get_decoder("sps", target=target)
    with pytest.raises(TypeError, match="unknown parameter.*valid"):
        get_decoder("sps", target=target, draft=draft, beam_width=2)
    other_vocab = tiny_llama(1, VOCAB + 1)
    with pytest.raises(ValueError, match="vocabularies differ"):
        get_decoder("sps", target=target, draft=other_vocab)
    for bad in (
        {"gamma": 0},
        {"beam_width": 0},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"temperature": -1},
        {"top_p": 0.0},
        {"top_k": -1},
    ):
        name = "mtad" if "beam_width" in bad or "threshold" in bad else "sps"
        with pytest.raises(ValueError, match=next(iter(bad))):
            get_decoder(name, target=target, draft=draft, **bad)
    with pytest.raises(ValueError, match="k_config"):
        get_decoder("specinfer", target=target, draft=draft, k_config=(2, 0))
    dec = get_decoder("sampling", target=target)
    with pytest.raises(ValueError, match="empty"):
        dec.generate(torch.zeros(1, 0, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.generate(PROMPT, 0)
    assert get_decoder("sampling", target=target, draft=None).generate(PROMPT[:, :1], 3).stats.new_tokens == 3


@pytest.mark.parametrize(
    "ids, message",
    [
        (torch.tensor([[5.0, 1.0, 9.0]]), "LongTensor of token ids, got dtype torch.float32"),
        (torch.tensor([[5, VOCAB, 9]]), f"token id {VOCAB}, outside the target's vocabulary [0, {VOCAB})"),
        (torch.tensor([[5, -1, 9]]), "token id -1, outside the target's vocabulary"),
    ],
)
def test_ids_that_are_not_token_ids_of_the_target_are_refused(ids, message):
    target = tiny_llama(0, vocab=VOCAB)
    with pytest.raises(ValueError, match=re.escape(message)):
        get_decoder("sampling", target=target).generate(ids, max_new_tokens=2, generator=torch.Generator())


def test_a_prompt_beyond_the_context_warns():
    target = tiny_llama(0, vocab=VOCAB)
    context = target.config.max_position_embeddings
    with pytest.warns(UserWarning, match=f"exceed the target's context of {context} positions") as caught:
        get_decoder("sampling", target=target).generate(
            torch.randint(0, VOCAB, (1, context - 1)), max_new_tokens=2, generator=torch.Generator().manual_seed(0)
        )
    assert caught[0].filename == __file__  # the warning names the caller's line, not the engine's
