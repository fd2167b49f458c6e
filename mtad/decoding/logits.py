"""Turning logits into the *processed* distributions p and q (temperature -> top-k -> top-p).

Every method applies the same processing to the target (p) and the draft (q), so the
acceptance rules compare like with like. Temperature 0 means greedy: the processed
distribution is the one-hot of the argmax, which turns every lossless rule into its
greedy variant (accept iff the draft token is the argmax; the residual is the argmax).

The decoders keep a processed distribution on its support (`Dist`): with top-k on, k token ids
and their probabilities instead of a vocabulary-wide row, so sampling, acceptance, beam scoring
and residuals touch k entries, not V. Ids are kept in ascending order, the order of a dense
row: an inverse-CDF draw over the support then adds the same numbers in the same order as over
the dense row (a zero adds nothing), and draws the same token from the same uniform.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from mtad.decoding.phases import phased


@dataclass
class Dist:
    """Processed distribution(s) on their support: `ids` [..., k] ascending token ids, `probs`
    [..., k] their probabilities (zeros allowed: top-p's cut tokens stay in the top-k support),
    over a vocabulary of `vocab` tokens. Dense when no top-k applies (ids = 0..V-1)."""

    ids: torch.Tensor
    probs: torch.Tensor
    vocab: int

    @classmethod
    def dense_of(cls, probs: torch.Tensor) -> Dist:
        """A dense [..., V] row as a Dist over every token."""
        ids = torch.arange(probs.shape[-1], device=probs.device).expand(probs.shape)
        return cls(ids, probs, probs.shape[-1])

    @classmethod
    def stack(cls, rows: list[Dist]) -> Dist:
        return cls(torch.stack([r.ids for r in rows]), torch.stack([r.probs for r in rows]), rows[0].vocab)

    def __getitem__(self, index) -> Dist:
        return Dist(self.ids[index], self.probs[index], self.vocab)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def dense(self) -> torch.Tensor:
        """[..., V]"""
        shape = (*self.probs.shape[:-1], self.vocab)
        return torch.zeros(shape, dtype=self.probs.dtype, device=self.probs.device).scatter(-1, self.ids, self.probs)

    def prob_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """Probability of `tokens` [...] under each row [..., k] (0 off the support). [...]"""
        hit = self.ids == tokens[..., None]  # at most one True per row
        return torch.where(hit, self.probs, torch.zeros((), dtype=self.probs.dtype, device=self.probs.device)).sum(-1)


def as_dist(p: Dist | torch.Tensor) -> Dist:
    """A Dist, or a dense [..., V] probability tensor taken as one."""
    return p if isinstance(p, Dist) else Dist.dense_of(p)


@dataclass(frozen=True)
class Support:
    """The tokens a model's logits cover when they are not the whole vocabulary: `ids` [n]
    ascending (a restricted draft head's), of a vocabulary of `vocab`; -inf logits elsewhere."""

    ids: torch.Tensor
    vocab: int

    def expand(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., n] -> [..., V] logits, -inf off the support."""
        full = logits.new_full((*logits.shape[:-1], self.vocab), float("-inf"))
        full[..., self.ids] = logits
        return full


@phased("process")
def logits_to_dist(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, support: Support | None = None
) -> Dist:
    """[..., V] logits -> the processed distribution on its support: k ids (top-k), 1 (greedy) or V.

    Everything is computed in float32. Under top-k at temperature 1, 16-bit logits (a bf16 model's)
    are read as they are, without a float32 copy of the vocabulary: `top_k_of` finds on them the k
    values and ids it finds on the copy and returns the values in float32, so the Dist is the same.

    `support`: `logits` are [..., n] over `support.ids`, -inf elsewhere (a restricted draft head's).
    Greedy and top-k (k < n) then run on the n columns alone, an n/V share of the work: every token
    off the support has logit -inf, so it is neither an argmax nor among the top k; the survivors'
    ids map through the ascending support, which keeps them ascending. Other settings expand first."""
    if support is not None:
        if temperature == 0 or 0 < top_k < logits.shape[-1]:
            found = logits_to_dist(logits, temperature, top_k, top_p)  # on the support's columns
            return Dist(support.ids[found.ids], found.probs, support.vocab)
        logits = support.expand(logits)
    vocab = logits.shape[-1]
    if 0 < top_k < vocab and temperature == 1.0:  # x / 1 is x: the paper's temperature divides nothing
        # work on the k survivors only: top-p then needs a sort of k values, not of V
        values, index = top_k_of(logits if logits.dtype in HALF_FLOATS else logits.float(), top_k)  # [..., k]
        return _survivors(values, index, top_p, vocab)
    logits = logits.float()
    if temperature == 0:
        ids = logits.argmax(-1, keepdim=True)  # [..., 1]
        return Dist(ids, torch.ones(ids.shape, dtype=torch.float32, device=logits.device), vocab)
    if temperature != 1.0:
        logits = logits / temperature
    if 0 < top_k < vocab:
        return _survivors(*top_k_of(logits, top_k), top_p, vocab)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, _top_p_filter(sorted_logits, top_p))
    return Dist.dense_of(logits.softmax(-1))


def _survivors(values: torch.Tensor, index: torch.Tensor, top_p: float, vocab: int) -> Dist:
    """Top-k's survivors (float32 `values` [..., k] sorted descending and their ids) -> top-p, then
    their probabilities, on ascending ids."""
    kept = _top_p_filter(values, top_p).softmax(-1)  # [..., k]
    ids, order = index.sort(-1)  # ascending ids: a dense row's order
    return Dist(ids, kept.gather(-1, order), vocab)


TOP_K_CHUNK = 64  # the two-stage top-k's chunk: 64 floats, one cache line pair per maximum
HALF_FLOATS = (torch.bfloat16, torch.float16)  # read by top_k_of as they are, without a float32 copy


def top_k_of(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest of [..., V] logits and their ids, sorted descending, as torch.topk.

    On a CPU torch.topk over a 49,152-wide row costs ~160 µs; in two stages it is ~4x less: the
    maximum of every chunk of 64, the k chunks with the largest maxima (the k largest values lie
    in them: a chunk outside holds nothing above its own maximum, which k chunk maxima beat),
    then the top k of those k·64 values. Among values tied at the k-th place either may be kept,
    as with torch.topk.

    bfloat16 or float16 logits give the float32 values and the ids that their float32 copy gives,
    without the copy: both selections run on float32 tensors holding the same values as the
    copy's (the chunk maxima from `_chunk_maxima`, the k chunks gathered, then cast), so the
    same comparisons keep the same ids."""
    vocab = logits.shape[-1]
    if logits.device.type != "cpu" or vocab < 16 * k * TOP_K_CHUNK:
        return torch.topk(logits.float() if logits.dtype in HALF_FLOATS else logits, k, dim=-1)
    lead = logits.shape[:-1]
    rows = logits.reshape(-1, vocab)  # [R, V]
    pad = -vocab % TOP_K_CHUNK
    if pad:
        rows = torch.nn.functional.pad(rows, (0, pad), value=float("-inf"))
    chunks = rows.view(rows.shape[0], -1, TOP_K_CHUNK)  # [R, C, 64]
    best = _chunk_maxima(chunks).topk(k, dim=-1).indices  # [R, k] chunks holding the top k
    candidates = chunks.gather(1, best[..., None].expand(-1, -1, TOP_K_CHUNK)).flatten(1)  # [R, k*64]
    if candidates.dtype in HALF_FLOATS:
        candidates = candidates.float()
    values, at = candidates.topk(k, dim=-1)  # [R, k]
    ids = _chunk_ids(chunks.shape[1]).index_select(0, best.flatten()).view_as(candidates).gather(1, at)
    return values.reshape(*lead, k), ids.reshape(*lead, k)


@functools.lru_cache(maxsize=8)
def _chunk_ids(num_chunks: int) -> torch.Tensor:
    """[C, 64] the token ids of each chunk (the two-stage top-k runs on a CPU)."""
    return torch.arange(num_chunks * TOP_K_CHUNK).view(num_chunks, TOP_K_CHUNK)


def _chunk_maxima(chunks: torch.Tensor) -> torch.Tensor:
    """[R, C, 64] -> [R, C] the maximum of each chunk, float32 for 16-bit chunks.

    A 16-bit float is read through its bits as an int16 (sign bit, then the magnitude), with two
    integer reductions instead of a float32 copy of the row: in a chunk holding a value whose sign
    bit is clear, the float maximum is the largest int16 (non-negative floats order as their
    bits); in a chunk where every sign bit is set, it is the negative value of least magnitude,
    the smallest int16. The maximum comes back exactly, as the float32 copy's amax gives it, but
    for the sign of a zero maximum, which no comparison sees. (Not for logits holding a NaN:
    amax returns any NaN, this only one whose sign bit is clear.)"""
    if chunks.dtype not in HALF_FLOATS:
        return chunks.amax(-1)
    bits = chunks.view(torch.int16)
    high = bits.amax(-1)  # [R, C]
    return torch.where(high.signbit(), bits.amin(-1), high).view(chunks.dtype).float()


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature, top-k, top-p."""
    return logits_to_dist(logits, temperature, top_k, top_p).dense()


def _top_p_filter(sorted_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (-inf) the tail of descending-sorted logits outside the top-p nucleus."""
    if top_p >= 1.0:
        return sorted_logits
    sorted_probs = sorted_logits.softmax(-1)
    # drop a token once the mass *before* it already reaches top_p: keeps the smallest
    # prefix with mass >= top_p, and always the most likely token.
    drop = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
    return sorted_logits.masked_fill(drop, float("-inf"))


@phased("sample")
def sample(probs: Dist | torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of a Dist or of [..., V] probabilities; returns [...] long on their
    device.

    Inverse-CDF sampling: one cumulative sum and a binary search per row, with a uniform from
    `generator`. (torch.multinomial costs ~2 ms per call over 49152 tokens on a CPU.) A token
    of zero probability adds no width to the CDF, so it can never be drawn."""
    if isinstance(probs, Dist):
        return probs.ids.gather(-1, _draw_index(probs.probs, generator)[..., None])[..., 0]
    return _draw_index(probs, generator)


def _draw_index(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of [..., n] non-negative weights, in proportion to them. [...]"""
    flat = weights.reshape(-1, weights.shape[-1]).double()  # [R, n]
    cdf = flat.cumsum(-1)  # [R, n]
    u = uniform(flat.shape[0], generator, weights.device).double()[:, None] * cdf[:, -1:]  # [R, 1]
    index = torch.searchsorted(cdf, u, right=True).clamp_max(flat.shape[-1] - 1)  # [R, 1]
    return index.reshape(weights.shape[:-1])


@phased("sample")
def sample_distinct(weights: torch.Tensor, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """`count` distinct indices drawn one after another, each in proportion to the remaining
    non-negative `weights` [n] (as torch.multinomial without replacement; fewer if fewer are
    non-zero). Gumbel-top-k on the non-zero entries only: one pass instead of a multinomial
    over all n (n = W x 49152 for beam sampling)."""
    support = weights.nonzero().flatten()  # [S]
    count = min(count, support.numel())
    u = uniform(support.numel(), generator, weights.device).clamp_min(1e-20)
    keys = weights[support].double().log() - (-u.double().log()).log()  # log w + Gumbel(0, 1)
    return support[torch.topk(keys, count).indices]


def uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """n draws from U[0, 1) taken from `generator` (on its own device), returned on `device`."""
    gen_device = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=gen_device).to(device)
