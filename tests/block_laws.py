"""The exact law of a chain verifier's output, enumerated: for the tests of block verification.

A chain gives the next-token distributions p(· | prefix) and q(· | prefix) over a few tokens
(hand-made ones, or a tiny target and draft after a prompt); a proposer lists every draft a block
can propose after a prefix with its probability and the q it was drawn from (the draft's chain of γ,
shorter where `stop_below` ends it; prompt-lookup copies as point masses, then the draft's chain); a
rule gives, for one proposed draft, the law of the block's emitted tokens from the library's own
quantities (`block_acceptance`, `block_residual`). `output_law` follows the blocks until n tokens
are out, so it is the law a decoder running that rule and that proposer emits.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from mtad.decoding.acceptance import block_acceptance, block_residual, block_weights
from mtad.decoding.logits import Dist, as_dist, logits_to_probs, sample
from mtad.decoding.lookup import ngram_continuation

Proposal = tuple[tuple, float, torch.Tensor]  # a draft, its probability, q at its positions [γ', V]


class Chain:
    """Hand-made next-token distributions p(· | prefix) and q(· | prefix), each row drawn from a
    generator seeded by (seed, p or q, prefix), so a row does not depend on which rows were read
    before it: softmax of normal logits times `sharpness`; a third of the rows lose one token."""

    def __init__(self, seed: int, vocab: int = 3, sharpness: float = 2.0):
        self.seed, self.vocab, self.sharpness, self.rows = seed, vocab, sharpness, {}

    def row(self, which: str, prefix: tuple) -> torch.Tensor:
        if (which, prefix) not in self.rows:
            key = self.seed
            for part in ("pq".index(which), *prefix):
                key = key * (self.vocab + 2) + part + 1
            gen = torch.Generator().manual_seed(key)
            logits = torch.randn(self.vocab, generator=gen, dtype=torch.float64) * self.sharpness
            if float(torch.rand(1, generator=gen)) < 1 / 3:
                logits[int(torch.randint(self.vocab, (1,), generator=gen))] = float("-inf")
            self.rows[which, prefix] = logits.softmax(-1)  # [V]
        return self.rows[which, prefix]

    def p(self, prefix: tuple) -> torch.Tensor:
        return self.row("p", prefix)

    def q(self, prefix: tuple) -> torch.Tensor:
        return self.row("q", prefix)


class PointMasses(Chain):
    """A chain whose draft copies: q(· | prefix) is a point mass on a token fixed per prefix."""

    def q(self, prefix: tuple) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(hash(prefix) % self.vocab), self.vocab).double()


class ContextFree(Chain):
    """The same p and q after every prefix (the block verification paper's example)."""

    def __init__(self, p: list[float], q: list[float]):
        super().__init__(0, len(p))
        self.p_row, self.q_row = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)

    def p(self, prefix: tuple) -> torch.Tensor:
        return self.p_row

    def q(self, prefix: tuple) -> torch.Tensor:
        return self.q_row


class ModelChain(Chain):
    """A tiny target and draft after a prompt: p and q processed as the decoders process them."""

    def __init__(self, target, draft, prompt: list[int], processing: dict):
        super().__init__(0, target.config.vocab_size)
        self.models, self.prompt, self.processing = {"p": target, "q": draft}, prompt, processing

    @torch.no_grad()
    def row(self, which: str, prefix: tuple) -> torch.Tensor:
        if (which, prefix) not in self.rows:
            logits = self.models[which](input_ids=torch.tensor([self.prompt + list(prefix)])).logits[0, -1]
            row = logits_to_probs(logits, **self.processing).double()  # float32 probabilities
            self.rows[which, prefix] = row / row.sum()  # summing to 1 in float64, as the identities need
        return self.rows[which, prefix]


def model_drafts(chain: Chain, gamma: int, stop_below: float = 0.0) -> Callable[[tuple], list[Proposal]]:
    """The draft's chains after a prefix: γ tokens from q, fewer where a token's q is below
    `stop_below` (SpS's adaptive drafting), each with its probability and q rows."""

    def propose(prefix: tuple) -> list[Proposal]:
        found = []

        def grow(draft: tuple, prob: float) -> None:
            last_q = float(chain.q(prefix + draft[:-1])[draft[-1]]) if draft else 1.0
            if len(draft) == gamma or last_q < stop_below:
                found.append((draft, prob, torch.stack([chain.q(prefix + draft[:i]) for i in range(len(draft))])))
                return
            q = chain.q(prefix + draft)
            for token in range(chain.vocab):
                if q[token] > 0:
                    grow(draft + (token,), prob * float(q[token]))

        grow((), 1.0)
        return found

    return propose


def lookup_drafts(chain: ModelChain, gamma: int, with_model: bool) -> Callable[[tuple], list[Proposal]]:
    """Prompt lookup (n-grams of 3 down to 1) after a prefix: the copied tokens, point masses, then,
    `with_model`, the draft's chain up to γ; nothing (a plain target step) where nothing recurs."""

    def propose(prefix: tuple) -> list[Proposal]:
        context = torch.tensor(chain.prompt + list(prefix))
        copied = tuple(ngram_continuation(context, gamma, 3, 1).tolist())
        masses = torch.eye(chain.vocab, dtype=torch.float64)[list(copied)]  # [m, V]
        if not with_model or len(copied) == gamma:
            return [(copied, 1.0, masses)]
        rest = model_drafts(chain, gamma - len(copied))(prefix + copied)
        return [(copied + draft, prob, torch.cat([masses, q])) for draft, prob, q in rest]

    return propose


def largest_passing(h: list[float]) -> list[float]:
    """P(τ = i) for i = 0..γ when τ is the largest i with η_i < h_i (independent uniforms)."""
    probs, none_above = [0.0] * (len(h) + 1), 1.0
    for i in range(len(h), 0, -1):
        probs[i], none_above = none_above * h[i - 1], none_above * (1 - h[i - 1])
    probs[0] = none_above
    return probs


def block_lengths(p: Dist, q: Dist, draft: torch.Tensor) -> list[float]:
    """P(τ = i) for i = 0..γ under block verification: the largest i with η_i < h_i."""
    return largest_passing(block_acceptance(p, q, draft)[1].tolist())


def weight_lengths(p: Dist, q: Dist, draft: torch.Tensor) -> list[float]:
    """P(τ = i) for i = 0..γ when the weights are read as acceptance probabilities (h_i = p_i): wrong."""
    return largest_passing(block_acceptance(p, q, draft)[0].tolist())


def token_lengths(p: Dist, q: Dist, draft: torch.Tensor) -> list[float]:
    """P(n = i) for i = 0..γ under SpS: x_i kept with min(1, p/q) until the first refusal."""
    keep = (p[: len(draft)].prob_of(draft) / q.prob_of(draft)).clamp_max(1).tolist()
    probs, alive = [], 1.0
    for k in keep:
        probs.append(alive * (1 - k))
        alive *= k
    return probs + [alive]


def outcomes(
    lengths: list[float], p: Dist, q: Dist, draft: torch.Tensor, scaled: bool, bonus: int = 0
) -> dict[tuple, float]:
    """The block's emitted tokens (the kept prefix and the next token) -> probability, given P(τ = i):
    the residual norm(max(w · p − q, 0)) after X^τ with w = p_τ (`scaled`) or 1, p after X^γ (the
    row `bonus` places from it: −1 reads the last draft row, a wiring error)."""
    gamma, law = len(draft), defaultdict(float)
    weights = [1.0] + block_weights(p[:gamma].prob_of(draft), q.prob_of(draft)).tolist()
    for tau, prob in enumerate(lengths):
        if prob <= 0:
            continue
        row = p[gamma + bonus] if tau == gamma else block_residual(p[tau], q[tau], weights[tau] if scaled else 1.0)
        for token, p_token in zip(row.ids.tolist(), row.probs.tolist()):
            law[tuple(draft[:tau].tolist()) + (token,)] += prob * p_token / float(row.probs.sum())
    return law


RULES = {  # name -> (P(τ = i), the residual scaled by p_τ, the bonus row's place after the block)
    "blockverify": (block_lengths, True, 0),
    "sps": (token_lengths, False, 0),
    "block acceptance, residual without p_τ": (block_lengths, False, 0),
    "token-wise acceptance, block residual": (token_lengths, True, 0),
    "weights as acceptance probabilities": (weight_lengths, True, 0),
    "bonus from the last draft row": (block_lengths, True, -1),
}
WRONG = [name for name in RULES if name not in ("blockverify", "sps")]  # known wrong rules


def output_law(rule: str, chain: Chain, propose: Callable[[tuple], list[Proposal]], n_tokens: int) -> torch.Tensor:
    """[V^n] the exact law of the first n tokens when every block takes `propose`'s drafts and runs
    `rule` (sequences in itertools.product order, as `mtad.metrics.exact_enumeration` indexes them)."""
    lengths, scaled, bonus = RULES[rule]
    memo: dict = {}

    def block(prefix: tuple) -> dict[tuple, float]:
        found = defaultdict(float)
        for draft, q_prob, q_rows in propose(prefix):
            if not draft:  # nothing proposed: one token from p
                for token, p_token in enumerate(chain.p(prefix).tolist()):
                    found[(token,)] += q_prob * p_token
                continue
            p = as_dist(torch.stack([chain.p(prefix + draft[:i]) for i in range(len(draft) + 1)]))
            q, tokens = as_dist(q_rows), torch.tensor(draft)
            for emitted, prob in outcomes(lengths(p, q, tokens), p, q, tokens, scaled, bonus).items():
                found[emitted] += q_prob * prob
        return found

    def law(prefix: tuple, n: int) -> dict[tuple, float]:
        if n == 0:
            return {(): 1.0}
        if (prefix, n) not in memo:
            found = defaultdict(float)
            for emitted, prob in block(prefix).items():
                head = emitted[:n]
                for tail, p_tail in law(prefix + head, n - len(head)).items():
                    found[head + tail] += prob * p_tail
            memo[prefix, n] = found
        return memo[prefix, n]

    found = law((), n_tokens)
    sequences = itertools.product(range(chain.vocab), repeat=n_tokens)
    return torch.tensor([found.get(s, 0.0) for s in sequences], dtype=torch.float64)


def target_law(chain: Chain, n_tokens: int) -> torch.Tensor:
    """[V^n] token by token from p."""
    sequences = itertools.product(range(chain.vocab), repeat=n_tokens)
    probs = [float(torch.prod(torch.stack([chain.p(s[:i])[s[i]] for i in range(n_tokens)]))) for s in sequences]
    return torch.tensor(probs, dtype=torch.float64)


def tokenwise_then_block_residual(p: Dist, q: Dist, draft: torch.Tensor, generator: torch.Generator):
    """A known wrong rule, sampled as `block_verify` is: SpS's acceptance (x_i kept with min(1, p/q)
    until the first refusal), then the block residual norm(max(p_n · p − q, 0))."""
    gamma = len(draft)
    keep = torch.rand(gamma, generator=generator, dtype=torch.float64) * q.prob_of(draft) < p[:gamma].prob_of(draft)
    n = int(keep.long().cumprod(0).sum())
    if n == gamma:
        return n, int(sample(p[gamma], generator))
    weights = [1.0] + block_weights(p[:gamma].prob_of(draft), q.prob_of(draft)).tolist()
    return n, int(sample(block_residual(p[n], q[n], weights[n]), generator))
