"""Which distribution does a decoder sample? Exact enumeration against seeded draws, on tiny vocabularies.

With a vocabulary of a few tokens every continuation of n tokens can be enumerated, so the
distribution a method *should* produce is known exactly:

- ``sequence_probs``: token by token from the processed target p (what sampling produces, and
  what the lossless methods SpS, SpecTr and SpecInfer must reproduce);
- ``mtad.decoding.mtjd_exact.exact_block_distribution``: exact multi-token joint decoding,
  truncation applied to whole blocks (what MTAD approximates).

``empirical_counts`` runs a decoder ``runs`` times with seeds 0..runs-1 and counts its first n
tokens; the tests of counts against an exact distribution (chi-square, its power, total
variation, the noise floor) are in ``mtad.stats.goodness_of_fit``. Sequences are indexed in
``itertools.product`` order, i.e. index = Σ_j x_j · V^(n−1−j), the order of ``exact_block_distribution``'s blocks.
"""

from __future__ import annotations

import itertools

import torch

from mtad.decoding.logits import logits_to_probs
from mtad.generation import build_decoder


@torch.no_grad()
def sequence_probs(target, prompt: torch.Tensor, n_tokens: int, processing: dict) -> torch.Tensor:
    """[V^n] float64: probability of each n-token continuation of ``prompt`` [1, L] when every
    token is drawn from the processed target distribution given the tokens before it."""
    vocab = target.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=n_tokens)))  # [V^n, n]
    inputs = torch.cat([prompt.expand(len(seqs), -1), seqs], 1)  # [V^n, L+n]
    logits = target(input_ids=inputs).logits  # [V^n, L+n, V]
    start = prompt.shape[1] - 1  # the position predicting the first new token
    probs = torch.ones(len(seqs), dtype=torch.float64)
    for j in range(n_tokens):
        p = logits_to_probs(logits[:, start + j], **processing).double()  # [V^n, V]
        probs *= p[torch.arange(len(seqs)), seqs[:, j]]
    return probs


def sequence_index(tokens, vocab: int) -> int:
    index = 0
    for token in tokens:
        index = index * vocab + int(token)
    return index


def empirical_counts(
    method: str,
    target,
    draft,
    params: dict,
    prompt: torch.Tensor,
    n_tokens: int,
    runs: int,
    decode_path: str | None = None,
) -> torch.Tensor:
    """[V^n] counts of the first ``n_tokens`` over ``runs`` generations with seeds 0..runs-1
    (``decode_path``: the decoders' forward path, None for their default)."""
    vocab = target.config.vocab_size
    counts = torch.zeros(vocab**n_tokens, dtype=torch.float64)
    decoder = build_decoder(method, target, draft, decode_path, params)
    for seed in range(runs):
        out = decoder.generate(prompt, max_new_tokens=n_tokens, generator=torch.Generator().manual_seed(seed))
        counts[sequence_index(out.tokens[:n_tokens], vocab)] += 1
    return counts
