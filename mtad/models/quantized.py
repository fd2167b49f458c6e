"""The target dtype ``q4_1``: a GGUF's own 4-bit and 8-bit weights in PyTorch's weight-only CPU kernels.

GGUF (ggml) formats, blocks of 32 consecutive weights along a row (the input dimension):

- Q4_1, 20 bytes a block: fp16 scale d, fp16 minimum m, 16 bytes of 4-bit codes q in 0..15 (byte j holds
  weight j in its low nibble, weight j + 16 in its high one); w = d * q + m.
- Q8_0, 34 bytes a block: fp16 scale d, 32 int8 codes q; w = d * q.

PyTorch's int4 weight-only kernel (``aten._weight_int4pack_mm_for_cpu``, group size 32) reads a code q
in 0..15 as w = (q - 8) * scale + zero, so a Q4_1 block is carried with scale = d and zero = m + 8d:
the codes move bit for bit; d is exact in every accepted dtype; m + 8d is computed in float64
(exact) and rounded once to the kernel's dtype. The kernel takes float32, bfloat16 or float16
activations, and its scales and zeros must have the activations' dtype; ``q4_1`` runs float32,
which holds d exactly, and m + 8d exactly whenever m and 8d lie within 11 binades of each other
(24 bits hold both 11-bit significands and a carry; ``zero_rounding`` counts the other blocks:
none in the embedded target's file). Then the kernel multiplies by exactly the weights gguf
dequantizes to in float32 (d * q + m: (q - 8) * d is exact, the one rounding of the sum is
gguf's own); only the order of float32 additions in the matmul differs.

``q4_1_bf16`` runs bfloat16 activations, the only ones the kernel's AVX2/AVX-512 code takes (float32
runs its generic loop): the same codes, with d and m + 8d each rounded once to bf16 (8-bit
significands: most blocks' scales round, ``target_distance.carry_rounding`` counts them), and the
Q8_0 embedding and head scales rounded to bf16 likewise. It is a different target from ``q4_1``,
offered as the fastest one to decode with; ``scripts/bench.py --q4-tv`` measures its distance from
the float32 target.

The Q8_0 token embedding (tied with the LM head) is carried exactly too: the embedding is the
dequantized Q8_0 values (d * q is exact in float32: an 11-bit times an 8-bit significand), and the
LM head runs ``aten._weight_int8pack_mm`` (int8 codes, one scale per output row) once per 32-wide
block of the input, each call with that block's scales, summing the partial products: per-block
scales, as in the file. One call with per-row scales would need the rows requantized, which is
lossy (``Int8Linear.requantized_per_row``; ``q4_tv`` measures by how much).

``load_gguf_q4_1`` replaces a dense LlamaForCausalLM's Linears by these modules from the GGUF's raw
blocks (nothing is dequantized and requantized); ``quantize_q4_1`` does the same for any dense Llama
through gguf's own quantizer (tiny test targets). Both leave ``model.mtad_dtype`` the pair dtype
(``q4_1`` or ``q4_1_bf16``), which the environment record reports as the model's dtype.

The target dtype ``int8`` (``quantize_int8``) is weight-only int8 of a dense float32 target (the
GGUF dequantized, a hub or a tiny model): every Linear, the LM head included, requantized to one
scale per output row (scale = max |w| / 127, codes round(w / scale) in -127..127: each weight moves
by at most half a step, ``per_row_int8``) and run by ``aten._weight_int8pack_mm`` in one call per
product (``Int8Linear`` with one block); the token embedding stays dense. ``int8`` runs float32
activations (the kernel's generic loop on x86, slow), ``int8_bf16`` bf16 activations and bf16
scales (its vectorized loop, whose sums are wrong unless in_features % 16 == 0). Decoding runs an int8 layer's
modules as it runs a q4_1 layer's (``layer_math.fused_weights`` fuses plain Linears only): q, k, v,
gate and up are a kernel call each, never a dense fused matrix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

GROUP = 32  # weights per block, in both formats and as the kernels' group size
Q4_1_BYTES, Q8_0_BYTES = 20, 34  # bytes per block
INNER_K_TILES = 8  # a CUDA tiling parameter of the int4 packing; the CPU packing ignores it
# pair dtype -> activation dtype of the kernels (scales and zeros take it too)
Q4_1_DTYPES = {"q4_1": torch.float32, "q4_1_bf16": torch.bfloat16}
INT8_DTYPES = {"int8": torch.float32, "int8_bf16": torch.bfloat16}
KERNEL_DTYPES = {**Q4_1_DTYPES, **INT8_DTYPES}
VECTOR_K = 16  # the int8 kernel's bf16 loop (torch 2.13): other in_features give wrong sums or a crash
# the decoder layers' Linears of a Llama: GGUF name -> module path inside a decoder layer
LLAMA_LINEARS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def kernel_dtype_name(family: dict[str, torch.dtype], dtype: torch.dtype) -> str:
    """The pair dtype of `family` (``Q4_1_DTYPES``, ``INT8_DTYPES``) whose kernels take `dtype` activations."""
    names = {v: k for k, v in family.items()}
    if dtype not in names:
        raise ValueError(f"the {', '.join(family)} targets run {', '.join(map(str, names))} activations, not {dtype}")
    return names[dtype]


# ---------------------------------------------------------------- raw blocks


def q4_1_fields(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_1 rows, uint8 [N, K/32 * 20] -> codes [N, K] int32 in 0..15, d and m [N, K/32] float16."""
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, Q4_1_BYTES)  # [N, B, 20]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]  # [N, B]
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0]
    nibbles = blocks[..., 4:]  # [N, B, 16]: weight j in the low nibble, weight j + 16 in the high one
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # [N, B, 32]
    return torch.from_numpy(codes.reshape(raw.shape[0], -1).astype(np.int32)), torch.from_numpy(d), torch.from_numpy(m)


def q8_0_fields(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Q8_0 rows, uint8 [N, K/32 * 34] -> codes [N, K] int8, d [N, K/32] float16."""
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, Q8_0_BYTES)  # [N, B, 34]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]  # [N, B]
    codes = blocks[..., 2:].copy().view(np.int8)  # [N, B, 32]
    return torch.from_numpy(codes.reshape(raw.shape[0], -1)), torch.from_numpy(d)


def q4_1_dequantized(codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """w = d * q + m in float32, per block of 32 (gguf's own dequantization). [N, K]"""
    n = codes.shape[0]
    w = d.float()[..., None] * codes.view(n, -1, GROUP).float() + m.float()[..., None]  # [N, B, 32]
    return w.reshape(n, -1)


def q8_0_dequantized(codes: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """w = d * q in float32 (exact: 11-bit times 8-bit significands). [N, K]"""
    n = codes.shape[0]
    return (codes.view(n, -1, GROUP).float() * d.float()[..., None]).reshape(n, -1)


def kernel_zeros(d: torch.Tensor, m: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The int4 kernel's zero for a Q4_1 block: (q - 8) * d + zero = d * q + m needs zero = m + 8d,
    summed in float64 (exact for fp16 inputs) and rounded once to `dtype`."""
    return (m.double() + 8 * d.double()).to(dtype)


def zero_rounding(d: torch.Tensor, m: torch.Tensor, dtype: torch.dtype) -> int:
    """How many blocks' zero m + 8d `dtype` cannot hold exactly."""
    return int((kernel_zeros(d, m, dtype).double() != m.double() + 8 * d.double()).sum())


# ---------------------------------------------------------------- modules


class Q4_1Linear(nn.Module):
    """A bias-free Linear over Q4_1 weights, run by the int4 weight-only CPU kernel.

    Buffers: ``packed`` (the kernel's uint8 layout of the codes, [N, K/2]) and ``scales_and_zeros``
    ([K/32, N, 2]: d and m + 8d per block, in the activations' dtype). Input [..., K] of that dtype."""

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor, dtype: torch.dtype = torch.float32):
        super().__init__()
        n, k = codes.shape
        if k % GROUP or n % 16:  # the kernel's own limits (blocks of 32 inputs, outputs in tiles of 16)
            raise ValueError(f"Q4_1Linear needs in_features % {GROUP} == 0 and out_features % 16 == 0, got [{n}, {k}]")
        if codes.min() < 0 or codes.max() > 15:
            raise ValueError("Q4_1 codes must lie in 0..15")
        self.in_features, self.out_features = k, n
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), INNER_K_TILES)
        self.register_buffer("packed", packed)
        scale_zero = torch.stack([d.to(dtype), kernel_zeros(d, m, dtype)], dim=-1)  # [N, B, 2]
        self.register_buffer("scales_and_zeros", scale_zero.transpose(0, 1).contiguous())  # [B, N, 2]

    @classmethod
    def from_blocks(cls, raw: np.ndarray, dtype: torch.dtype = torch.float32) -> "Q4_1Linear":
        return cls(*q4_1_fields(raw), dtype=dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales_and_zeros.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype:
            raise TypeError(f"Q4_1Linear holds {self.dtype} scales and takes {self.dtype} inputs, got {x.dtype}")
        flat = x.reshape(-1, self.in_features).contiguous()  # [M, K]: the kernel takes 2-D contiguous input
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_and_zeros)  # [M, N]
        return y.view(*x.shape[:-1], self.out_features)

    def dequantize(self) -> torch.Tensor:
        """[N, K]: the weights the kernel multiplies by, read back through it with the identity
        (each output is one weight times 1 plus zeros, so nothing rounds)."""
        return self(torch.eye(self.in_features, dtype=self.dtype)).T.contiguous()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, q4_1, {self.dtype}"


def _parameter(weight: torch.Tensor | None) -> nn.Parameter | None:
    """`weight` as a frozen parameter (a parameter itself, e.g. a tied embedding's, as it is)."""
    if weight is None or isinstance(weight, nn.Parameter):
        return weight
    return nn.Parameter(weight, requires_grad=False)


def per_row_int8(w: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights [N, K] -> int8 codes [N, K] and one scale per row [N] of `dtype`: scale = max |w| / 127
    (rounded once to `dtype`), codes = round(w / scale) within -127..127. The codes are rounded
    against the scale as stored, so every weight moves by at most half a step of its row's scale
    (a bf16 scale rounded down leaves max |w| / scale at most 127.25, which still rounds to 127)."""
    w = w.detach().float()
    scale = (w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127).to(dtype)  # [N]
    codes = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)  # [N, K]
    return codes.contiguous(), scale


class Int8Linear(nn.Module):
    """A Linear over int8 codes with one scale per output row and input block, run by the int8
    weight-only CPU kernel once per block: y = Σ_b x_b @ (codes[b] * scales[b][:, None]).T (+ bias).

    codes [B, N, G] int8 (B blocks of G inputs; B = K/32 carries Q8_0 exactly, B = 1 is plain
    per-row int8: one call), scales [B, N] in the activations' dtype, bias [N] of it or None.
    ``weight`` [N, K] is a dense matrix for code that reads a head's rows (the dequantized one, or
    a tied embedding's own parameter), None for a decoder layer's product; the forward never uses
    it, and ``dequantize`` gives the matrix the kernel multiplies by."""

    def __init__(
        self,
        codes: torch.Tensor,
        scales: torch.Tensor,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ):
        super().__init__()
        blocks, n, group = codes.shape
        if scales.dtype != torch.float32 and group % VECTOR_K:
            raise ValueError(
                f"Int8Linear with {scales.dtype} activations needs inputs in blocks of a multiple of {VECTOR_K} "
                f"(the int8 kernel's vectorized loop), got {group}"
            )
        self.in_features, self.out_features, self.group = blocks * group, n, group
        self.register_buffer("codes", codes.to(torch.int8).contiguous())
        self.register_buffer("scales", scales.contiguous())
        self.register_buffer("bias", None if bias is None else bias.to(scales.dtype).contiguous())
        self.register_parameter("weight", _parameter(weight))

    @classmethod
    def from_q8_0(cls, codes: torch.Tensor, d: torch.Tensor, weight=None, dtype=torch.float32) -> "Int8Linear":
        """Q8_0 codes [N, K] and scales d [N, K/32], per block as in the file; ``weight``: the
        given matrix, else the dequantized one (a head's rows)."""
        n = codes.shape[0]
        head = cls(codes.view(n, -1, GROUP).transpose(0, 1), d.T.to(dtype))
        head.weight = _parameter(head.dequantize() if weight is None else weight)
        return head

    @classmethod
    def per_row(cls, w: torch.Tensor, dtype=torch.float32, bias=None, weight=None) -> "Int8Linear":
        """Dense weights [N, K] requantized to one scale per row (`per_row_int8`): one kernel call."""
        codes, scale = per_row_int8(w, dtype)
        return cls(codes[None], scale[None], weight, bias)

    def requantized_per_row(self) -> "Int8Linear":
        """The same matrix requantized to one scale per row (max |w| / 127, round to nearest): the
        single-call layout of the int8 kernel; lossy where a row's blocks have different scales.
        Its ``weight`` is its own dequantized matrix."""
        row = Int8Linear.per_row(self.dequantize(), self.dtype, self.bias)
        row.weight = _parameter(row.dequantize())
        return row

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def dequantize(self) -> torch.Tensor:
        """[N, K]: codes times their scales, in the scales' dtype (what the kernel multiplies by)."""
        w = self.codes.to(self.scales.dtype) * self.scales[..., None]  # [B, N, G]
        return w.transpose(0, 1).reshape(self.out_features, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype:
            raise TypeError(f"Int8Linear holds {self.dtype} scales and takes {self.dtype} inputs, got {x.dtype}")
        flat = x.reshape(-1, self.in_features)  # [M, K]
        if self.codes.shape[0] == 1:  # one scale per row: one call
            y = torch.ops.aten._weight_int8pack_mm(flat.contiguous(), self.codes[0], self.scales[0])  # [M, N]
        else:
            parts = flat.view(flat.shape[0], -1, self.group).transpose(0, 1).contiguous()  # [B, M, G]
            y = torch.ops.aten._weight_int8pack_mm(parts[0], self.codes[0], self.scales[0])  # [M, N]
            for b in range(1, parts.shape[0]):  # per-block scales: one call per block, partial products summed
                y += torch.ops.aten._weight_int8pack_mm(parts[b], self.codes[b], self.scales[b])
        if self.bias is not None:
            y += self.bias
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        blocks = self.in_features // self.group
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 x {blocks} block(s), "
            f"{self.dtype}, bias={self.bias is not None}"
        )


# ---------------------------------------------------------------- whole models


def _swap(layer: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, name, module)


def hf_row_order(rows: int, heads: int) -> np.ndarray:
    """Row i of a transformers q/k projection is row ``order[i]`` of the GGUF's: llama.cpp's converter
    interleaves each head's two rotary halves (ggml's rope pairs adjacent dimensions), transformers
    undoes it on load (``LlamaTensorProcessor``). A permutation of whole rows: blocks stay intact."""
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)


def _gguf_raw(tensors: dict, name: str, kind: str) -> np.ndarray:
    tensor = tensors.get(name)
    if tensor is None:
        raise KeyError(f"GGUF has no tensor {name!r}")
    if tensor.tensor_type.name != kind:
        raise ValueError(f"GGUF tensor {name} is {tensor.tensor_type.name}, not {kind}: target dtype q4_1 needs {kind}")
    return np.asarray(tensor.data)  # [N, bytes per row]


def _set_embedding_and_head(model, emb_codes, emb_d, head=None, dtype=torch.float32) -> None:
    """Embedding = the dequantized Q8_0 values; LM head = the block-exact int8 module, sharing the
    embedding's parameter as its `weight` when tied, else from its own Q8_0 (codes, d)."""
    embedding = model.get_input_embeddings()
    embedding.weight = nn.Parameter(q8_0_dequantized(emb_codes, emb_d).to(dtype), requires_grad=False)
    if head is None:
        model.lm_head = Int8Linear.from_q8_0(emb_codes, emb_d, weight=embedding.weight, dtype=dtype)
    else:
        model.lm_head = Int8Linear.from_q8_0(*head, dtype=dtype)


def load_gguf_q4_1(model, gguf_path: str | Path, dtype: torch.dtype = torch.float32):
    """`model` (the dense LlamaForCausalLM of the same GGUF: config, norms) with the file's Q4_1
    Linears and Q8_0 embedding/head carried into the int4/int8 kernels. In place; returns it."""
    from gguf import GGUFReader

    tensors = {t.name: t for t in GGUFReader(str(gguf_path)).tensors}
    cfg = model.config
    heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}
    model = model.to(dtype)
    for i, layer in enumerate(model.model.layers):
        for name, path in LLAMA_LINEARS.items():
            raw = _gguf_raw(tensors, f"blk.{i}.{name}.weight", "Q4_1")  # [N, K/32 * 20]
            if name in heads:
                raw = raw[hf_row_order(raw.shape[0], heads[name])]
            _swap(layer, path, Q4_1Linear.from_blocks(raw, dtype))
    emb = q8_0_fields(_gguf_raw(tensors, "token_embd.weight", "Q8_0"))
    head = q8_0_fields(_gguf_raw(tensors, "output.weight", "Q8_0")) if "output.weight" in tensors else None
    _set_embedding_and_head(model, *emb, head=head, dtype=dtype)
    model.mtad_dtype = kernel_dtype_name(Q4_1_DTYPES, dtype)
    return model


def quantize_q4_1(model, dtype: torch.dtype = torch.float32):
    """A dense Llama quantized with gguf's own quantizer as the GGUF's target is: decoder Linears
    Q4_1, embedding and LM head Q8_0 (one shared matrix when tied). In place; returns it."""
    from gguf import GGMLQuantizationType, quants

    if getattr(model.config, "model_type", None) != "llama":
        raise ValueError(f"q4_1 quantizes Llama models only, not {type(model).__name__}")

    def blocks(weight: torch.Tensor, kind) -> np.ndarray:
        return quants.quantize(weight.detach().float().cpu().numpy(), kind)  # [N, K/32 * bytes]

    # quantized from the weights as given (float32, say), before the rest is cast to `dtype`
    for layer in model.model.layers:
        for path in LLAMA_LINEARS.values():
            dense = layer.get_submodule(path)
            if dense.bias is not None:
                raise ValueError(f"{path} has a bias; Q4_1Linear has none")
            _swap(layer, path, Q4_1Linear.from_blocks(blocks(dense.weight, GGMLQuantizationType.Q4_1), dtype))
    q8 = GGMLQuantizationType.Q8_0
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head.weight is embedding.weight
    emb = q8_0_fields(blocks(embedding.weight, q8))
    head = None if tied else q8_0_fields(blocks(head.weight, q8))
    model = model.to(dtype)
    _set_embedding_and_head(model, *emb, head=head, dtype=dtype)
    model.mtad_dtype = kernel_dtype_name(Q4_1_DTYPES, dtype)
    return model


def quantize_int8(model, dtype: torch.dtype = torch.float32):
    """A dense model (any family) with every Linear, the LM head included, requantized to per-row
    int8 (`Int8Linear.per_row`) from its weights as given, then the rest (embedding, norms) cast to
    `dtype`. A head tied to the embedding carries the embedding's parameter as its ``weight`` (the
    rows its codes quantize), an untied one its dequantized matrix. In place; returns it."""
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    for path, linear in [(p, m) for p, m in model.named_modules() if type(m) is nn.Linear]:
        weight = linear.weight.detach().float()  # [N, K]
        int8 = Int8Linear.per_row(weight, dtype, None if linear.bias is None else linear.bias.detach())
        if linear is head and not tied:
            int8.weight = _parameter(int8.dequantize())
        _swap(model, path, int8)
    model = model.to(dtype)
    if tied:  # after the cast: the head's `weight` is the embedding's parameter itself
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    model.mtad_dtype = kernel_dtype_name(INT8_DTYPES, dtype)
    return model


def quantize(model, pair_dtype: str):
    """A dense float32 (or float64) model as the quantized target `pair_dtype` (a key of
    ``KERNEL_DTYPES``): gguf's Q4_1/Q8_0 quantizer for q4_1, per-row int8 for int8. In place."""
    if pair_dtype not in KERNEL_DTYPES:
        raise ValueError(f"unknown quantized dtype {pair_dtype!r}; valid: {', '.join(KERNEL_DTYPES)}")
    build = quantize_int8 if pair_dtype in INT8_DTYPES else quantize_q4_1
    return build(model, KERNEL_DTYPES[pair_dtype])


def dense_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` with each quantized Linear's buffers (Q4_1Linear's, Int8Linear's)
    replaced by its dequantized `weight` (and bias): what an nn.Linear copy of the module loads."""
    state = module.state_dict()
    for name, sub in module.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(sub, Q4_1Linear):
            del state[prefix + "packed"], state[prefix + "scales_and_zeros"]
            state[prefix + "weight"] = sub.dequantize()
        elif isinstance(sub, Int8Linear):
            del state[prefix + "codes"], state[prefix + "scales"]
            state[prefix + "weight"] = sub.dequantize()
    return state
