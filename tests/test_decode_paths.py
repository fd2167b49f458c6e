"""The fast decode paths (static KV cache, lean forward, torch.compile) against the eager one:
same seed -> same tokens in float64, caches that grow and roll back, compiles that stay flat."""

import pytest
import torch

from mtad.decoding import METHODS, get_decoder
from mtad.decoding.capabilities import has_lean_forward
from mtad.decoding.kv import CachedModel
from mtad.decoding.registry import specs
from mtad.decoding.static_kv import (
    BUCKETS,
    CAPACITY_STEP,
    StaticCachedModel,
    bucket,
    cached_model,
    fast_unsupported,
    resolve_decode_path,
)
from mtad.models.check_cases import TOKEN_PROMPT, TOKEN_VOCAB
from mtad.models.draft import build_draft_from_target
from mtad.models.tiny import biased_llama, tiny_llama, tiny_opt

PROMPT = torch.tensor([TOKEN_PROMPT])
VOCAB = TOKEN_VOCAB
# each method at its small settings (MethodSpec.test_settings): the GPU check runs the same cases
METHOD_PARAMS = {m: dict(s.test_settings) for m, s in specs().items()}


@pytest.fixture(scope="module")
def llama_pair():
    return tiny_llama(0, VOCAB, sharpness=2.0), tiny_llama(1, VOCAB, sharpness=2.0)


def tokens(method, target, draft, path, seed, n=40, **params):
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **{**METHOD_PARAMS[method], **params})
    return decoder.generate(PROMPT, max_new_tokens=n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("method", METHODS)
def test_static_path_gives_the_eager_tokens(llama_pair, method):
    target, draft = llama_pair
    for seed in range(3):
        eager = tokens(method, target, draft, "eager", seed)
        static = tokens(method, target, draft, "static", seed)
        assert static.stats.decode_path == "static" and eager.stats.decode_path == "eager"
        assert static.tokens == eager.tokens, f"{method} seed {seed}"
    greedy = [tokens(method, target, draft, path, 0, temperature=0).tokens for path in ("eager", "static")]
    assert greedy[0] == greedy[1]


def test_restricted_head_draft_on_the_static_path():
    """The mtad draft (layer subset, head over a token subset): q is exactly 0 off the subset on
    both paths, and the tokens agree."""
    target = tiny_llama(0, VOCAB, sharpness=2.0, layers=3)
    draft = build_draft_from_target(target, [0, 2], head_token_ids=list(range(0, VOCAB, 2)))
    assert fast_unsupported(draft) is None
    lm = StaticCachedModel(draft)
    logits = lm.extend(PROMPT[0])
    with torch.no_grad():
        ref = draft(input_ids=PROMPT).logits[0]
    assert torch.equal(torch.isinf(logits), torch.isinf(ref)) and torch.isinf(logits[:, 1::2]).all()
    assert torch.allclose(logits[:, ::2], ref[:, ::2], atol=1e-10)
    for method in ("sps", "mmtad"):
        assert tokens(method, target, draft, "static", 1).tokens == tokens(method, target, draft, "eager", 1).tokens


def test_static_cache_grows_and_rolls_back_by_its_pointer():
    model = tiny_llama(0, VOCAB)
    lm = StaticCachedModel(model)
    assert lm.cache.capacity == CAPACITY_STEP
    long = torch.randint(0, VOCAB, (CAPACITY_STEP + 40,))
    out = lm.extend(long, keep_last=2)  # past the first buffer: it is reallocated, contents kept
    assert out.shape == (2, VOCAB) and lm.cache.capacity == 2 * CAPACITY_STEP and lm.seq_length() == long.numel()
    with torch.no_grad():
        ref = model(input_ids=long[None]).logits[0, -2:]
    assert torch.allclose(out, ref, atol=1e-9)
    keys = lm.cache.keys.data_ptr()
    lm.crop(10)  # a rollback moves the pointer only
    assert lm.seq_length() == 10 and lm.cache.keys.data_ptr() == keys
    with torch.no_grad():
        again = model(input_ids=torch.cat([long[:10], torch.tensor([3])])[None]).logits[0, -1]
    assert torch.allclose(lm.extend(torch.tensor([3]))[-1], again, atol=1e-10)


def test_decode_path_choice_and_errors(llama_pair):
    target, draft = llama_pair
    assert resolve_decode_path("fast", target) == "static"  # on a CPU
    assert resolve_decode_path(None, target) == "static"
    assert resolve_decode_path("compiled", target) == "compiled"
    # models without the stock Llama forward run eager whatever is asked
    assert fast_unsupported(tiny_opt(0, VOCAB)) and resolve_decode_path("static", tiny_opt(0, VOCAB)) == "eager"
    biased = biased_llama(0, torch.zeros(VOCAB))
    assert "BiasedLlama" in fast_unsupported(biased) and isinstance(cached_model(biased, None, "fast"), CachedModel)
    with pytest.raises(ValueError, match="decode_path.*eager, static, compiled, fast"):
        get_decoder("sampling", target=target, decode_path="turbo")
    with pytest.raises(ValueError, match="use decode_path=eager"):
        StaticCachedModel(tiny_opt(0, VOCAB))
    assert [bucket(n) for n in (1, 2, 3, 5, 9, 64)] == [1, 2, 4, 8, 16, 64] and bucket(BUCKETS[-1] + 1) is None


def test_lean_forward_is_declared_not_inherited():
    """A class vouches for its own forward: a subclass of the draft with another forward runs eager."""
    draft = build_draft_from_target(tiny_llama(0, VOCAB), [0])

    class LoudDraft(type(draft)):
        def forward(self, *args, **kwargs):
            print("forward")
            return super().forward(*args, **kwargs)

    loud = LoudDraft(draft.config)
    assert has_lean_forward(draft) and not has_lean_forward(loud)
    assert "LoudDraft" in fast_unsupported(loud) and resolve_decode_path("static", loud) == "eager"


@pytest.mark.slow  # torch.compile takes tens of seconds per shape on a small CPU
def test_compiled_path_same_tokens_and_no_recompiles_in_steady_state(llama_pair):
    """torch.compile compiles once per bucket (and cache size): once a long generation has met them,
    the next long generation reuses them all."""
    target, draft = llama_pair
    first = tokens("sps", target, draft, "compiled", 0, n=150)
    assert first.stats.decode_path == "compiled" and first.stats.compiles >= 1
    assert first.tokens == tokens("sps", target, draft, "eager", 0, n=150).tokens
    long = tokens("sps", target, draft, "compiled", 1, n=150)
    assert long.stats.compiles == 0, "steady-state decoding recompiled"
    assert long.tokens == tokens("sps", target, draft, "eager", 1, n=150).tokens


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_compiled_path_gives_the_eager_tokens(llama_pair, method):
    target, draft = llama_pair
    for seed in range(2):
        assert (
            tokens(method, target, draft, "compiled", seed).tokens
            == tokens(method, target, draft, "eager", seed).tokens
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_layer_steps_compute_what_the_modules_compute(dtype):
    """Decoding's fused steps (q|k|v and gate|up as one product each, rotary on q and k together,
    RMSNorm in one call) against the modules; the modules' weights become views into the
    fused products (one copy), and autograd runs the modules."""
    from mtad.decoding import layer_math as lm

    model = tiny_llama(0, VOCAB, layers=1).to(dtype)
    layer, D = model.model.layers[0], model.model.layers[0].self_attn.head_dim
    x = torch.randn(1, 4, model.config.hidden_size, dtype=dtype, generator=torch.Generator().manual_seed(0))
    cos, sin = model.model.rotary_emb(x, torch.arange(4)[None])
    with torch.enable_grad():  # the modules: the reference
        assert lm.fused_weights(layer) is None
        q0, k0, v0 = lm.attention_inputs(layer, x, cos, sin)
        out0 = lm.finish_layer(layer, x, q0.transpose(1, 2).reshape(1, 4, -1))
    with torch.no_grad():
        fused = lm.fused_weights(layer)
        assert (
            fused is not None and layer.self_attn.k_proj.weight.data_ptr() == fused.qkv[fused.heads[0] * D :].data_ptr()
        )
        q, k, v = lm.attention_inputs(layer, x, cos, sin)
        out = lm.finish_layer(layer, x, q.transpose(1, 2).reshape(1, 4, -1))
        tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-13, "atol": 1e-13}
        for got, want in ((q, q0), (k, k0), (v, v0), (out, out0)):
            assert got.shape == want.shape and torch.allclose(got, want, **tol)
        assert torch.equal(lm.rms_norm(layer.input_layernorm, x.float()), layer.input_layernorm(x.float()))
        from transformers.models.llama.modeling_llama import rotate_half

        assert torch.equal(lm.rotary(q0, lm.Rotary.of(cos, sin)), q0 * cos[:, None] + rotate_half(q0) * sin[:, None])


def test_a_finished_generations_kv_buffers_serve_the_next_one_zeroed(llama_pair):
    """The next generation's caches take the last one's buffers (a fresh allocation pays its page
    faults again) and zero them: poisoned with NaN after release, they still give the same tokens."""
    target, draft = llama_pair
    decoder = get_decoder("sps", target=target, draft=draft, decode_path="static", gamma=3)
    first = decoder.generate(PROMPT, max_new_tokens=12, generator=torch.Generator().manual_seed(3))
    used = {id(b) for lm in (decoder.target_lm, decoder.draft_lm) for b in (lm.cache.keys, lm.cache.values)}
    buffers = [b for lm in (decoder.target_lm, decoder.draft_lm) for b in (lm.cache.keys, lm.cache.values)]
    decoder.target_lm = decoder.draft_lm = None  # released to the pool
    for b in buffers:
        b.fill_(float("nan"))
    del buffers
    again = decoder.generate(PROMPT, max_new_tokens=12, generator=torch.Generator().manual_seed(3))
    reused = {id(b) for lm in (decoder.target_lm, decoder.draft_lm) for b in (lm.cache.keys, lm.cache.values)}
    assert reused == used and again.tokens == first.tokens
    for lm in (decoder.target_lm, decoder.draft_lm):  # the compiled path attends over every slot, masked or not
        assert not any(b.isnan().any() for b in (lm.cache.keys, lm.cache.values))


def test_the_kv_pool_keeps_at_most_its_bytes_dropping_the_oldest(monkeypatch):
    from mtad.decoding import static_kv

    monkeypatch.setattr(static_kv, "_pool", {})
    monkeypatch.setattr(static_kv, "POOL_BYTES", 3 * 4 * 100)  # three 100-float buffers
    buffers = [torch.full((100,), float(i)) for i in range(5)]
    static_kv.release(buffers)
    kept = static_kv._pool[((100,), torch.float32, "cpu")]
    assert [int(b[0]) for b in kept] == [2, 3, 4]
    again = static_kv.kv_buffer((100,), torch.float32, torch.device("cpu"))
    assert again is buffers[4] and not again.any()  # the newest, zeroed
