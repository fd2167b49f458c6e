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
once to q and k together, and float32 RMSNorm without its no-op casts. Each step computes what
the modules compute, in the same order (rotary and RMSNorm bit for bit), except that a
half-precision model on CPU attends in float32 over float32 KV buffers (``attention_dtype``). A
layer whose products are not plain bias-free Linears (e.g. 4-bit ones), and any forward under
autograd (training), runs the modules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


@dataclass(frozen=True)
class FusedWeights:
    """One layer's projections as two products: q|k|v [(Hq + 2 Hkv) D, H] and gate|up [2 I, H]."""

    qkv: torch.Tensor
    gate_up: torch.Tensor
    heads: tuple[int, int]  # (Hq, Hkv)


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
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj)
    if not _plain(*linears):
        return None
    qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    _point_into(qkv, (attn.q_proj, attn.k_proj, attn.v_proj))
    _point_into(gate_up, (mlp.gate_proj, mlp.up_proj))
    D = attn.head_dim
    layer.mtad_fused = FusedWeights(qkv, gate_up, (attn.q_proj.out_features // D, attn.k_proj.out_features // D))
    return layer.mtad_fused


def _point_into(fused: torch.Tensor, linears) -> None:
    """Each Linear's weight becomes its rows of ``fused`` (the same values, one copy in memory)."""
    row = 0
    for linear in linears:
        rows = linear.out_features
        linear.weight = nn.Parameter(fused[row : row + rows], requires_grad=linear.weight.requires_grad)
        row += rows


def rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm(x); in float32 its maths without the casts (which are no-ops there)."""
    if x.dtype != torch.float32 or torch.is_grad_enabled():
        return norm(x)
    return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, h, n, D] rotated: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1] built as a
    flip of the halves with the first negated (the same values as transformers' cat)."""
    half = x.unflatten(-1, (2, -1)).flip(-2)  # [B, h, n, 2, D/2]: [x2, x1]
    half.select(-2, 0).neg_()
    return x * cos.unsqueeze(1) + half.flatten(-2) * sin.unsqueeze(1)


def attention_inputs(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple:
    """x [B, n, H] -> q [B, Hq, n, D], k and v [B, Hkv, n, D] (rotary applied to q and k)."""
    attn = layer.self_attn
    B, n = x.shape[:2]
    h = rms_norm(layer.input_layernorm, x)
    fused = fused_weights(layer)
    if fused is None:
        q = attn.q_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v
    hq, hkv = fused.heads
    qkv = F.linear(h, fused.qkv).view(B, n, -1, attn.head_dim).transpose(1, 2)  # [B, Hq + 2 Hkv, n, D]
    qk = rotary(qkv[:, : hq + hkv], cos, sin)  # q and k in one pass
    return qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv :]


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
    x = x + layer.self_attn.o_proj(o)
    h = rms_norm(layer.post_attention_layernorm, x)
    fused = fused_weights(layer)
    if fused is None:
        return x + layer.mlp(h)
    gate, up = F.linear(h, fused.gate_up).chunk(2, dim=-1)  # [B, n, I] each
    return x + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
