"""Beam sampling with the draft model: MTAD's and MMTAD's shared drafting stage.

Step 1 draws W tokens from q_1 with weights ∝ q_1(x). Step s scores every (beam i, token v)
pair by w_i · q_s(v | beam i), draws W pairs in proportion to that score (or takes the top W
at temperature 0: beam search) and renormalises the chosen scores into the new weights
(``weighting="proportional"``). The official implementation instead applies a log-softmax to the
chosen scores, which are probabilities, so its weights are ∝ exp(w_i · q_s(v)): nearly uniform,
every surviving beam weighs about 1/W whatever its probability (``weighting="official_softmax"``).
Every beam of every step is a node of a tree (W per depth, parent = the beam it extended),
so each step's W beams are scored by one draft forward with tree attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mtad.decoding.kv import CachedModel
from mtad.decoding.logits import Dist, sample, sample_distinct
from mtad.decoding.phases import phased
from mtad.decoding.tree import DraftTree


@dataclass
class BeamTree:
    tree: DraftTree  # all W·γ beam nodes
    q_token: torch.Tensor  # [N] raw draft probability q_j(x_j) of each node's token (not the beam weight)
    best_leaf: int  # the final beam with the largest weight


def chosen_weights(scores: torch.Tensor, weighting: str) -> torch.Tensor:
    """[W] the new beam weights from the chosen pairs' scores w_i · q(v) [W]."""
    if weighting == "official_softmax":
        return scores.softmax(0)  # exp(score) / Σ exp(score): a score of 0.3 weighs 1.35, one of 0.01 weighs 1.01
    return scores / scores.sum()


@phased("drafting")
def beam_sample(
    lm: CachedModel,
    fresh: torch.Tensor,
    gamma: int,
    width: int,
    probs_fn,
    greedy: bool,
    replacement: bool,
    generator: torch.Generator | None,
    weighting: str = "proportional",
    stop_below: float = 0.0,
) -> BeamTree:
    """Run up to γ steps of beam sampling from the draft; one draft forward per step but the
    last (the deepest level is not forwarded). `fresh` are the committed tokens the draft cache
    lacks. With `stop_below`, drafting ends after the step where the most probable beam's joint
    draft probability Π q falls below it: the block's γ follows the draft's confidence."""
    tree = DraftTree()
    q: Dist = probs_fn(lm.extend(fresh)[-1:], lm.support)  # [B=1, k] next-token q per beam
    frontier, weights = [-1], torch.ones(1, device=q.probs.device)
    log_joint = torch.zeros(1, device=q.probs.device)  # [B] log Π q of each beam
    q_token: list[torch.Tensor] = []
    for step in range(1, gamma + 1):
        # [B*k] w_i · q_s(v | beam i), beam-major with ascending ids: a dense [B*V] row's order
        # on its support, so a draw over it picks the pair the dense row would
        scores = (weights[:, None] * q.probs).flatten()
        if greedy:
            chosen = torch.topk(scores, min(width, int((scores > 0).sum()))).indices
        elif replacement:
            chosen = sample(scores.expand(width, -1), generator)  # [W] i.i.d. pairs
        else:
            chosen = sample_distinct(scores, width, generator)
        beam, token = chosen // q.probs.shape[-1], q.ids.flatten()[chosen]  # [W], [W]
        weights = chosen_weights(scores[chosen], weighting)
        q_token.append(q.probs.flatten()[chosen])
        first = len(tree)
        for b, t in zip(beam.tolist(), token.tolist()):
            tree.add(t, frontier[b])
        frontier = list(range(first, len(tree)))
        if stop_below:
            log_joint = log_joint[beam] + q_token[-1].log()  # [W]
            if float(log_joint.max()) < math.log(stop_below):
                break
        if step < gamma:
            q = tree.forward_level(lm, first, probs_fn)  # [W, k]: the frontier's q, in frontier order
    best_leaf = frontier[int(weights.argmax())]
    return BeamTree(tree=tree, q_token=torch.cat(q_token), best_leaf=best_leaf)
