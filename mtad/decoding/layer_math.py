"""One Llama decoder layer written out, for forwards that manage their own KV buffers and masks.

Both the lean target/draft forward (`static_kv.llama_body`) and the feature head (its decoding
forward, `static_kv.run_layers`, and its training-time unroll) run transformers' own modules
through these three steps, so the maths of a layer lives in one place:

    q, k, v = attention_inputs(layer, x, cos, sin)     # norm, projections, rotary
    o = attend(layer, q, keys, values, mask)           # SDPA over whatever keys the caller holds
    x = finish_layer(layer, x, o)                      # o_proj + residual, MLP + residual

Decoding (no autograd) runs a layer in fewer operators than the modules would: q, k and v as one
matrix product and gate and up as another (``fused_weights``: each layer's weights concatenated
once, the modules' weights then views into them, so the model holds one copy), rotary applied
once to q and k together from tables built once per forward (``Rotary``: rotate_half's sign moved
onto sin, so the rotated half is two half-width products into one buffer, not a copy of x with its
halves swapped), RMSNorm as one ``F.rms_norm`` call on a CPU, and the other products and the
activation as functions (no module calls), each residual added into the fresh product. Each step
computes what the modules compute, in the same order (rotary and RMSNorm bit for bit), except that a
half-precision model on CPU attends in float32 over float32 KV buffers (``attention_dtype``). A
layer whose products are not plain bias-free Linears (e.g. 4-bit ones), and any forward under
autograd (training), runs the modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import SiLUActivation
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb


@dataclass(frozen=True)
class FusedWeights:
    """One layer's projections as two products: q|k|v [(Hq + 2 Hkv) D, H] and gate|up [2 I, H];
    o_proj and down_proj are plain products too (``F.linear`` on the modules' weights), and the
    activation is its function (``F.silu`` for transformers' SiLU module, which calls it)."""

    qkv: torch.Tensor
    gate_up: torch.Tensor
    heads: tuple[int, int]  # (Hq, Hkv)
    act: Callable[[torch.Tensor], torch.Tensor]


def _plain(*linears) -> bool:
    return all(type(m) is nn.Linear and m.bias is None for m in linears)


def fused_weights(layer) -> FusedWeights | None:
    """The layer's fused products, built on first use (None: not plain Linears, under autograd, or
    while torch.compile traces: inductor fuses the graph itself)."""
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return None
    attn, mlp = layer.self_attn, layer.mlp
    fused = getattr(layer, "mtad_fused", None)
    if fused is not None and attn.q_proj.weight.data_ptr() == fused.qkv.data_ptr():
        return fused  # the modules' weights are still views into it
    if not _plain(attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        return None
    qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    _point_into(qkv, (attn.q_proj, attn.k_proj, attn.v_proj))
    _point_into(gate_up, (mlp.gate_proj, mlp.up_proj))
    D = attn.head_dim
    heads = (attn.q_proj.out_features // D, attn.k_proj.out_features // D)
    act = F.silu if type(mlp.act_fn) is SiLUActivation else mlp.act_fn  # SiLUActivation.forward is F.silu
    layer.mtad_fused = FusedWeights(qkv, gate_up, heads, act)
    return layer.mtad_fused


def _point_into(fused: torch.Tensor, linears) -> None:
    """Each Linear's weight becomes its rows of ``fused`` (the same values, one copy in memory)."""
    row = 0
    for linear in linears:
        rows = linear.out_features
        linear.weight = nn.Parameter(fused[row : row + rows], requires_grad=linear.weight.requires_grad)
        row += rows


def rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm(x): x normalised in float32, cast back to x's dtype, times the weight.

    On a CPU in one call (`_cpu_rms_norm`); elsewhere ``F.rms_norm`` may run a fused kernel that
    reduces in another order, so float32 runs the module's maths without its no-op casts and
    other dtypes the module. Under autograd, or for another module (a head without a norm has an
    Identity there): the module."""
    if type(norm) is not LlamaRMSNorm or torch.is_grad_enabled():
        return norm(x)
    if x.device.type == "cpu":
        return _cpu_rms_norm(x, norm.weight, norm.variance_epsilon)
    if x.dtype == torch.float32:
        return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
    return norm(x)


def _cpu_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm's maths by ``F.rms_norm``, on a CPU the module's own kernels (square, mean,
    + eps, rsqrt, scale; half inputs upcast to float32 and cast back) from one call. Without a
    weight it rounds the normalised x to x's dtype before the weight multiplies it, as the module
    does; with x and weight in float32 there is nothing to round, so it takes the weight itself."""
    if x.dtype == weight.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    if x.dtype in (torch.bfloat16, torch.float16):  # upcast to float32 inside, rounded back once
        return F.rms_norm(x, weight.shape, None, eps) * weight
    return F.rms_norm(x.float(), weight.shape, None, eps).to(x.dtype) * weight  # the module normalises in float32


@dataclass(frozen=True)
class Rotary:
    """One forward's rotary tables, built once for all its layers (`Rotary.of`).

    rotate_half(x) sin = [-x2 s1, x1 s2] = [x2 (-s1), x1 s2]: the sign moves onto sin exactly
    (IEEE products round symmetrically), so each half of the rotated term is one product of a
    half of x, written in place, without a copy of x's halves swapped."""

    cos: torch.Tensor  # [B, n, D], as the rotary embedding returns it
    sin: torch.Tensor  # [B, n, D]
    cos_heads: torch.Tensor  # [B, 1, n, D]
    sin_low: torch.Tensor  # [B, 1, n, D/2]: -s1, the first half negated
    sin_high: torch.Tensor  # [B, 1, n, D/2]: s2

    @classmethod
    def of(cls, cos: torch.Tensor, sin: torch.Tensor) -> Rotary:
        low, high = sin.unsqueeze(1).chunk(2, dim=-1)  # [B, 1, n, D/2] each
        return cls(cos, sin, cos.unsqueeze(1), -low, high)


def rotary(x: torch.Tensor, rot: Rotary) -> torch.Tensor:
    """x [B, h, n, D] rotated: x cos + rotate_half(x) sin, the same values as transformers'
    apply_rotary_pos_emb (each product and the sum rounded as there)."""
    x1, x2 = x.chunk(2, dim=-1)  # [B, h, n, D/2] each
    turned = torch.empty_like(x)  # rotate_half(x) sin, [B, h, n, D]
    low, high = turned.chunk(2, dim=-1)
    torch.mul(x2, rot.sin_low, out=low)  # -x2 s1
    torch.mul(x1, rot.sin_high, out=high)  # x1 s2
    return turned.add_(x * rot.cos_heads)  # a sum of two terms: the same in either order


def attention_inputs(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple:
    """x [B, n, H] -> q [B, Hq, n, D], k and v [B, Hkv, n, D] (rotary applied to q and k); cos
    and sin [B, n, D] as the rotary embedding returns them."""
    return rotated_attention_inputs(layer, x, Rotary.of(cos, sin))


def rotated_attention_inputs(layer, x: torch.Tensor, rot: Rotary) -> tuple:
    """`attention_inputs` on a forward's rotary tables, built once for every layer."""
    attn = layer.self_attn
    B, n = x.shape[:2]
    h = rms_norm(layer.input_layernorm, x)
    fused = fused_weights(layer)
    if fused is None:
        q = attn.q_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, rot.cos, rot.sin)
        return q, k, v
    hq, hkv = fused.heads
    qkv = F.linear(h, fused.qkv).view(B, n, -1, attn.head_dim).transpose(1, 2)  # [B, Hq + 2 Hkv, n, D]
    qk, v = qkv.split([hq + hkv, hkv], dim=1)
    q, k = rotary(qk, rot).split([hq, hkv], dim=1)  # q and k in one pass
    return q, k, v


def attention_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a lean forward attends in, and so the dtype of its KV buffers: float32 for a
    half-precision model on CPU, where torch's bf16 SDPA kernel takes ~4x float32's time for a
    one-token query (130 vs 30 µs per layer on a 2-core AVX-512 EPYC, 200 keys) and float32 holds
    every bf16/fp16 key and value exactly; the model's own dtype elsewhere."""
    if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return dtype


def attend(layer, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, Hq, n, D] over keys/values [B, Hkv, kv, D] (bool mask [B or 1, 1, n, kv], None = all)
    -> [B, n, Hq * D] in q's dtype; computed in the keys' dtype (`attention_dtype`)."""
    o = F.scaled_dot_product_attention(
        q.to(keys.dtype), keys, values, attn_mask=mask, scale=layer.self_attn.scaling, enable_gqa=True
    )  # [B, Hq, n, D]
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1).to(q.dtype)


def finish_layer(layer, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """The rest of the layer: x + o_proj(o), then x + MLP(norm(x)). [B, n, H]"""
    attn, mlp = layer.self_attn, layer.mlp
    fused = fused_weights(layer)
    if fused is None:
        x = x + attn.o_proj(o)
        return x + mlp(rms_norm(layer.post_attention_layernorm, x))
    # each product is a fresh tensor: the residual adds into it (a sum of two terms, either order)
    x = F.linear(o, attn.o_proj.weight).add_(x)  # [B, n, H]
    h = rms_norm(layer.post_attention_layernorm, x)
    gate, up = F.linear(h, fused.gate_up).chunk(2, dim=-1)  # [B, n, I] each
    return F.linear(fused.act(gate) * up, mlp.down_proj.weight).add_(x)
