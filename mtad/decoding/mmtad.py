"""MMTAD: MTAD with every beam node verified at once by tree attention.

P(path) is the product of target probabilities along a node's root-to-node path; a node
passes when P(path)/Q > τ. Accept the deepest passing depth, and there the node with the
highest P(path); then one token from p at that node. Q is either

- ``denominator: best_column`` (default, as the official implementation runs it): at each depth
  the draft probability Q(path) of the node in the column (beam slot) of the best final beam,
  the same for every node of that depth. Beams are re-drawn at every step, so that node is in
  general not an ancestor of the best final beam;
- ``denominator: node``: each node's own Q(path), the joint ratio of that candidate.
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import best_column_denominator, mmtad_select
from mtad.decoding.base import Step
from mtad.decoding.mtad import MultiTokenDecoder
from mtad.decoding.params import MMTADParams
from mtad.decoding.phases import phase


class MMTAD(MultiTokenDecoder):
    name = "mmtad"
    params_type = MMTADParams
    params: MMTADParams

    def step(self) -> Step:
        beams = self.draft_beams()
        tree = beams.tree
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p = self.score_probs(logits)  # [F+N, k]: row F-1 is the root, row F+i node i
        num_fresh = fresh.numel()
        device = p.ids.device
        parents = torch.tensor(tree.parents, device=device)  # [N]
        depths = torch.tensor(tree.depths, device=device)  # [N], 1..γ
        parent_row = torch.where(parents < 0, num_fresh - 1, num_fresh + parents)  # [N] p each token was drawn under
        log_p_path = p[parent_row].prob_of(torch.tensor(tree.tokens, device=device)).log()  # [N] log p(token | parent)
        log_q_path = beams.q_token.log()
        with phase("accept"):
            for depth in range(2, int(depths.max()) + 1):  # parents sit one depth up: a level at a time
                level = (depths == depth).nonzero().flatten()
                log_p_path[level] += log_p_path[parents[level]]
                log_q_path[level] += log_q_path[parents[level]]
        if self.params.denominator == "best_column":
            log_q_path = best_column_denominator(log_q_path, depths, beams.best_leaf)
        node = mmtad_select(log_p_path, log_q_path, depths, self.params.threshold)
        path = tree.path(node) if node >= 0 else []
        token = self.next_token(p[num_fresh + node] if node >= 0 else p[num_fresh - 1])
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=max(tree.depths), tree_nodes=len(tree))
