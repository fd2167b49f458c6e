"""One Llama decoder layer written out, for forwards that manage their own KV buffers and masks.

Both the lean target/draft forward (`static_kv.llama_body`) and the feature head (its decoding
forward, `static_kv.run_layers`, and its training-time unroll) run transformers' own modules
through these three steps, so the maths of a layer lives in one place:

    q, k, v = attention_inputs(layer, x, cos, sin)     # norm, projections, rotary
    o = attend(layer, q, keys, values, mask)           # SDPA over whatever keys the caller holds
    x = finish_layer(layer, x, o)                      # o_proj + residual, MLP + residual
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


def attention_inputs(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple:
    """x [B, n, H] -> q [B, Hq, n, D], k and v [B, Hkv, n, D] (rotary applied to q and k)."""
    attn = layer.self_attn
    B, n = x.shape[:2]
    h = layer.input_layernorm(x)
    q = attn.q_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(h).view(B, n, -1, attn.head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    return q, k, v


def attend(layer, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, Hq, n, D] over keys/values [B, Hkv, kv, D] (bool mask [B or 1, 1, n, kv], None = all)
    -> [B, n, Hq * D]."""
    o = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, scale=layer.self_attn.scaling, enable_gqa=True
    )  # [B, Hq, n, D]
    return o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


def finish_layer(layer, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """The rest of the layer: x + o_proj(o), then x + MLP(norm(x)). [B, n, H]"""
    x = x + layer.self_attn.o_proj(o)
    return x + layer.mlp(layer.post_attention_layernorm(x))
