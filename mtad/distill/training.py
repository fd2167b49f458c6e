"""Training the draft on the corpus as it grows: batches, one optimiser step, the A/B of losses.

The trainer runs in its own process (one core) beside the producer (`pipeline.produce`,
another core); they share only the on-disk corpus. Batches are balanced over the task
families so that no family's data volume decides what the draft learns.
"""

from __future__ import annotations

import copy
import random

import torch

from ..models.draft import LlamaDraftForCausalLM
from .objectives import get_loss, pair_stats


def full_to_head_index(draft) -> torch.Tensor:
    """[V] map from a vocabulary id to its head column, -1 when the head lacks it (a layer draft
    or a feature head: both carry `head_token_ids`)."""
    if not draft.is_restricted:
        return torch.arange(draft.vocab_size)
    index = torch.full((draft.vocab_size,), -1, dtype=torch.long)
    index[draft.head_token_ids.cpu()] = torch.arange(len(draft.head_token_ids))
    return index


def choose_head_tokens(mass: torch.Tensor, size: int, special_ids: list[int]) -> list[int]:
    """The `size` tokens with most expected target mass plus all special tokens; ties and unseen
    tokens are filled in id order (BPE ids roughly follow merge frequency)."""
    vocab = mass.numel()
    score = mass.double() + torch.linspace(1e-9, 0, vocab, dtype=torch.float64)  # tie-break towards low ids
    chosen = {i for i in special_ids if i is not None and 0 <= i < vocab}
    for i in score.argsort(descending=True).tolist():
        if len(chosen) >= size:
            break
        chosen.add(i)
    return sorted(chosen)


def collate(records: list[dict]) -> tuple:
    """Right-padded ids [B, T], mask [B, T], the answer positions (rows, cols: [N] each) and the
    target's top-K there (ids, log-probs: [N, K])."""
    seqs = [torch.cat([r["prompt_ids"], r["answer_ids"]]).long() for r in records]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    rows, cols = [], []
    for b, (s, r) in enumerate(zip(seqs, records)):
        ids[b, : len(s)] = s
        mask[b, : len(s)] = 1
        P, n = len(r["prompt_ids"]), len(r["answer_ids"])
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(P - 1, P - 1 + n))  # the logits at P-1+j predict answer token j
    return (
        ids,
        mask,
        torch.cat(rows),
        torch.cat(cols),
        torch.cat([r["top_ids"].long() for r in records]),
        torch.cat([r["top_logprobs"] for r in records]),
    )


def draft_head_logprobs(draft, ids, mask, rows, cols) -> torch.Tensor:
    """Draft log q over its head's tokens at the given positions: [N, |head|]."""
    hidden = draft.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state  # [B, T, H]
    return torch.log_softmax(draft.head_logits(hidden[rows, cols]).float(), dim=-1)


def trainable_parameters(draft: LlamaDraftForCausalLM) -> list[torch.nn.Parameter]:
    """Layers, final norm and (restricted) head; the shared embedding stays frozen."""
    draft.model.embed_tokens.weight.requires_grad_(False)
    if not draft.is_restricted:
        draft.lm_head.weight.requires_grad_(False)  # a full head is the target's tied embedding
    return [p for p in draft.parameters() if p.requires_grad]


def make_optimizer(draft, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(trainable_parameters(draft), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)


def train_step(
    draft,
    optimizer,
    batch: tuple,
    head_index: torch.Tensor,
    loss_name: str = "kl_raw",
    autocast_dtype: torch.dtype | None = None,
) -> float:
    """One AdamW step on `batch` (from `collate`); float32 unless `autocast_dtype` (bf16 pays only
    on CPUs with AMX)."""
    ids, mask, rows, cols, top_ids, top_lp = batch
    draft.train()
    with torch.autocast(device_type="cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
        logq = draft_head_logprobs(draft, ids, mask, rows, cols)
    loss = get_loss(loss_name)(logq, top_ids, top_lp, head_index)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in draft.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    draft.eval()
    return float(loss.detach())


def sample_batch(by_family: dict[str, list[dict]], size: int, rng: random.Random) -> list[dict]:
    """`size` records, each from a kind of request drawn uniformly among those present (so that no
    kind's data volume decides what the draft learns)."""
    present = sorted(f for f in by_family if by_family[f])
    return [rng.choice(by_family[rng.choice(present)]) for _ in range(size)]


@torch.no_grad()
def evaluate(draft, heldout: dict[str, list[dict]]) -> dict:
    """Per family: argmax agreement and expected SpS acceptance (T = 1; paper setting) on held-out
    target-sampled answers, p rebuilt from the stored top-K (exact at the paper's setting, where
    top-k 10 lies inside K; at T = 1 the tail beyond K counts as absent, a small underestimate)."""
    out = {}
    for family, records in heldout.items():
        sums, count = {}, 0
        for r in records:
            ids, mask, rows, cols, top_ids, top_lp = collate([r])
            hidden = draft.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            q_logits = draft.expand_logits(draft.head_logits(hidden[rows, cols])).float()  # [n, V]
            p_logits = torch.full_like(q_logits, float("-inf")).scatter(-1, top_ids, top_lp.float())
            for key, val in pair_stats(p_logits, q_logits).items():
                sums[key] = sums.get(key, 0.0) + float(val.sum())
            count += len(rows)
        out[family] = {k: v / max(count, 1) for k, v in sums.items()} | {"positions": count}
    families = [f for f in out if out[f]["positions"]]
    out["mean"] = {
        k: sum(out[f][k] for f in families) / max(len(families), 1)
        for k in ("argmax_agree", "accept_t1", "accept_paper")
    }
    return out


class Arm:
    """One draft under training with its optimiser and loss (the A/B runs several on one stream)."""

    def __init__(self, name: str, draft, lr: float, loss: str):
        self.name, self.draft, self.loss = name, draft, loss
        self.optimizer = make_optimizer(draft, lr)
        self.losses: list[float] = []

    def fork(self, name: str, loss: str, lr: float) -> "Arm":
        return Arm(name, copy.deepcopy(self.draft), lr, loss)
