"""The quantized targets: q4_1 (GGUF Q4_1 / Q8_0 blocks carried into PyTorch's int4 / int8 weight-only
CPU kernels) and int8 (every Linear requantized to one int8 scale per output row).

Blocks come from gguf's own quantizer (no download). Weights are compared bit for bit: the
kernel's weights are read back through it with the identity (one weight times 1 plus zeros per
output: nothing rounds). Outputs are compared with a dequantize-then-matmul in float32 under the
standard bound for two float32 dot products of the same terms in different orders,
|y − y_ref| ≤ 2 γ_n Σ_k |x_k w_k| with γ_n = n u / (1 − n u), u = 2^-24 and n the longest chain
of roundings of one term (K for the int4 kernel; K + 2 for the per-block int8 head: product,
in-block sum, the block's scale, the sum over blocks).
"""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from test_decode_paths import METHOD_PARAMS, PROMPT, VOCAB  # the decode-path tests' cases

from mtad.decoding import METHODS, get_decoder
from mtad.models.draft import build_draft_from_target
from mtad.models.pairs import load_pair, pair_config
from mtad.models.quantized import (
    LLAMA_LINEARS,
    Int8Linear,
    Q4_1Linear,
    dense_state_dict,
    per_row_int8,
    q4_1_dequantized,
    q4_1_fields,
    q8_0_dequantized,
    q8_0_fields,
    quantize,
    quantize_int8,
    quantize_q4_1,
    zero_rounding,
)
from mtad.models.tiny import tiny_head, tiny_llama, tiny_opt
from mtad.provenance import environment_record

Q4_1, Q8_0 = GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0
U = 2.0**-24  # float32 unit roundoff


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def weights(n: int, k: int, seed: int) -> np.ndarray:
    """[N, K] float32 with a row of constant blocks (d = 0) and one of all-positive weights (m > 0)."""
    w = np.random.default_rng(seed).normal(0, 0.05, (n, k)).astype(np.float32)
    w[0] = 0.25
    w[1] = np.abs(w[1])
    return w


def assert_within_dot_bound(y, ref, x, w, n):
    bound = 2 * gamma(n) * (x.double().abs().reshape(-1, x.shape[-1]) @ w.double().abs().T)  # [M, N]
    err = (y.double() - ref.double()).reshape(bound.shape).abs()
    assert (err <= bound).all(), f"max excess {float((err - bound).max()):.3g}"


@pytest.mark.parametrize("n,k", [(16, 32), (48, 96), (80, 576), (64, 1536)])
def test_q4_1_fields_and_kernel_weights_are_gguf_s_dequantization(n, k):
    raw = quants.quantize(weights(n, k, seed=n), Q4_1)  # [N, K/32 * 20]
    codes, d, m = q4_1_fields(raw)
    ref = torch.from_numpy(quants.dequantize(raw, Q4_1))  # [N, K] float32, d * q + m
    assert codes.shape == (n, k) and d.dtype == m.dtype == torch.float16
    assert torch.equal(q4_1_dequantized(codes, d, m), ref)
    assert zero_rounding(d, m, torch.float32) == 0  # m + 8d fits float32: the carry is exact
    assert torch.equal(Q4_1Linear(codes, d, m).dequantize(), ref)  # what the int4 kernel multiplies by


@pytest.mark.parametrize("rows", [1, 3, 5, 9])
@pytest.mark.parametrize("n,k", [(16, 32), (48, 96), (80, 576), (64, 1536)])
def test_q4_1_linear_matches_dequantize_then_matmul(n, k, rows):
    raw = quants.quantize(weights(n, k, seed=k), Q4_1)
    lin, w = Q4_1Linear.from_blocks(raw), torch.from_numpy(quants.dequantize(raw, Q4_1))
    x = torch.randn(2, rows, k, generator=torch.Generator().manual_seed(rows))  # [2, rows, K]
    y = lin(x)
    assert y.shape == (2, rows, n)
    assert_within_dot_bound(y, x @ w.T, x, w, k)
    assert_within_dot_bound(lin(x[:, :1].transpose(0, 1)), x[:, :1].transpose(0, 1) @ w.T, x[:, :1], w, k)


@pytest.mark.parametrize("n,k", [(20, 32), (320, 96), (48, 576)])
def test_int8_head_carries_q8_0_blocks_exactly(n, k):
    raw = quants.quantize(weights(n, k, seed=3), Q8_0)  # [N, K/32 * 34]
    codes, d = q8_0_fields(raw)
    ref = torch.from_numpy(quants.dequantize(raw, Q8_0))  # [N, K] d * q
    assert torch.equal(q8_0_dequantized(codes, d), ref)
    head = Int8Linear.from_q8_0(codes, d)
    assert torch.equal(head.weight, ref)
    assert torch.equal(head(torch.eye(k)).T, ref)  # the kernel's weights, through the identity
    x = torch.randn(3, 7, k, generator=torch.Generator().manual_seed(k))
    assert_within_dot_bound(head(x), x @ ref.T, x, ref, k + 2)


def test_per_row_requantization_of_the_head_is_lossy_but_bounded():
    """One scale per row (max |w| / 127) rounds each weight by at most half a step, which is more
    than nothing where the row's Q8_0 blocks have different scales."""
    w = weights(48, 576, seed=5)
    w[2, :32] *= 20  # one block far larger than the rest of its row
    codes, d = q8_0_fields(quants.quantize(w, Q8_0))
    exact = Int8Linear.from_q8_0(codes, d)
    row = exact.requantized_per_row()
    assert row.codes.shape == (1, 48, 576)
    step = exact.weight.abs().amax(dim=1, keepdim=True) / 127  # [N, 1]
    err = (row.weight - exact.weight).abs()
    assert (err <= step / 2 * (1 + 1e-6)).all() and err[2].max() > 0
    x = torch.randn(4, 576)
    assert_within_dot_bound(row(x), x @ row.weight.T, x, row.weight, 578)


def test_kernels_refuse_what_they_cannot_run():
    codes, d, m = q4_1_fields(quants.quantize(weights(16, 64, seed=1), Q4_1))
    lin = Q4_1Linear(codes, d, m)
    with pytest.raises(TypeError, match="float32 inputs"):
        lin(torch.randn(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="out_features % 16"):
        Q4_1Linear(codes[:8], d[:8], m[:8])
    with pytest.raises(ValueError, match="0..15"):
        Q4_1Linear(codes + 1, d, m)


# ---------------------------------------------------------------- whole tiny targets


def q4_target(seed: int = 0, vocab: int = VOCAB, sharpness: float = 2.0):
    return quantize_q4_1(tiny_llama(seed, vocab, sharpness=sharpness))


def test_quantize_q4_1_replaces_every_linear_and_names_the_dtype():
    dense = tiny_llama(0, VOCAB, sharpness=2.0)
    model = quantize_q4_1(tiny_llama(0, VOCAB, sharpness=2.0))
    for layer, ref in zip(model.model.layers, dense.model.layers):
        for path in LLAMA_LINEARS.values():
            raw = quants.quantize(ref.get_submodule(path).weight.detach().float().numpy(), Q4_1)
            assert torch.equal(layer.get_submodule(path).dequantize(), torch.from_numpy(quants.dequantize(raw, Q4_1)))
    assert isinstance(model.lm_head, Int8Linear) and model.dtype == torch.float32
    assert environment_record(models=(model, dense))["dtype"] == "float64,q4_1"
    with torch.no_grad():
        logits = model(input_ids=PROMPT).logits
    assert logits.shape == (1, 5, VOCAB) and logits.dtype == torch.float32


def test_pair_target_dtype_q4_1():
    pair = load_pair("tiny_llama", target_dtype="q4_1")
    assert pair.target.mtad_dtype == "q4_1" and pair.draft.dtype == torch.float32
    assert isinstance(pair.target.model.layers[0].mlp.up_proj, Q4_1Linear)
    assert environment_record(models=(pair.target,))["dtype"] == "q4_1"
    with pytest.raises(ValueError, match="valid: float32, float64, bfloat16, float16, q4_1"):
        pair_config("tiny_llama", target_dtype="q4_0")
    with pytest.raises(ValueError, match="gguf_package or tiny_random"):  # refused before any download
        load_pair(dict(pair_config("llama2_13b_68m"), target_dtype="q4_1", device="cpu", device_map=None))
    with pytest.raises(ValueError, match="CPU kernels only"):
        load_pair("tiny_llama", target_dtype="q4_1", device="meta")
    with pytest.raises(ValueError, match="Llama models only"):
        load_pair("tiny_opt", target_dtype="q4_1")


def test_pair_target_dtype_q4_1_bf16_rounds_only_scales_zeros_and_activations():
    pair = load_pair("tiny_llama", target_dtype="q4_1_bf16")
    exact = load_pair("tiny_llama", target_dtype="q4_1").target
    assert pair.target.mtad_dtype == "q4_1_bf16" and pair.target.dtype == torch.bfloat16
    assert environment_record(models=(pair.target,))["dtype"] == "q4_1_bf16"
    for layer, ref in zip(pair.target.model.layers, exact.model.layers):
        for path in LLAMA_LINEARS.values():
            ours, theirs = layer.get_submodule(path), ref.get_submodule(path)
            assert torch.equal(ours.packed, theirs.packed)  # the same 4-bit codes
            assert torch.equal(ours.scales_and_zeros, theirs.scales_and_zeros.to(torch.bfloat16))  # rounded once
    with torch.no_grad():
        p = exact(input_ids=PROMPT).logits.softmax(-1)
        q = pair.target(input_ids=PROMPT).logits.float().softmax(-1)
    assert 0 < (0.5 * (p - q).abs().sum(-1)).max() < 0.05  # a different target, close to q4_1


@pytest.mark.parametrize("dtype", ["q4_1", "int8"])
@pytest.mark.parametrize("method", METHODS)
def test_both_decode_paths_give_the_same_tokens_on_a_quantized_target(method, dtype):
    target, draft = quantize(tiny_llama(0, VOCAB, sharpness=2.0), dtype), tiny_llama(1, VOCAB, sharpness=2.0).float()
    for seed in range(3):
        runs = {}
        for path in ("eager", "static"):
            decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **METHOD_PARAMS[method])
            out = decoder.generate(PROMPT, max_new_tokens=30, generator=torch.Generator().manual_seed(seed))
            assert out.stats.decode_path == path
            runs[path] = out.tokens
        assert runs["eager"] == runs["static"], f"{method} seed {seed}"


@pytest.mark.parametrize("dtype", ["q4_1", "int8"])
def test_drafts_build_on_a_quantized_target(dtype):
    """A layer draft copies the quantized target's layers as dense Linears (their dequantized
    weights); a feature head reads its embedding and head rows; both decode on the static path."""
    target = quantize(tiny_llama(0, VOCAB, sharpness=2.0), dtype)
    draft = build_draft_from_target(target, [1])
    state = dense_state_dict(target.model.layers[1])
    assert torch.equal(draft.model.layers[0].mlp.down_proj.weight, state["mlp.down_proj.weight"])
    head = tiny_head(target, 1).float()
    for small in (draft, head):
        decoder = get_decoder("sps", target=target, draft=small, decode_path="static", gamma=3)
        assert len(decoder.generate(PROMPT, max_new_tokens=12).tokens) == 12


@pytest.mark.slow
def test_mtad_with_draft_equal_to_a_q4_1_target_follows_its_exact_mtjd():
    """As test_claims' C5 check, on a q4_1 target: q = p, one beam, no truncation, τ → 0."""
    from mtad.decoding.mtjd_exact import exact_block_distribution
    from mtad.metrics.exact_enumeration import empirical_counts
    from mtad.stats.goodness_of_fit import chisquare_exactness

    target, prompt = q4_target(0, vocab=4, sharpness=3.0), torch.tensor([[1, 3, 2]])
    flat = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    params = {"gamma": 2, "beam_width": 1, "threshold": 0.01, **flat}
    counts = empirical_counts("mtad", target, target, params, prompt, 2, 300, decode_path="static")
    _, mtjd = exact_block_distribution(target, prompt[0], 2, **flat)
    result = chisquare_exactness(counts, mtjd.double())
    assert result.impossible == 0 and result.pvalue > 1e-3


# ---------------------------------------------------------------- the embedded target's GGUF


@pytest.mark.slow
def test_q4_1_target_of_the_embedded_gguf_matches_its_dequantized_weights():
    """Every one of the 210 Q4_1 tensors (q/k rows in transformers' order) dequantizes bit for bit
    to the float32 target's weights (transformers' dequantization of the same file), the kernel
    multiplies by them (one layer read back through it), and the logits agree to float32 rounding
    accumulated over 30 layers (measured: max |Δ| 1.1e-4 on logits up to 38, TV 7e-6; asserted at
    10x and ~15x)."""
    from gguf import GGUFReader

    from mtad.models.gguf_cache import find_gguf
    from mtad.models.pairs import load_target_and_tokenizer
    from mtad.models.quantized import hf_row_order
    from mtad.tasks.prompts import chat_ids

    cfg = pair_config("smollm2_135m_head")
    dense, tokenizer = load_target_and_tokenizer(cfg, dtype="float32")
    q4, _ = load_target_and_tokenizer(cfg, dtype="q4_1")
    spec = cfg["target"]
    tensors = {t.name: t for t in GGUFReader(str(find_gguf(spec["package"], spec["version"], spec["file"]))).tensors}
    heads = {"attn_q": dense.config.num_attention_heads, "attn_k": dense.config.num_key_value_heads}
    checked = 0
    for i, layer in enumerate(dense.model.layers):
        for name, path in LLAMA_LINEARS.items():
            raw = np.asarray(tensors[f"blk.{i}.{name}.weight"].data)
            raw = raw[hf_row_order(raw.shape[0], heads[name])] if name in heads else raw
            codes, d, m = q4_1_fields(raw)
            assert zero_rounding(d, m, torch.float32) == 0
            assert torch.equal(q4_1_dequantized(codes, d, m), layer.get_submodule(path).weight), f"blk.{i}.{name}"
            checked += 1
    assert checked == 210
    for path in LLAMA_LINEARS.values():
        assert torch.equal(
            q4.model.layers[7].get_submodule(path).dequantize(), dense.model.layers[7].get_submodule(path).weight
        )
    assert torch.equal(q4.model.embed_tokens.weight, dense.model.embed_tokens.weight)
    assert q4.lm_head.weight is q4.model.embed_tokens.weight  # tied, as in the file
    ids = chat_ids(tokenizer, "Explain in two sentences why the sky is blue.")
    with torch.no_grad():
        p, q = dense(input_ids=ids).logits[0].double(), q4(input_ids=ids).logits[0].double()
    assert (p - q).abs().max() < 1e-3
    assert (0.5 * (p.softmax(-1) - q.softmax(-1)).abs().sum(-1)).max() < 1e-4
    assert (p.argmax(-1) == q.argmax(-1)).all()


def test_distribution_distance_is_zero_for_one_model_and_counts_positions():
    from mtad.bench.target_distance import distribution_distance

    dense, q4 = tiny_llama(0, VOCAB, sharpness=2.0).float(), q4_target(0)
    sequences, starts = [PROMPT, PROMPT[:, :3]], [2, 1]
    same = distribution_distance(dense, dense, sequences, starts)
    assert same["all_positions"] == {"positions": 8, "mean_tv": 0.0, "max_tv": 0.0, "argmax_agreement": 1.0}
    assert same["continuation"]["positions"] == 5
    other = distribution_distance(dense, q4, sequences, starts)["all_positions"]
    assert 0 < other["mean_tv"] <= other["max_tv"] <= 1


# ---------------------------------------------------------------- the int8 target (per-row requantization)


def read_back(lin: Int8Linear) -> torch.Tensor:
    """[N, K]: the weights the int8 kernel multiplies by, read through it with the identity."""
    return lin(torch.eye(lin.in_features, dtype=lin.dtype)).T.float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_row_int8_moves_each_weight_by_at_most_half_a_step(dtype):
    """Through the kernel: every weight within half its row's step of the dense one (a float32
    product is exact; a bf16 one rounds code x scale once more), the largest at code ±127, a zero
    row kept; a scale off by 2%, or max |w| / 128, moves the largest weights by more."""
    w = torch.from_numpy(weights(48, 64, seed=9))  # [N, K]
    w[5] = 0.0
    codes, scale = per_row_int8(w, dtype)
    assert codes.dtype == torch.int8 and scale.dtype == dtype and codes.abs().max() == 127
    assert (codes.abs().amax(dim=1)[torch.arange(48) != 5] == 127).all() and (codes[5] == 0).all()
    lin = Int8Linear.per_row(w, dtype)
    step = scale.float()[:, None]  # [N, 1]
    rounding = 2.0**-8 * w.abs() if dtype == torch.bfloat16 else 0.0
    assert ((read_back(lin) - w).abs() <= step / 2 * (1 + 1e-6) + rounding).all()
    for broken in (scale.float() * 1.02, w.abs().amax(dim=1) / 128):
        wrong = Int8Linear(torch.round(w / broken[:, None]).clamp(-127, 127)[None], broken[None])
        assert ((read_back(wrong) - w).abs() > step / 2 * (1 + 1e-6)).any()


@pytest.mark.parametrize("rows", [1, 5, 17])
@pytest.mark.parametrize("n,k", [(16, 32), (48, 96), (7, 40), (64, 576)])
def test_int8_linear_per_row_matches_dequantize_then_matmul(n, k, rows):
    """One call per product, bias added, within the float32 dot-product bound (K products and sums,
    the scale, the bias)."""
    w, bias = torch.from_numpy(weights(n, k, seed=k)), torch.randn(n, generator=torch.Generator().manual_seed(n))
    lin = Int8Linear.per_row(w, torch.float32, bias)
    x = torch.randn(2, rows, k, generator=torch.Generator().manual_seed(rows))  # [2, rows, K]
    deq = lin.dequantize()
    assert lin.weight is None and lin.codes.shape == (1, n, k)
    assert_within_dot_bound(lin(x) - bias, x @ deq.T, x, deq, k + 2)


def test_int8_bf16_needs_inputs_in_sixteens():
    """The kernel's bf16 loop reads 16 inputs at a time (other widths: wrong sums or a crash)."""
    w = torch.from_numpy(weights(16, 40, seed=2))
    with pytest.raises(ValueError, match="multiple of 16"):
        Int8Linear.per_row(w, torch.bfloat16)
    lin = Int8Linear.per_row(w[:, :32], torch.bfloat16)
    x = torch.randn(3, 32)
    ref = x @ lin.dequantize().float().T
    assert torch.allclose(lin(x.bfloat16()).float(), ref, rtol=0.02, atol=0.02 * ref.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_int8_replaces_every_linear_and_keeps_the_embedding(dtype):
    """Every Linear, the head included, becomes one per-row int8 product; the embedding stays the
    dense one; the logits are the dense model's with the dequantized weights (float32: to float32
    rounding), and near the float32 target's (a scale 2% off moves them 3x further)."""
    dense = tiny_llama(0, VOCAB, sharpness=2.0).float()
    model = quantize_int8(tiny_llama(0, VOCAB, sharpness=2.0), dtype)
    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 7 * 2 + 1 and not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert all(m.codes.shape[0] == 1 and m.dtype == dtype for m in linears)
    assert model.mtad_dtype == ("int8" if dtype == torch.float32 else "int8_bf16") and model.dtype == dtype
    assert torch.equal(model.model.embed_tokens.weight, dense.model.embed_tokens.weight.to(dtype))
    assert torch.equal(model.lm_head.weight, model.lm_head.dequantize())  # untied: its own rows
    with torch.no_grad():
        ref, logits = dense(input_ids=PROMPT).logits, model(input_ids=PROMPT).logits.float()
        if dtype == torch.float32:
            same = tiny_llama(0, VOCAB, sharpness=2.0).float()
            same.load_state_dict(dense_state_dict(model))
            assert torch.allclose(logits, same(input_ids=PROMPT).logits, rtol=1e-5, atol=1e-5)
    assert (logits - ref).abs().max() < 0.015 * ref.abs().max()  # measured 0.0084 (int8), 0.0087 (bf16)


def test_quantize_int8_takes_any_family_and_a_tied_head():
    """OPT (biased Linears) too; a head tied to the embedding carries the embedding's parameter as
    its `weight` and multiplies by its own codes."""
    dense = tiny_opt(0, VOCAB, sharpness=2.0).float()
    model = quantize(tiny_opt(0, VOCAB, sharpness=2.0), "int8")
    assert model.model.decoder.layers[0].fc1.bias is not None
    with torch.no_grad():
        ref, logits = dense(input_ids=PROMPT).logits, model(input_ids=PROMPT).logits
    assert (logits - ref).abs().max() < 0.015 * ref.abs().max()
    tied = tiny_llama(0, VOCAB, sharpness=2.0)
    tied.lm_head.weight = tied.model.embed_tokens.weight
    tied = quantize(tied, "int8_bf16")
    assert tied.lm_head.weight is tied.model.embed_tokens.weight and tied.lm_head.weight.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="valid: q4_1, q4_1_bf16, int8, int8_bf16"):
        quantize(tiny_llama(0, VOCAB), "int4")


@pytest.mark.parametrize("pair_name", ["tiny_llama", "tiny_opt", "tiny_llama_head"])
@pytest.mark.parametrize("dtype", ["int8", "int8_bf16"])
def test_pair_target_dtype_int8(pair_name, dtype):
    """Tiny random pairs load an int8 target (draft dense), named in the run record, and SpS decodes
    on the eager and fast paths."""
    pair = load_pair(pair_name, target_dtype=dtype)
    assert pair.target.mtad_dtype == dtype and isinstance(pair.target.lm_head, Int8Linear)
    assert environment_record(models=(pair.target,))["dtype"] == dtype
    draft = pair.draft.to(pair.target.dtype)
    prompt = torch.tensor([[5, 6, 7, 8]])
    for path in ("eager", "fast"):
        decoder = get_decoder("sps", target=pair.target, draft=draft, decode_path=path, gamma=3)
        assert len(decoder.generate(prompt, max_new_tokens=8).tokens) == 8


def test_int8_is_refused_off_the_cpu_and_listed_as_valid():
    with pytest.raises(
        ValueError, match="valid: float32, float64, bfloat16, float16, q4_1, q4_1_bf16, int8, int8_bf16"
    ):
        pair_config("tiny_llama", target_dtype="int4")
    with pytest.raises(ValueError, match="target_dtype int8 runs on CPU kernels only"):
        load_pair("tiny_llama", target_dtype="int8", device="meta")
    with pytest.raises(ValueError, match="needs a gguf_package or tiny_random or hub target"):
        load_pair(dict(pair_config("tiny_llama"), target={"source": "distilled"}, target_dtype="int8_bf16"))
