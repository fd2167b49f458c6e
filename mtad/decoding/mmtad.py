"""MMTAD: MTAD with every beam node verified at once by tree attention.

P(path) and Q(path) are products of target and draft probabilities along a node's
root-to-node path; a node passes when P/Q > τ. Accept the deepest passing depth, and there
the node with the highest P(path); then one token from p at that node.
"""
from __future__ import annotations

import torch

from mtad.decoding.acceptance import mmtad_select
from mtad.decoding.base import Step
from mtad.decoding.mtad import MultiTokenDecoder
from mtad.decoding.tree import target_node_probs


class MMTAD(MultiTokenDecoder):
    name = "mmtad"

    def step(self) -> Step:
        beams = self.draft_beams()
        tree = beams.tree
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p_root, p_nodes = target_node_probs(self.score_probs(logits), fresh.numel())  # [V], [N, V]
        parents = torch.tensor(tree.parents, device=p_root.device)
        p_parent = torch.where((parents < 0)[:, None], p_root[None], p_nodes[parents.clamp_min(0)])  # [N, V]
        logp_token = p_parent[torch.arange(len(tree), device=p_parent.device), torch.tensor(tree.tokens, device=p_parent.device)].log()  # [N]
        logq_token = beams.q_token.log()
        log_p_path, log_q_path = logp_token.clone(), logq_token.clone()
        for i, parent in enumerate(tree.parents):  # parents precede children: one pass accumulates paths
            if parent >= 0:
                log_p_path[i] += log_p_path[parent]
                log_q_path[i] += log_q_path[parent]
        node = mmtad_select(log_p_path, log_q_path, torch.tensor(tree.depths, device=log_p_path.device), self.threshold)
        path = tree.path(node) if node >= 0 else []
        token = self.next_token(p_nodes[node] if node >= 0 else p_root)
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=self.gamma, tree_nodes=len(tree))
