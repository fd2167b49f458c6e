"""SpecTr (Sun et al. 2023) with K-SEQ draft selection over k i.i.d. draft sequences.

The k sequences share prefixes, so they are stored as a trie and scored by the target in
one tree forward. Walking down, the drafts still alive agree with everything accepted; their
next tokens are i.i.d. from q given that prefix, which is exactly K-SEQ's setting.
"""

from __future__ import annotations

import torch

from mtad.decoding.acceptance import kseq_accept
from mtad.decoding.base import Decoder, Step
from mtad.decoding.logits import Dist, sample
from mtad.decoding.params import SpecTrParams
from mtad.decoding.phases import phased
from mtad.decoding.registry import MethodSpec
from mtad.decoding.tree import DraftTree, ends_branch, target_node_probs


class SpecTr(Decoder):
    spec = MethodSpec(
        name="spectr",
        label="SpecTr",
        order=20,
        color="#2ca02c",
        marker="^",
        settings=SpecTrParams,
        lossless=True,
        drafts="chains",
        test_settings={"gamma": 3, "num_drafts": 3},
        exactness_settings=({"gamma": 2, "num_drafts": 3},),
        adaptive_stop=0.2,
    )
    params: SpecTrParams

    @phased("drafting")
    def draft_sequences(self) -> tuple[DraftTree, list[list[int]]]:
        """k sequences of up to γ tokens from q as a trie; returns it and each sequence's nodes.
        A sequence ends after a token whose q is below `stop_below`: a property of the trie node,
        so every sequence through a node goes on or ends with it."""
        p = self.params
        tree = DraftTree()
        tree.q_node[-1] = self.probs(self.draft_lm.extend(self.uncached(self.draft_lm))[-1], self.draft_lm.support)
        at = [-1] * p.num_drafts  # each sequence's current trie node
        paths: list[list[int]] = [[] for _ in range(p.num_drafts)]
        for depth in range(1, p.gamma + 1):
            going = [s for s in range(p.num_drafts) if at[s] not in tree.leaves]
            if not going:
                break
            first = len(tree)
            q = Dist.stack([tree.q_node[at[s]] for s in going])  # [drafts, k], rows i.i.d. per node
            tokens = sample(q, self.generator)  # [drafts]
            low = ends_branch(q, tokens, p.stop_below)
            children: dict[tuple[int, int], int] = {}
            for s, token, stops in zip(going, tokens.tolist(), low):
                key = (at[s], token)
                if key not in children:
                    children[key] = tree.add(token, at[s])
                    if stops:
                        tree.leaves.add(children[key])
                at[s] = children[key]
                paths[s].append(at[s])
            if depth < p.gamma and any(node not in tree.leaves for node in range(first, len(tree))):
                tree.forward_level(self.draft_lm, first, self.probs)
        return tree, paths

    def step(self) -> Step:
        tree, paths = self.draft_sequences()
        fresh = self.uncached(self.target_lm)
        logits = self.target_lm.extend(fresh, nodes=torch.tensor(tree.tokens), parents=tree.parents)
        p_root, p_nodes = target_node_probs(self.probs(logits), fresh.numel())
        gamma = max(len(path) for path in paths)  # γ, or fewer where every sequence stopped early
        alive, node, path, token = list(range(self.params.num_drafts)), -1, [], None
        for depth in range(gamma):
            p = p_root if node < 0 else p_nodes[node]
            if depth == len(paths[alive[0]]):  # the sequences through `node` stopped there: bonus token
                token = int(sample(p, self.generator))
                break
            candidates = [tree.tokens[paths[s][depth]] for s in alive]
            j, p_res = kseq_accept(p, tree.q_node[node], candidates, self.generator)
            if j < 0:
                token = int(sample(p_res, self.generator))
                break
            node = paths[alive[j]][depth]
            path.append(node)
            alive = [s for s in alive if paths[s][depth] == node]
        else:  # all γ levels accepted: bonus token
            token = int(sample(p_nodes[node], self.generator))
        self.target_lm.commit_path(path)
        self.draft_lm.commit_path(path)
        emitted = [tree.tokens[i] for i in path] + [token]
        return Step(emitted=emitted, accepted=len(path), drafted=gamma, tree_nodes=len(tree))
