"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): lossless."""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import speculative_accept
from mtad.decoding.base import Decoder, Step
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.kv import CachedModel
from mtad.decoding.logits import Dist, sample
from mtad.decoding.lookup import PromptLookup, lookup_chain, point_masses
from mtad.decoding.params import SpSParams
from mtad.decoding.phases import phased
from mtad.decoding.registry import MethodSpec
from mtad.decoding.sampling import Sampling
from mtad.decoding.tree import ends_branch


@phased("drafting")
def draft_chain(
    decoder: Decoder, draft_lm: CachedModel, gamma: int, stop_below: float = 0.0, logits: torch.Tensor | None = None
) -> tuple[torch.Tensor, Dist]:
    """Draw up to γ tokens autoregressively from q; returns tokens [n] and q_1..q_n [n, k].
    n draft calls: the last token is not forwarded (its KV is built next iteration if kept).
    The chain ends early after a token whose q(x) is below `stop_below` (a rule that reads only
    the draft, so acceptance stays exact for any n). `logits` [V]: the draft's logits at the
    chain's first position where a forward already gave them (`copy_then_draft`); else the first
    forward feeds the committed tokens the cache lacks."""
    if logits is None:
        logits = draft_lm.extend(decoder.uncached(draft_lm))[-1]  # [V] (or [n] on draft_lm.support)
    tokens, qs = [], []
    for i in range(gamma):
        q = decoder.probs(logits, draft_lm.support)
        token = sample(q, decoder.generator)
        tokens.append(token)
        qs.append(q)
        if i == gamma - 1 or ends_branch(q, token, stop_below)[0]:
            break
        logits = draft_lm.extend(token[None])[-1]
    return torch.stack(tokens), Dist.stack(qs)


@phased("drafting")
def copy_then_draft(
    decoder: Decoder, lookup: PromptLookup, draft_lm: CachedModel, copied: torch.Tensor, gamma: int, stop_below: float
) -> tuple[torch.Tensor, Dist]:
    """The block where lookup copied `copied` [m] (1 <= m <= γ) and a draft model or head exists:
    the copied tokens (point masses), then the draft's chain up to γ drawn given them; or, where the
    lookup prefers the model (`PromptLookup.prefers_model`, read from q at the block's first
    position), the draft's chain alone. A model reads the copied tokens in its first forward (the
    row before them is that q), a feature head one per forward (past the target's features each
    reads the feature the forward before predicted)."""
    vocab, m = decoder.target.config.vocab_size, copied.numel()
    gated = lookup.model_above is not None
    if m == gamma and not gated:
        return copied, point_masses(copied, vocab)  # nothing left for the draft: no draft call
    fed, start = decoder.uncached(draft_lm), draft_lm.committed  # [f]
    with_copy = m < gamma and not reads_target_features(draft_lm.model)
    rows = draft_lm.extend(torch.cat([fed, copied]) if with_copy else fed)  # [f (+ m), V]
    first = rows[fed.numel() - 1]  # [V]: q at the block's first position, given the context alone
    if lookup.prefers_model(decoder, first, draft_lm.support):  # exact: the choice reads q, never a drawn token
        if with_copy:
            draft_lm.crop(start + fed.numel())  # the copied tokens' slots go
        return draft_chain(decoder, draft_lm, gamma, stop_below, logits=first)
    if m == gamma:
        return copied, point_masses(copied, vocab)
    logits = rows[-1]
    for token in copied if not with_copy else ():
        logits = draft_lm.extend(token[None])[-1]
    drawn, q = draft_chain(decoder, draft_lm, gamma - m, stop_below, logits=logits)  # [n], [n, k]
    copied_q = point_masses(copied, q.vocab, width=q.ids.shape[-1])  # [m, k]: stackable with q
    probs = torch.cat([copied_q.probs.to(q.probs.dtype), q.probs])  # [m + n, k]
    return torch.cat([copied, drawn]), Dist(torch.cat([copied_q.ids, q.ids]), probs, q.vocab)


class SpeculativeSampling(Decoder):
    spec = MethodSpec(
        name="sps",
        label="SpS",
        order=10,
        color="#1f77b4",
        marker="s",
        settings=SpSParams,
        lossless=True,
        drafts="chain",
        test_settings={"gamma": 3},
        exactness_settings=({"gamma": 2},),
        adaptive_stop=0.3,
    )
    params: SpSParams
    supports_lookup = True

    def propose(self) -> tuple[torch.Tensor, Dist]:
        """The block's draft tokens [γ'] and the q each was drawn from [γ', k]: the lookup's copied
        tokens (point masses) first, where lookup finds a match; then the draft model's chain up to
        γ (its q given the copied tokens), where there is a draft model (`copy_then_draft`); none
        without either."""
        gamma, stop_below = self.params.gamma, self.params.stop_below
        if self.lookup is None:
            return draft_chain(self, self.draft_lm, gamma, stop_below)
        copied = lookup_chain(self, self.lookup, gamma)  # [m]
        if self.draft_lm is None:
            return copied, point_masses(copied, self.target.config.vocab_size)
        if copied.numel() == 0:
            return draft_chain(self, self.draft_lm, gamma, stop_below)
        return copy_then_draft(self, self.lookup, self.draft_lm, copied, gamma, stop_below)

    def verify(self, p: Dist, q: Dist, draft: torch.Tensor) -> tuple[int, int]:
        """The chain's verification over p [γ'+1, k] and q [γ', k]: (accepted count, next token).
        SpS's is token by token (`speculative_accept`); `blockverify` verifies the chain as one block."""
        return speculative_accept(p, q, draft, self.generator)

    def step(self) -> Step:
        base = self.length  # committed tokens; both caches end up holding base + accepted
        draft, q = self.propose()  # [γ'], [γ', k]
        gamma = draft.numel()  # γ' <= γ: fewer where the draft stopped on its own confidence or lookup copied less
        if gamma == 0:  # lookup alone found nothing to copy: one token from p, nothing drafted
            return Sampling.step(self)
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(torch.cat([fresh, draft]))[-(gamma + 1) :]  # [γ+1, V]
        n, token = self.verify(self.probs(logits), q, draft)
        # keep the pending token and the accepted drafts; x_{n+1}.. and the bonus are not cached
        self.target_lm.crop(base + n)
        if self.draft_lm is not None:  # absent when lookup drafts alone
            self.draft_lm.crop(min(base + n, self.draft_lm.committed))
        return Step(emitted=draft[:n].tolist() + [token], accepted=n, drafted=gamma)
