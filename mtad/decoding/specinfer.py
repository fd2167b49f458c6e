"""SpecInfer / MCSD tree speculative sampling: a k_config token tree, one target forward.

Lossless: at each node the children are tried in order with min(1, p'/q'), the target
residual p' <- norm(max(0, p' - q')) shrinking after every rejection. With a prompt-lookup draft
the copied chain is one more branch from the root, tried first against its own point-mass q
(`try_children`).
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import multi_draft_accept
from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import Dist, sample
from mtad.decoding.lookup import lookup_chain, point_masses
from mtad.decoding.params import SpecInferParams
from mtad.decoding.phases import phased
from mtad.decoding.registry import MethodSpec
from mtad.decoding.sampling import Sampling
from mtad.decoding.tree import DraftTree, ends_branch, most_probable, sample_children, target_node_probs


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
        exactness_settings=({"k_config": (3, 2), "replacement": True}, {"k_config": (3, 2), "replacement": False}),
        adaptive_stop=0.3,
    )
    params: SpecInferParams
    supports_lookup = True

    @phased("drafting")
    def draft_tree(self) -> DraftTree:
        """The draft model's tree (`grow`) and, with a lookup draft, the copied chain as one more
        branch from the root (`DraftTree.add_copied`), as deep as the tree (len(k_config)).
        The copy comes first within `node_budget` (its path probability Π q = 1 is the highest a
        path can have: EAGLE-2's order) and the model's tree gets what is left; where that cannot
        hold the root's children the model is not called (unless the lookup's gate needs its q).
        Where the lookup prefers the model (`PromptLookup.prefers_model`: q at the root, a function
        of the context alone) the copy is dropped."""
        p, tree = self.params, DraftTree()
        copied = lookup_chain(self, self.lookup, len(p.k_config)) if self.lookup is not None else None  # [m]
        copied = copied[: p.node_budget or None] if copied is not None and copied.numel() else None
        if self.draft_lm is not None:
            gated = copied is not None and self.lookup.model_above is not None
            if gated or self.room(copied) >= p.k_config[0]:
                logits = self.draft_lm.extend(self.uncached(self.draft_lm))[-1]  # [V]
                tree.q_node[-1] = self.probs(logits, self.draft_lm.support)
                if gated and self.lookup.prefers_model(self, logits, self.draft_lm.support):
                    copied = None
                if self.room(copied) >= p.k_config[0]:
                    self.grow(tree, self.room(copied) if p.node_budget else 0, copied)
        if copied is not None:
            tree.add_copied(copied.tolist())
        return tree

    def room(self, copied: torch.Tensor | None) -> int:
        """Nodes the draft model's tree may take: `node_budget` less the copy's (unbounded without one)."""
        budget = self.params.node_budget
        return budget - (copied.numel() if copied is not None else 0) if budget else 1 << 30

    def grow(self, tree: DraftTree, budget: int, copied: torch.Tensor | None) -> None:
        """Depth by depth: children of every frontier node from q, one draft forward per depth.
        A node whose token's q is below `stop_below` leaves the frontier: it gets no children.
        With a `budget` (0: none), a level's children go to the frontier nodes of highest path
        probability first, as many as the budget leaves room for (EAGLE-2's dynamic tree). A root
        child drawn equal to the first `copied` token gets no node (`DraftTree.repeats`)."""
        p, copy = self.params, int(copied[0]) if copied is not None else None
        frontier, path_q = [-1], {-1: 1.0}  # path_q: node -> Π q along its path (read with a budget only)
        for depth, width in enumerate(p.k_config, start=1):
            if budget:
                frontier = most_probable(frontier, path_q, (budget - len(tree)) // width)
            first = len(tree)
            for node in frontier:
                q = tree.q_node[node]
                tokens = sample_children(q, width, p.replacement, self.generator)
                drawn = torch.tensor(tokens, device=q.ids.device)
                ends = ends_branch(q, drawn, p.stop_below)
                child_q = q.prob_of(drawn).reshape(-1).tolist() if budget else [0.0] * len(tokens)
                for at, (token, end, q_token) in enumerate(zip(tokens, ends, child_q)):
                    if node < 0 and token == copy:
                        tree.repeats.append(at)
                        continue
                    child = tree.add(token, node)
                    path_q[child] = path_q[node] * q_token
                    if end:
                        tree.leaves.add(child)
            frontier = [node for node in range(first, len(tree)) if node not in tree.leaves]
            if not frontier or depth == len(p.k_config):
                break
            if budget and len(tree) + p.k_config[depth] > budget:
                break  # no room for one more node's children: the level's draft forward is not needed
            tree.forward_level(self.draft_lm, first, self.probs)

    def try_children(self, tree: DraftTree, node: int, p: Dist) -> tuple[int, Dist]:
        """The multi-draft rule at `node`: the child accepted (-1: none) and p', the residual to
        sample from when none is. Children may come from different laws: the copied child (a point
        mass δ_c) is tried first, then the drawn ones (from q at the node) in draw order, starting
        from the residual the copy left. Exact because each step, accept X_i with
        min(1, p_i(X_i)/q_i(X_i)) else go on with p_{i+1} = norm(max(0, p_i − q_i)), is one SpS step
        whose output (X_i kept, or a draw from p_{i+1}) has law p_i; replacing "a draw from p_{i+1}"
        by the rest of the rule keeps that law as long as X_{i+1}.. given X_i's refusal still have
        their laws q_{i+1}.. (Miao et al.'s multi-step rule lets each its own q). A copy is a
        function of the context, so the drawn children do not depend on it nor on its refusal.
        After the copy's refusal p' = p without c, renormalised, so p'(c) = 0 from then on and a
        drawn child equal to c is refused whatever its uniform: it needs no node, only its place in
        the draw order (its residual update, and its removal from q' without replacement)."""
        copied = tree.copied.get(node)
        if copied is not None:
            token = tree.tokens[copied]
            point = point_masses(torch.tensor([token], device=p.ids.device), p.vocab)[0]  # [1]
            j, p = multi_draft_accept(p, point, [token], True, self.generator)
            if j == 0:
                return copied, p
        tokens, nodes = tree.drawn_children(node)
        if not tokens:
            return -1, p
        j, p = multi_draft_accept(p, tree.q_node[node], tokens, self.params.replacement, self.generator)
        return (nodes[j] if j >= 0 else -1), p

    def step(self) -> Step:
        tree = self.draft_tree()
        if not len(tree):  # lookup alone found nothing to copy: one token from p, nothing drafted
            return Sampling.step(self)
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p_root, p_nodes = target_node_probs(self.probs(logits), fresh.numel())
        node, path = -1, []
        while True:
            p = p_root if node < 0 else p_nodes[node]
            if not tree.children(node):  # a leaf: every level accepted, bonus token from p
                token = int(sample(p, self.generator))
                break
            node, p_res = self.try_children(tree, node, p)
            if node < 0:
                token = int(sample(p_res, self.generator))
                break
            path.append(node)
        self.target_lm.commit_path(path)
        if self.draft_lm is not None:  # absent when lookup drafts alone; never forwarded a copied node
            self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=max(tree.depths), tree_nodes=len(tree))
