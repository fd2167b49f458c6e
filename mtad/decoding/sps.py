"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): lossless."""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import speculative_accept
from mtad.decoding.base import Decoder, Step
from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.kv import CachedModel
from mtad.decoding.logits import Dist, sample
from mtad.decoding.lookup import lookup_chain, point_masses
from mtad.decoding.params import SpSParams
from mtad.decoding.phases import phased
from mtad.decoding.sampling import Sampling
from mtad.decoding.tree import ends_branch
from mtad.methods import MethodSpec


@phased("drafting")
def draft_chain(
    decoder: Decoder, draft_lm: CachedModel, gamma: int, stop_below: float = 0.0, after: torch.Tensor | None = None
) -> tuple[torch.Tensor, Dist]:
    """Draw up to γ tokens autoregressively from q; returns tokens [n] and q_1..q_n [n, k].
    n draft calls: the last token is not forwarded (its KV is built next iteration if kept).
    The chain ends early after a token whose q(x) is below `stop_below` (a rule that reads only
    the draft, so acceptance stays exact for any n). `after` [m]: tokens already drafted (copied by
    lookup) that the chain continues; a model reads them in its first forward, a feature head one
    per forward (past the target's features each reads the feature the forward before predicted)."""
    fed = decoder.uncached(draft_lm)
    if after is not None and not reads_target_features(draft_lm.model):
        fed, after = torch.cat([fed, after]), None
    logits = draft_lm.extend(fed)[-1]  # [V]
    for token in after if after is not None else ():
        logits = draft_lm.extend(token[None])[-1]
    tokens, qs = [], []
    for i in range(gamma):
        q = decoder.probs(logits)
        token = sample(q, decoder.generator)
        tokens.append(token)
        qs.append(q)
        if i == gamma - 1 or ends_branch(q, token, stop_below)[0]:
            break
        logits = draft_lm.extend(token[None])[-1]
    return torch.stack(tokens), Dist.stack(qs)


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
        adaptive_stop=0.3,
    )
    params: SpSParams
    supports_lookup = True

    def propose(self) -> tuple[torch.Tensor, Dist]:
        """The block's draft tokens [γ'] and the q each was drawn from [γ', k]: the lookup's copied
        tokens (point masses) first, where lookup finds a match; then the draft model's chain up to
        γ (its q given the copied tokens), where there is a draft model; none without either."""
        gamma, stop_below = self.params.gamma, self.params.stop_below
        if self.lookup is None:
            return draft_chain(self, self.draft_lm, gamma, stop_below)
        copied = lookup_chain(self, self.lookup, gamma)  # [m]
        if self.draft_lm is None or copied.numel() == gamma:
            return copied, point_masses(copied, self.target.config.vocab_size)
        if copied.numel() == 0:
            return draft_chain(self, self.draft_lm, gamma, stop_below)
        drawn, q = draft_chain(self, self.draft_lm, gamma - copied.numel(), stop_below, after=copied)  # [n], [n, k]
        copied_q = point_masses(copied, q.vocab, width=q.ids.shape[-1])  # [m, k]: stackable with q
        probs = torch.cat([copied_q.probs.to(q.probs.dtype), q.probs])  # [m + n, k]
        return torch.cat([copied, drawn]), Dist(torch.cat([copied_q.ids, q.ids]), probs, q.vocab)

    def step(self) -> Step:
        base = self.length  # committed tokens; both caches end up holding base + accepted
        draft, q = self.propose()  # [γ'], [γ', k]
        gamma = draft.numel()  # γ' <= γ: fewer where the draft stopped on its own confidence or lookup copied less
        if gamma == 0:  # lookup alone found nothing to copy: one token from p, nothing drafted
            return Sampling.step(self)
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(torch.cat([fresh, draft]))[-(gamma + 1) :]  # [γ+1, V]
        n, token = speculative_accept(self.probs(logits), q, draft, self.generator)
        # keep the pending token and the accepted drafts; x_{n+1}.. and the bonus are not cached
        self.target_lm.crop(base + n)
        if self.draft_lm is not None:  # absent when lookup drafts alone
            self.draft_lm.crop(min(base + n, self.draft_lm.committed))
        return Step(emitted=draft[:n].tolist() + [token], accepted=n, drafted=gamma)
