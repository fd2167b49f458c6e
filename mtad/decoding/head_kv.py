"""A feature head as a draft cache: the CachedModel contract, fed with the target's features.

The head (a draft that reads the target's features: `capabilities.reads_target_features`) at
position i reads the feature of the position before it, f_{i-1}. Where that position has been
scored by the target — every committed slot the target's cache holds — it is the target's own
hidden state(s) at the depths the head reads (`target_depths`), read from the target's
FeatureStore and mapped to the head's width (`reduce`: one linear map for a fused head); past
that (the pending token's successors while drafting, tree nodes) it is the head's own output at
that slot, kept in the head's FeatureStore by the same slot rules as its KV cache. So

- chains (SpS) run γ steps on their own predicted features;
- beams and trees feed each node the predicted feature of its parent node (the pending
  token's for depth 1), one level per forward under the 4-D tree mask;
- after verification the head keeps only the committed slots whose inputs were the target's
  features (`exact`) and drops the rest: the accepted tokens are fed again on the next
  forward with the target's features of the positions just verified. Acceptance rules do not
  change: q is whatever the head proposed.
"""

from __future__ import annotations

import torch

from mtad.decoding.capabilities import reads_target_features
from mtad.decoding.kernels import choose as choose_kernels
from mtad.decoding.kv import CachedModel, FeatureStore
from mtad.decoding.logits import Support
from mtad.decoding.masks import step_mask
from mtad.decoding.static_kv import BUCKETS, CAPACITY_STEP, StaticCachedModel, StaticKV, cached_model, run_layers


class HeadCachedModel(StaticCachedModel):
    """The head's static KV cache and lean forward, uncompiled on every decode path (the target's
    path still applies to the target), over `source`, the target's CachedModel (built with
    features=True)."""

    def __init__(
        self, head: torch.nn.Module, source: CachedModel, out_device: torch.device | None = None, min_capacity: int = 0
    ):
        if source.features is None:
            raise ValueError("a feature head needs the target's features: build the target's cache with features=True")
        capacity = max(CAPACITY_STEP, -(-(min_capacity + BUCKETS[-1]) // CAPACITY_STEP) * CAPACITY_STEP)
        CachedModel.__init__(self, head, out_device, features=False, cache=StaticKV(head, capacity))
        self.features = FeatureStore(head.config.hidden_size, head.dtype, self.device)  # its own predictions
        self.compiled = None
        self.kernels = choose_kernels(head)
        self.source = source
        self.exact = 0  # leading committed slots whose input feature was the target's
        self._rows: torch.Tensor | None = None  # input features of the forward being run [n, H]
        if head.head_token_ids is not None:  # a restricted head's logits stay on its tokens: q is processed there
            self.support = Support(head.head_token_ids.to(self.out_device), head.vocab_size)

    # -- which feature each new row reads
    @torch.no_grad()
    def _features_at(self, first: int, n: int) -> torch.Tensor:
        """g at committed positions first .. first + n - 1, [n, H]: zeros before the sequence, the
        target's (reduced to the head's width) where the target scored it, else the head's own."""
        own_buf, scored_end = self.features.buf, self.source.committed
        if first + n - 1 >= max(self.committed, scored_end):
            raise RuntimeError(
                f"feature head: no feature for position {first + n - 1} yet (cache holds {self.committed})"
            )
        out = own_buf.new_zeros(n, own_buf.shape[1])
        lo, hi = max(first, 0), min(first + n, scored_end)  # the target's positions: one slice
        if hi > lo:
            rows = self.source.features.buf[lo:hi].to(own_buf.device)
            out[lo - first : hi - first] = self.model.model.reduce(rows.to(self.model.dtype)).to(own_buf.dtype)
        if first + n > max(scored_end, first):  # past the target's: the head's own outputs
            own_lo = max(scored_end, first)
            out[own_lo - first :] = own_buf[own_lo : first + n]
        return out

    def extend(
        self,
        tokens: torch.Tensor,
        nodes: torch.Tensor | None = None,
        parents: list[int] | None = None,
        keep_last: int = 0,
    ) -> torch.Tensor:
        if tokens.numel() and nodes is not None and nodes.numel():
            self.extend(tokens)  # a row's input is the previous row's output: chain first, then the tree
            return self.extend(tokens[:0], nodes, parents, keep_last)
        c = self.committed
        if nodes is None or nodes.numel() == 0:
            # past the target's features a chain is drafted one token at a time (_features_at raises)
            self._rows = self._features_at(c - 1, tokens.numel())
            exact = [c + r - 1 < self.source.committed for r in range(tokens.numel())]
        else:
            cached = self.num_nodes
            if any(p >= cached for p in parents):
                raise RuntimeError("feature head: a tree node's parent must be forwarded before it")
            pending = self._features_at(c - 1, 1)[0]
            self._rows = torch.stack([pending if p < 0 else self.features.buf[c + p] for p in parents])
            exact = []
        out = super().extend(tokens, nodes, parents, keep_last)
        for r, ok in enumerate(exact):
            if ok and self.exact == c + r:
                self.exact += 1
        return out

    @torch.no_grad()
    def _model_logits(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None, keep_last: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        kv, head = self.cache, self.model
        n, start = input_ids.numel(), kv.length
        kv.grow(start + n)
        mask = step_mask(allowed, start, n, self.device)
        x = head.model.fuse(input_ids[None].to(self.device), self._rows[None])  # [1, n, H]
        hidden = run_layers(
            head.model,
            x,
            kv.keys,
            kv.values,
            position_ids[None].to(self.device),
            start,  # slots start .. start + n - 1
            mask,
            kv_len=start + n,
        )  # [n, H]: predicted f
        kv.length = start + n
        rows = hidden[-keep_last:] if keep_last else hidden
        logits = head.head_logits(rows)  # [rows, |head|]
        return (logits if self.support is not None else head.expand_logits(logits)), hidden

    # -- after verification: keep only what was computed from the target's features
    def crop(self, length: int) -> None:
        super().crop(min(length, self.exact))
        self.exact = min(self.exact, self.committed)

    def commit_path(self, path: list[int]) -> None:
        self.crop(self.committed)  # accepted nodes are fed again with the target's features


def draft_cached_model(
    draft, target_lm: CachedModel, out_device: torch.device | None, decode_path: str | None, min_capacity: int = 0
) -> CachedModel:
    """The draft's cache: a feature head reads `target_lm`'s features; any other draft runs on its path."""
    if reads_target_features(draft):
        return HeadCachedModel(draft, target_lm, out_device, min_capacity)
    return cached_model(draft, out_device, decode_path, min_capacity)
