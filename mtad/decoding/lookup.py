"""Prompt-lookup drafting: drafts that copy a continuation from the context, with no model call.

At each block the longest n-gram (n from `max_ngram` down to `min_ngram`) that ends the context
(prompt + tokens generated so far) and occurred earlier in it is looked up; its most recent
earlier occurrence is followed by up to γ tokens, and those are the draft. Each copied token's
q is a point mass (q = 1 on it, 0 elsewhere): the token is a function of the context alone, so
it is "drawn" from that point mass, and speculative sampling's rule (accept with min(1, p/q),
else a token from norm(max(0, p − q))) keeps the target's law exactly. Where nothing matches,
lookup proposes nothing: the block is a plain target step, or the draft model's chain when the
lookup carries one (`PromptLookup.model`), which also continues a copied chain shorter than γ
(sps.py), or grows its tree beside the copied branch (specinfer.py). With `model_above` the draft
model drafts instead of the copy where its q at the block's first position is confident
(`PromptLookup.prefers_model`). Rules and the methods that take it:
mtad/decoding/README.md, "Drafts that copy".
"""

from __future__ import annotations

import torch

from mtad.decoding.logits import Dist, Support, logits_to_dist
from mtad.decoding.phases import phased


class PromptLookup(torch.nn.Module):
    """A draft that copies n-gram continuations from the context (`draft=` of a method that
    supports it: `Decoder.supports_lookup`). `model`: a draft model or feature head that drafts
    the rest of a block after the copied tokens, all of it where lookup finds nothing (None: such a
    block is one target step). `model_above` (needs `model`; None: off): where the model's top
    probability at the block's first position is at least this, the model drafts the block and the
    copy is dropped (`prefers_model`). A Module so that
    whatever walks a pair's draft (devices, dtypes, eval) reaches the model it carries."""

    def __init__(
        self,
        max_ngram: int = 3,
        min_ngram: int = 1,
        model: torch.nn.Module | None = None,
        model_above: float | None = None,
    ):
        super().__init__()
        check_lookup_settings(max_ngram, min_ngram, model_above, model is not None)
        self.max_ngram, self.min_ngram, self.model_above = max_ngram, min_ngram, model_above
        self.model = model  # registered as a submodule when it is one

    def settings(self) -> dict:
        """What a generation's record names of this draft."""
        return {
            "max_ngram": self.max_ngram,
            "min_ngram": self.min_ngram,
            "with_model": self.model is not None,
            "model_above": self.model_above,
        }

    def extra_repr(self) -> str:
        return f"max_ngram={self.max_ngram}, min_ngram={self.min_ngram}, model_above={self.model_above}"

    def prefers_model(self, decoder, logits: torch.Tensor, support: Support | None = None) -> bool:
        """Whether the draft model drafts the block instead of the copy: its q at the block's first
        position (`logits` [V], processed as `decoder` processes q, at temperature 1 where it is
        greedy: a one-hot q says nothing of confidence) puts at least `model_above` on its top token.
        Exactness: the rule reads q, a function of the committed context alone, never a drawn token,
        so which draft makes the block is fixed by the context and each drafted token is still drawn
        from the q the acceptance reads (a point mass or the model's)."""
        if self.model_above is None:
            return False
        p = decoder.params
        q = logits_to_dist(logits, p.temperature or 1.0, p.top_k, p.top_p, support)
        return float(q.probs.max()) >= self.model_above

    def continuation(self, context: torch.Tensor, gamma: int) -> torch.Tensor:
        """The draft for `context` [L]: up to γ tokens following the most recent earlier occurrence
        of the longest n-gram ending it, [m] with 1 <= m <= γ; [0] where no n-gram recurs."""
        return ngram_continuation(context, gamma, self.max_ngram, self.min_ngram)


def check_lookup_settings(max_ngram, min_ngram, model_above, with_model: bool) -> None:
    """A lookup draft's settings (`PromptLookup`; a pair's `draft:` before anything loads): n-gram
    lengths ints >= 1, min <= max; `model_above` None (off) or a probability in (0, 1] with a draft
    model to prefer. A bad one raises ValueError in one line."""
    for name, value in (("max_ngram", max_ngram), ("min_ngram", min_ngram)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"lookup {name} must be an int >= 1, got {value!r}")
    if min_ngram > max_ngram:
        raise ValueError(f"lookup min_ngram ({min_ngram}) must not exceed max_ngram ({max_ngram})")
    if model_above is None:
        return
    if isinstance(model_above, bool) or not isinstance(model_above, int | float) or not 0 < model_above <= 1:
        raise ValueError(f"lookup model_above must be null (off) or a probability in (0, 1], got {model_above!r}")
    if not with_model:
        raise ValueError("lookup model_above needs a draft model to prefer (draft.model), got none")


def ngram_continuation(context: torch.Tensor, gamma: int, max_ngram: int, min_ngram: int) -> torch.Tensor:
    """See `PromptLookup.continuation`. An occurrence starting at j <= L - n - 1 is earlier than the
    suffix itself, so its continuation context[j + n:] holds at least one token."""
    length = context.numel()
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = context[:-1].unfold(0, n, 1)  # [L - n, n]: every n-gram that starts before the suffix
        hits = (windows == context[-n:]).all(-1).nonzero()  # [h, 1] start positions
        if hits.numel():
            start = int(hits[-1]) + n  # the most recent occurrence's next token
            return context[start : start + gamma]
    return context[:0]


@phased("drafting")
def lookup_chain(decoder, lookup: PromptLookup, gamma: int) -> torch.Tensor:
    """The copied draft for `decoder`'s committed sequence: tokens [m] (m = 0: no match)."""
    return lookup.continuation(decoder.seq[: decoder.length], gamma)


def point_masses(tokens: torch.Tensor, vocab: int, width: int = 1) -> Dist:
    """q_i = 1 on tokens[i], 0 elsewhere, for each of tokens [m]: a Dist [m, width] whose rows
    stack with a draft's q of `width` entries (ascending ids 0..width-2, then the token where
    it is not among 0..width-1; width = vocab gives dense one-hot rows)."""
    ids = torch.arange(width, device=tokens.device).expand(tokens.numel(), width).clone()  # [m, width]
    outside = tokens >= width  # [m]
    ids[outside, -1] = tokens[outside]
    return Dist(ids, (ids == tokens[:, None]).float(), vocab)
