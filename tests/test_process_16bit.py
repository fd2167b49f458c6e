"""Processing reads 16-bit logits without a float32 copy of the vocabulary, and gives what the copy
gave: the same ids and the same float32 probabilities, ties at the k-th place included.

The reference is the processing as it ran before (`old_*` below, verbatim): every logit cast to
float32 first, the chunk maxima by amax over the copy, the ids by floor division. The new path
must equal it bit for bit for bfloat16, float16, float32 and float64 logits, on rows with ties
among the top k, among the chunk maxima and at the k-th place, zeros of both signs, infinities,
all-negative chunks, rows holding only a restricted head's tokens (the feature-head draft's
-inf elsewhere) and a vocabulary that is no multiple of the chunk."""

import pytest
import torch
from processing_reference import processed_float_logits
from torch.utils._python_dispatch import TorchDispatchMode

from mtad.decoding.logits import (
    TOP_K_CHUNK,
    Dist,
    _chunk_ids,
    _chunk_maxima,
    logits_to_dist,
    top_k_of,
)

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
SETTINGS = [  # (temperature, top_k, top_p): the paper's, top-k alone, others that take the old path
    (1.0, 10, 0.9),
    (1.0, 10, 1.0),
    (1.0, 1, 0.9),
    (1.0, 40, 0.95),
    (0.7, 10, 0.9),
    (0.0, 10, 0.9),
    (1.0, 0, 0.9),
]


def old_top_k_of(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """top_k_of as it ran before (on float logits)."""
    vocab = logits.shape[-1]
    if logits.device.type != "cpu" or vocab < 16 * k * TOP_K_CHUNK:
        return torch.topk(logits, k, dim=-1)
    lead = logits.shape[:-1]
    rows = logits.reshape(-1, vocab)
    pad = -vocab % TOP_K_CHUNK
    if pad:
        rows = torch.nn.functional.pad(rows, (0, pad), value=float("-inf"))
    chunks = rows.view(rows.shape[0], -1, TOP_K_CHUNK)
    best = chunks.amax(-1).topk(k, dim=-1).indices
    candidates = chunks.gather(1, best[..., None].expand(-1, -1, TOP_K_CHUNK)).flatten(1)
    values, at = candidates.topk(k, dim=-1)
    ids = best.gather(1, at // TOP_K_CHUNK) * TOP_K_CHUNK + at % TOP_K_CHUNK
    return values.reshape(*lead, k), ids.reshape(*lead, k)


def old_logits_to_dist(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> Dist:
    """logits_to_dist as it ran before: every logit cast to float32 first."""
    logits = logits.float()
    vocab = logits.shape[-1]
    if temperature == 0:
        ids = logits.argmax(-1, keepdim=True)
        return Dist(ids, torch.ones(ids.shape, dtype=torch.float32, device=logits.device), vocab)
    if temperature != 1.0:
        logits = logits / temperature
    return processed_float_logits(logits, top_k, top_p, old_top_k_of)


def logit_rows(kind: str, rows: int, vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[rows, vocab] logits of one kind, in `dtype` (ties come from the 16-bit rounding and by hand)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g, dtype=torch.float64) * 3
    if kind == "ties":
        x[0, :40] = x[0].max()  # a tie across the whole top k, spread over chunks 0 and 1
        x[-1, 100:1000:64] = x[-1].topk(12).values[-1]  # ties at the k-th place, one per chunk: tied chunk maxima
        x[:, 7::97] = x[:, :1]  # many repeats of one value per row
    elif kind == "zeros":  # zeros of both signs, -inf chunks, chunks holding only negatives
        x = -x.abs() - 1
        x[:, 5::11] = 0.0
        x[:, 9::13] = -0.0
        x[:, 3 * TOP_K_CHUNK : 5 * TOP_K_CHUNK] = float("-inf")
    elif kind == "negative":  # every logit negative: every chunk's maximum is its least magnitude
        x = -x.abs() - 0.5
    elif kind == "restricted":  # a restricted head's tokens only, -inf elsewhere (the feature head's q)
        keep = torch.randperm(vocab, generator=g)[:4096]
        head = torch.full_like(x, float("-inf"))
        head[:, keep] = x[:, keep]
        x = head
    elif kind == "narrow":  # logits close together: ties everywhere after rounding
        x = x * 0.02
    return x.to(dtype)


KINDS = ["plain", "ties", "zeros", "negative", "restricted", "narrow"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_chunk_maxima_of_16_bit_chunks_are_the_float32_copys_amax(dtype):
    for seed, kind in enumerate(KINDS):
        chunks = logit_rows(kind, 3, 96 * TOP_K_CHUNK, dtype, seed).view(3, -1, TOP_K_CHUNK)
        got = _chunk_maxima(chunks)
        want = chunks.float().amax(-1)
        assert got.dtype == torch.float32 and torch.equal(got, want), kind  # -0.0 == 0.0: a comparison sees no sign
    # one chunk per case: a non-negative maximum among negatives, all negative, -0 beside negatives, all -inf
    cases = torch.tensor(
        [
            [-3.0, 2.0, -0.0] + [-1.0] * (TOP_K_CHUNK - 3),
            [-3.0, -2.5, -7.0] + [-1e4] * (TOP_K_CHUNK - 3),
            [-3.0, -0.0, -7.0] + [-1.0] * (TOP_K_CHUNK - 3),
            [float("-inf")] * TOP_K_CHUNK,
            [float("-inf")] * (TOP_K_CHUNK - 1) + [-5.0],
            [1e-40, 0.0] + [-1.0] * (TOP_K_CHUNK - 2),  # a subnormal (in bfloat16; 0 in float16)
            [float("inf"), 3.0] + [float("-inf")] * (TOP_K_CHUNK - 2),
        ]
    ).to(dtype)[None]
    assert torch.equal(_chunk_maxima(cases), cases.float().amax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_chunk_maxima_of_wider_floats_are_their_amax(dtype):
    chunks = logit_rows("ties", 2, 64 * TOP_K_CHUNK, dtype, 1).view(2, -1, TOP_K_CHUNK)
    got = _chunk_maxima(chunks)
    assert got.dtype == dtype and torch.equal(got, chunks.amax(-1))


def test_chunk_ids_are_the_chunks_token_ids():
    ids = _chunk_ids(5)
    assert ids.shape == (5, TOP_K_CHUNK) and torch.equal(ids.flatten(), torch.arange(5 * TOP_K_CHUNK))


@pytest.mark.parametrize("vocab", [49152, 50272], ids=str)  # 50272: padded to a whole chunk
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_top_k_of_equals_the_old_top_k_on_the_float_copy(dtype, vocab):
    tied_kth = 0
    for seed, kind in enumerate(KINDS):
        logits = logit_rows(kind, 5, vocab, dtype, 10 + seed)
        wider = logits if dtype == torch.float64 else logits.float()  # what the old path was given
        for k in (1, 10, 40):
            values, ids = top_k_of(logits, k)
            old_values, old_ids = old_top_k_of(wider, k)
            assert values.dtype == old_values.dtype and torch.equal(values, old_values), (kind, k)
            assert torch.equal(ids, old_ids), (kind, k)  # the same tied ids kept
            tied_kth += int(((wider == old_values[:, -1:]).sum(-1) > 1).sum())
    assert tied_kth > 0, "no row had a tie at the k-th place: the ties were not exercised"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_processing_equals_the_old_computation(dtype):
    """The Dist of every setting, for 1-D, one-row and many-row logits, is the old path's bit for bit."""
    for seed, kind in enumerate(KINDS):
        for shape_rows in (0, 1, 4, 17):  # 0: one [V] row (a chain's draft step)
            logits = logit_rows(kind, max(shape_rows, 1), 49152, dtype, 100 + seed)
            if shape_rows == 0:
                logits = logits[0]
            for setting in SETTINGS:
                got, want = logits_to_dist(logits, *setting), old_logits_to_dist(logits, *setting)
                assert torch.equal(got.ids, want.ids), (kind, shape_rows, setting)
                assert got.probs.dtype == want.probs.dtype and torch.equal(got.probs, want.probs), (kind, setting)
                assert got.vocab == want.vocab


class Outputs(TorchDispatchMode):
    """The (dtype, shape) of every operator's tensor output inside the block."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple) else (out,):
            if isinstance(t, torch.Tensor):
                self.made.append((func.overloadpacket.__name__, t.dtype, tuple(t.shape)))
        return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_logits_are_not_copied_to_float32(dtype):
    """At temperature 1 under top-k nothing vocabulary-wide is written in float32; at another
    temperature the division runs on the float32 copy as before."""
    logits = logit_rows("plain", 4, 49152, dtype, 7)
    with Outputs() as ops:
        logits_to_dist(logits, 1.0, 10, 0.9)
    wide = [m for m in ops.made if m[1] in (torch.float32, torch.float64) and 49152 in m[2]]
    assert not wide, wide
    with Outputs() as ops:
        logits_to_dist(logits, 0.7, 10, 0.9)
    assert any(m[1] == torch.float32 and m[2] == (4, 49152) for m in ops.made)
