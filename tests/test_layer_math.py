"""The lean forward's layer maths computes transformers' values bit for bit, in fewer operators.

RMSNorm and rotary are held against transformers' module and function on random data (several
dtypes, shapes, positions); a fused layer's steps against the same steps run through the modules;
the one-token forward against what it must not run (host reads, copies, module calls)."""

import collections

import pytest
import torch
import torch.nn.functional as F
from processing_reference import processed_float_logits
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from mtad.decoding import layer_math as lm
from mtad.decoding.head_kv import HeadCachedModel
from mtad.decoding.logits import Dist, logits_to_dist, top_k_of
from mtad.decoding.static_kv import StaticCachedModel, cached_model, run_layers, write_slots
from mtad.models.tiny import tiny_head, tiny_llama, tiny_model

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
NORM_SHAPES = [(1, 1, 576), (1, 7, 576), (3, 5, 64), (2, 1, 960), (1, 33, 2048)]


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal dtype and values, the sign of zeros included."""
    return got.dtype == want.dtype and torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())


@pytest.mark.parametrize("weight_dtype", ["same", "float32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_is_the_module_bit_for_bit(dtype, weight_dtype):
    """Every input dtype (the module normalises in float32 and rounds back before the weight), a
    float32 weight beside half inputs included, at small, unit and large scales."""
    g = torch.Generator().manual_seed(0)
    for shape in NORM_SHAPES:
        for scale in (1e-3, 1.0, 30.0):
            norm = LlamaRMSNorm(shape[-1], eps=1e-5).to(dtype if weight_dtype == "same" else torch.float32)
            with torch.no_grad():
                norm.weight.copy_(torch.randn(shape[-1], generator=g) * 2)
                x = (torch.randn(*shape, generator=g) * scale).to(dtype)
                assert same(lm.rms_norm(norm, x), norm(x)), (shape, scale)


def test_rms_norm_in_float32_is_the_expression_it_replaced():
    g = torch.Generator().manual_seed(1)
    norm = LlamaRMSNorm(576, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576, generator=g))
        for n in (1, 3, 40):
            x = torch.randn(1, n, 576, generator=g) * 4
            old = norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
            assert same(lm.rms_norm(norm, x), old)


def test_rms_norm_runs_other_modules_and_autograd_through_the_module():
    x = torch.randn(1, 2, 8, dtype=torch.float32, requires_grad=True)
    with torch.no_grad():
        assert lm.rms_norm(torch.nn.Identity(), x) is x  # a head without a norm
    norm = LlamaRMSNorm(8)
    out = lm.rms_norm(norm, x)
    out.sum().backward()
    assert x.grad is not None and torch.equal(out, norm(x))


ROTARY_CASES = [(64, 12, 1, 0), (64, 12, 1, 700), (64, 15, 5, 37), (8, 6, 4, 0), (128, 4, 17, 3000)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_is_transformers_bit_for_bit(dtype):
    """On strided views of a fused q|k|v product (what decoding rotates), position 0 (sin = 0:
    the signs of zeros) and far positions."""
    g = torch.Generator().manual_seed(2)
    for D, heads, n, start in ROTARY_CASES:
        config = LlamaConfig(hidden_size=4 * D, num_attention_heads=4, head_dim=D, rope_theta=1e5)
        qkv = torch.randn(1, n, heads + 3, D, generator=g).to(dtype).transpose(1, 2)  # [1, heads + 3, n, D]
        x = qkv[:, :heads]
        cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(start, start + n)[None])
        q, k = apply_rotary_pos_emb(x[:, :-2], x[:, -2:], cos, sin)
        assert same(lm.rotary(x, lm.Rotary.of(cos, sin)), torch.cat([q, k], dim=1)), (D, heads, n, start)


def module_attention_inputs(layer, x, cos, sin):
    """q, k, v from the fused q|k|v product, with the modules' RMSNorm and transformers' rotary."""
    attn, (hq, hkv) = layer.self_attn, layer.mtad_fused.heads
    B, n = x.shape[:2]
    qkv = F.linear(layer.input_layernorm(x), layer.mtad_fused.qkv).view(B, n, -1, attn.head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(qkv[:, :hq], qkv[:, hq : hq + hkv], cos, sin)
    return q, k, qkv[:, hq + hkv :]


def module_finish_layer(layer, x, o):
    """The rest of the layer through the modules, the gate|up product fused."""
    x = x + layer.self_attn.o_proj(o)
    gate, up = F.linear(layer.post_attention_layernorm(x), layer.mtad_fused.gate_up).chunk(2, dim=-1)
    return x + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_fused_layer_steps_are_the_modules_steps_bit_for_bit(dtype):
    model = tiny_model("llama", 64, 0, hidden_size=64, num_layers=1).to(dtype)
    layer = model.model.layers[0]
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        assert lm.fused_weights(layer) is not None
        for n, start in ((1, 9), (5, 0)):
            x = torch.randn(1, n, 64, generator=g).to(dtype)
            cos, sin = model.model.rotary_emb(x, torch.arange(start, start + n)[None])
            for got, want in zip(lm.attention_inputs(layer, x, cos, sin), module_attention_inputs(layer, x, cos, sin)):
                assert same(got, want)
            o = torch.randn(1, n, 64, generator=g).to(dtype)
            assert same(lm.finish_layer(layer, x, o), module_finish_layer(layer, x, o))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_slots_written_as_a_range_are_the_indexed_write(dtype):
    """A range of slots (uncompiled forwards) by one casting copy; a slot tensor (compiled) by index."""
    new = torch.randn(1, 3, 4, 8).to(dtype)
    by_range, by_index = torch.zeros(1, 3, 16, 8), torch.zeros(1, 3, 16, 8)
    write_slots(by_range, 6, new)
    write_slots(by_index, torch.arange(6, 10), new)
    assert torch.equal(by_range, by_index) and torch.equal(by_range[:, :, 6:10], new.float())


def test_run_layers_needs_the_attended_length_without_a_mask():
    model = tiny_llama(0, 12)
    keys = torch.zeros(2, 1, 2, 8, model.config.head_dim, dtype=torch.float64)
    x = model.model.embed_tokens(torch.tensor([[3]]))
    with torch.no_grad(), pytest.raises(ValueError, match="kv_len"):
        run_layers(model.model, x, keys, keys.clone(), torch.tensor([[0]]), 0, None)


class Ops(TorchDispatchMode):
    """The aten operators run inside the block, by name."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def one_token_step(lm, token: int) -> tuple[collections.Counter, collections.Counter]:
    """Operators and module calls of one one-token forward."""
    modules = collections.Counter()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, _: modules.update([type(m).__name__]))
    try:
        with Ops() as ops:
            lm.extend(torch.tensor([token]))
    finally:
        hook.remove()
    return ops.count, modules


HOST_READS = {"_local_scalar_dense", "item"}  # .item(), int(t), bool(t), .tolist() on a tensor


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_a_one_token_step_reads_nothing_back_and_runs_no_layer_modules(dtype):
    """The static one-token forward: no device-to-host read, no copy of x to rotate it, no KV cast
    before its write, and none of the layers' modules called (their maths runs as functions)."""
    model = tiny_model("llama", 64, 0, hidden_size=64, num_layers=2).to(dtype)
    lm_ = StaticCachedModel(model)
    lm_.kernels = None
    with torch.no_grad():
        lm_.prefill(torch.arange(1, 9))
        ops, modules = one_token_step(lm_, 5)
    assert not HOST_READS & set(ops), ops
    assert not {"flip", "index_copy_"} & set(ops), ops
    assert set(modules) == {"Embedding", "LlamaRotaryEmbedding", "Linear"} and modules["Linear"] == 1, modules


def test_a_feature_heads_step_reads_nothing_back():
    target = tiny_llama(0, 12, sharpness=2.0)
    head = tiny_head(target, 1, sharpness=2.0)
    target_lm = cached_model(target, None, "static", features=head.target_depths)
    head_lm = HeadCachedModel(head, target_lm)
    with torch.no_grad():
        target_lm.prefill(torch.tensor([3, 7, 1, 9]))
        head_lm.prefill(torch.tensor([3, 7, 1]))
        ops, _ = one_token_step(head_lm, 9)
        chain, _ = one_token_step(target_lm, 4)
    assert not HOST_READS & (set(ops) | set(chain)), (ops, chain)


def divided_logits_to_dist(logits, temperature, top_k, top_p) -> Dist:
    """Processing as it ran before temperature 1 skipped its division."""
    return processed_float_logits(logits.float() / temperature, top_k, top_p, top_k_of)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_temperature_one_processing_is_the_divided_logits_without_the_division(dtype):
    """x / 1 is x: the same Dist as the divided logits (ties at the k-th place included), without
    a pass over the vocabulary; another temperature still divides."""
    g = torch.Generator().manual_seed(4)
    logits = (torch.randn(5, 49152, generator=g) * 3).to(dtype)
    logits[1, :40] = logits[1].max()  # a tie across the whole top k
    logits[2, 100:130] = logits[2].topk(12).values[-1]  # ties at the k-th place
    for top_k, top_p in ((10, 0.9), (0, 0.9), (0, 1.0), (10, 1.0)):
        with Ops() as ops:
            got = logits_to_dist(logits, 1.0, top_k, top_p)
        want = divided_logits_to_dist(logits, 1.0, top_k, top_p)
        assert torch.equal(got.ids, want.ids) and torch.equal(got.probs, want.probs), (top_k, top_p)
        assert "div" not in ops.count
    with Ops() as ops:
        logits_to_dist(logits, 0.7, 10, 0.9)
    assert ops.count["div"] == 1
