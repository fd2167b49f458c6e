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
from mtad.decoding.tree import target_node_probs


class MMTAD(MultiTokenDecoder):
    name = "mmtad"
    params_type = MMTADParams
    params: MMTADParams

    def step(self) -> Step:
        beams = self.draft_beams()
        tree = beams.tree
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p_root, p_nodes = target_node_probs(self.score_probs(logits), fresh.numel())  # [V], [N, V]
        parents = torch.tensor(tree.parents, device=p_root.device)
        p_parent = torch.where((parents < 0)[:, None], p_root[None], p_nodes[parents.clamp_min(0)])  # [N, V]
        logp_token = p_parent[
            torch.arange(len(tree), device=p_parent.device), torch.tensor(tree.tokens, device=p_parent.device)
        ].log()  # [N]
        logq_token = beams.q_token.log()
        log_p_path, log_q_path = logp_token.clone(), logq_token.clone()
        for i, parent in enumerate(tree.parents):  # parents precede children: one pass accumulates paths
            if parent >= 0:
                log_p_path[i] += log_p_path[parent]
                log_q_path[i] += log_q_path[parent]
        depths = torch.tensor(tree.depths, device=log_p_path.device)  # [N], 1..γ
        if self.params.denominator == "best_column":
            log_q_path = best_column_denominator(log_q_path, depths, beams.best_leaf)
        node = mmtad_select(log_p_path, log_q_path, depths, self.params.threshold)
        path = tree.path(node) if node >= 0 else []
        token = self.next_token(p_nodes[node] if node >= 0 else p_root)
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=self.params.gamma, tree_nodes=len(tree))
