"""A token tree drafted by the draft model: nodes in creation (depth-major) order.

Node i has a token, a parent (-1 = the last committed token, the root) and a depth (1..D).
Because nodes are created, and forwarded, depth by depth in this order, node i is also the
i-th tree slot of both KV caches (the draft never forwards the deepest level). A chain copied by
prompt lookup (`add_copied`) comes after every drawn node: the target forwards it with the rest,
the draft never does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mtad.decoding.kv import CachedModel
from mtad.decoding.logits import Dist, sample, sample_distinct


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    q_node: dict[int, Dist] = field(default_factory=dict)  # node (-1 = root) -> q over its children [k]
    leaves: set[int] = field(default_factory=set)  # nodes drafting stopped at (adaptive drafting)
    # node -> its child copied by prompt lookup (q: a point mass), tried before the drawn children
    copied: dict[int, int] = field(default_factory=dict)
    # draw-order positions of the root's drawn children that repeat the copied child's token: never
    # added as nodes (refused for sure once the copy is), kept for the multi-draft rule's residuals
    repeats: list[int] = field(default_factory=list)

    def add(self, token: int, parent: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def add_copied(self, tokens: list[int]) -> None:
        """A chain of copied tokens from the root, after every drawn node: the draft never forwards
        it (its slots in the draft's cache would be past the nodes it did forward)."""
        parent = -1
        for token in tokens:
            self.copied[parent] = parent = self.add(token, parent)

    def drawn_children(self, node: int) -> tuple[list[int], list[int | None]]:
        """The children q at `node` drew, in draw order: their tokens and nodes, None for a draw that
        repeated the copied child's token (`repeats`: no node)."""
        kids = [c for c in self.children(node) if c != self.copied.get(node)]
        nodes: list[int | None] = list(kids)
        for at in self.repeats if node < 0 else ():  # ascending: each lands where it was drawn
            nodes.insert(at, None)
        tokens = [self.tokens[c] if c is not None else self.tokens[self.copied[node]] for c in nodes]
        return tokens, nodes

    def path(self, node: int) -> list[int]:
        """Root-to-node list of node indices (empty for the root)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def subtree(self, keep: list[int]) -> DraftTree:
        """The nodes `keep` (ascending, every kept node's parent kept) as a tree of their own, in
        the same depth-major order: node j here is node keep[j] of this tree."""
        index = {node: j for j, node in enumerate(keep)}
        sub = DraftTree()
        for node in keep:
            parent = self.parents[node]
            sub.add(self.tokens[node], -1 if parent < 0 else index[parent])  # KeyError: a parent not kept
        sub.leaves = {index[node] for node in self.leaves if node in index}
        return sub

    def forward_level(self, lm: CachedModel, first: int, probs_fn) -> Dist:
        """One draft forward over nodes[first:] (one tree level); stores q at each of them and
        returns them, [n, k] in node order."""
        nodes = torch.tensor(self.tokens[first:], dtype=torch.long)
        q = probs_fn(lm.extend(nodes[:0], nodes=nodes, parents=self.parents[first:]), lm.support)  # [n, k]
        for i in range(len(q)):
            self.q_node[first + i] = q[i]
        return q


def ends_branch(q: Dist, tokens: torch.Tensor, stop_below: float) -> list[bool]:
    """Per drawn token [n] (from q), whether drafting stops after it: its draft probability q(x) is
    below `stop_below` (adaptive drafting; 0 = never). The rule reads only q at the node the tokens
    were drawn under, so the children of any node stay i.i.d. from q given their number."""
    if not stop_below:
        return [False] * tokens.numel()
    return (q.prob_of(tokens) < stop_below).reshape(-1).tolist()


def most_probable(frontier: list[int], path_q: dict[int, float], count: int) -> list[int]:
    """The `count` nodes of `frontier` of highest path probability (ties: the earlier node), kept in
    frontier order. Path probabilities are the draft's own, so which nodes get children depends on
    nothing the target says: every node's children stay i.i.d. from q given their number."""
    if count >= len(frontier):
        return frontier
    chosen = set(sorted(frontier, key=lambda node: -path_q[node])[: max(count, 0)])
    return [node for node in frontier if node in chosen]


def path_sums(log_x: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor) -> torch.Tensor:
    """[N] each node's sum of log_x [N] along its root-to-node path (log Π over the path), a level
    at a time: nodes come depth-major, so a node's parent is summed before it."""
    out = log_x.clone()
    for depth in range(2, int(depths.max()) + 1 if len(depths) else 0):
        level = (depths == depth).nonzero().flatten()
        out[level] += out[parents[level]]
    return out


def within_budget(log_q_path: torch.Tensor, depths: torch.Tensor, budget: int) -> list[int]:
    """The `budget` nodes of highest draft path probability Π q (ties: the shallower, then the
    earlier node), ascending. A child's Π q never exceeds its parent's (q <= 1), so every kept
    node's parent is kept. Draft probabilities only: which nodes are verified depends on nothing
    the target says."""
    order = sorted(range(len(depths)), key=lambda i: (-float(log_q_path[i]), int(depths[i]), i))
    return sorted(order[:budget])


def sample_children(q: Dist, count: int, replacement: bool, generator: torch.Generator | None) -> list[int]:
    """`count` children of a node drawn from q [k], i.i.d. or without replacement (as many as
    q's support allows)."""
    if replacement:
        rows = Dist(q.ids.expand(count, -1), q.probs.expand(count, -1), q.vocab)
        return sample(rows, generator).tolist()
    return q.ids[sample_distinct(q.probs, count, generator)].tolist()


def target_node_probs(p: Dist, num_fresh: int) -> tuple[Dist, Dist]:
    """Split a target tree forward's processed distributions into p at the root [k] and at each
    node [N, k]."""
    return p[num_fresh - 1], p[num_fresh:]
