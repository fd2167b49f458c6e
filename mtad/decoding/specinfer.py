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
from mtad.decoding.tree import DraftTree, ends_branch, most_probable, sample_children, target_node_probs
from mtad.methods import MethodSpec


class SpecInfer(Decoder):
    spec = MethodSpec(
        name="specinfer",
        label="SpecInfer",
        order=30,
        color="#9467bd",
        marker="v",
        settings=SpecInferParams,
        lossless=True,
        drafts="tree",
        test_settings={"k_config": (3, 2, 1)},
        bench_settings={"k_config": (2, 2, 1, 1)},  # lighter than the default (4, 2, 2)
        adaptive_stop=0.3,
    )
    params: SpecInferParams

    @phased("drafting")
    def draft_tree(self) -> DraftTree:
        """Depth by depth: children of every frontier node from q, one draft forward per depth.
        A node whose token's q is below `stop_below` leaves the frontier: it gets no children.
        With `node_budget`, a level's children go to the frontier nodes of highest path
        probability first, as many as the budget leaves room for (EAGLE-2's dynamic tree)."""
        p = self.params
        tree = DraftTree()
        tree.q_node[-1] = self.probs(self.draft_lm.extend(self.uncached(self.draft_lm))[-1])
        frontier, path_q = [-1], {-1: 1.0}  # path_q: node -> Π q along its path (read with a budget only)
        for depth, width in enumerate(p.k_config, start=1):
            if p.node_budget:
                room = (p.node_budget - len(tree)) // width
                frontier = most_probable(frontier, path_q, room)
            first = len(tree)
            for node in frontier:
                q = tree.q_node[node]
                tokens = sample_children(q, width, p.replacement, self.generator)
                drawn = torch.tensor(tokens, device=q.ids.device)
                ends = ends_branch(q, drawn, p.stop_below)
                child_q = q.prob_of(drawn).reshape(-1).tolist() if p.node_budget else [0.0] * len(tokens)
                for token, end, q_token in zip(tokens, ends, child_q):
                    child = tree.add(token, node)
                    path_q[child] = path_q[node] * q_token
                    if end:
                        tree.leaves.add(child)
            frontier = [node for node in range(first, len(tree)) if node not in tree.leaves]
            if not frontier or depth == len(p.k_config):
                break
            if p.node_budget and len(tree) + p.k_config[depth] > p.node_budget:
                break  # no room for one more node's children: the level's draft forward is not needed
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
