"""SpecInfer / MCSD tree speculative sampling: a k_config token tree, one target forward.

Lossless: at each node the children are tried in order with min(1, p'/q'), the target
residual p' <- norm(max(0, p' - q')) shrinking after every rejection.
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import multi_draft_accept
from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import sample
from mtad.decoding.params import SpecInferParams
from mtad.decoding.phases import phased
from mtad.decoding.tree import DraftTree, ends_branch, sample_children, target_node_probs


class SpecInfer(Decoder):
    name = "specinfer"
    params_type = SpecInferParams
    params: SpecInferParams

    @phased("drafting")
    def draft_tree(self) -> DraftTree:
        """Depth by depth: children of every frontier node from q, one draft forward per depth.
        A node whose token's q is below `stop_below` leaves the frontier: it gets no children."""
        p = self.params
        tree = DraftTree()
        tree.q_node[-1] = self.probs(self.draft_lm.extend(self.uncached(self.draft_lm))[-1])
        frontier = [-1]
        for depth, width in enumerate(p.k_config, start=1):
            first = len(tree)
            for node in frontier:
                q = tree.q_node[node]
                tokens = sample_children(q, width, p.replacement, self.generator)
                ends = ends_branch(q, torch.tensor(tokens, device=q.ids.device), p.stop_below)
                for token, end in zip(tokens, ends):
                    child = tree.add(token, node)
                    if end:
                        tree.leaves.add(child)
            frontier = [node for node in range(first, len(tree)) if node not in tree.leaves]
            if not frontier:
                break
            if depth < len(p.k_config):
                tree.forward_level(self.draft_lm, first, self.probs)
        return tree

    def step(self) -> Step:
        tree = self.draft_tree()
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p_root, p_nodes = target_node_probs(self.probs(logits), fresh.numel())
        node, path, token = -1, [], None
        while True:
            p = p_root if node < 0 else p_nodes[node]
            children = tree.children(node)
            if not children:  # a leaf: every level accepted, bonus token from p
                token = int(sample(p, self.generator))
                break
            j, p_res = multi_draft_accept(
                p, tree.q_node[node], [tree.tokens[c] for c in children], self.params.replacement, self.generator
            )
            if j < 0:
                token = int(sample(p_res, self.generator))
                break
            node = children[j]
            path.append(node)
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=max(tree.depths), tree_nodes=len(tree))
