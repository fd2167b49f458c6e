"""MMTAD: MTAD with every beam node verified at once by tree attention.

P(path) is the product of target probabilities along a node's root-to-node path; a node
passes when P(path)/Q > τ. Accept the deepest passing depth, and there the node with the
highest P(path); then one token from p at that node. Q is either

- ``denominator: best_column`` (default, as the official implementation runs it): at each depth
  the draft probability Q(path) of the node in the column (beam slot) of the best final beam,
  the same for every node of that depth. Beams are re-drawn at every step, so that node is in
  general not an ancestor of the best final beam;
- ``denominator: node``: each node's own Q(path), the joint ratio of that candidate.

With ``node_budget`` N, the target verifies only the N beam nodes of highest draft path
probability Π q (EAGLE-2's dynamic tree, read off the beams): the tree's width follows the
draft's confidence and this machine's verification cost curve (`make bench` names the budget).
The denominators are read on every beam node first, so a kept node's ratio is what it would be
in the whole tree.
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import best_column_denominator, mmtad_select
from mtad.decoding.base import Step
from mtad.decoding.mtad import MultiTokenDecoder
from mtad.decoding.params import MMTADParams
from mtad.decoding.phases import phase
from mtad.decoding.registry import MethodSpec
from mtad.decoding.tree import path_sums, within_budget


class MMTAD(MultiTokenDecoder):
    spec = MethodSpec(
        name="mmtad",
        label="MMTAD",
        order=50,
        color="#ff7f0e",
        marker="P",
        settings=MMTADParams,
        lossless=False,
        drafts="beams",
        test_settings={"gamma": 3, "beam_width": 3},
        adaptive_stop=0.03,
    )
    params: MMTADParams

    def step(self) -> Step:
        beams = self.draft_beams()
        drafted = beams.tree  # every beam node: the draft's cache holds them in this order
        device = beams.q_token.device
        full_depths = torch.tensor(drafted.depths, device=device)  # [N], 1..γ
        with phase("accept"):
            log_q_path = path_sums(beams.q_token.log(), torch.tensor(drafted.parents, device=device), full_depths)
        keep = list(range(len(drafted)))
        if self.params.node_budget and len(drafted) > self.params.node_budget:
            keep = within_budget(log_q_path, full_depths, self.params.node_budget)
        if self.params.denominator == "best_column":  # read on every beam node, before any is left out
            log_q_path = best_column_denominator(log_q_path, full_depths, beams.best_leaf)
        tree = drafted.subtree(keep) if len(keep) < len(drafted) else drafted  # the nodes the target verifies
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p = self.score_probs(logits)  # [F+M, k]: row F-1 is the root, row F+j node j of `tree`
        num_fresh = fresh.numel()
        parents = torch.tensor(tree.parents, device=device)  # [M]
        depths = torch.tensor(tree.depths, device=device)  # [M]
        parent_row = torch.where(parents < 0, num_fresh - 1, num_fresh + parents)  # [M] p each token was drawn under
        log_p = p[parent_row].prob_of(torch.tensor(tree.tokens, device=device)).log()  # [M] log p(token | parent)
        with phase("accept"):
            log_p_path = path_sums(log_p, parents, depths)
        node = mmtad_select(log_p_path, log_q_path[keep], depths, self.params.threshold)
        path = tree.path(node) if node >= 0 else []
        token = self.next_token(p[num_fresh + node] if node >= 0 else p[num_fresh - 1])
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path([keep[j] for j in path])  # the draft's slots are the beam nodes'
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=max(tree.depths), tree_nodes=len(tree))
