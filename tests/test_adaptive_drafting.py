"""Adaptive drafting (`stop_below`, mtad/decoding/params.py AdaptiveFields): off by default and then
token-identical to fixed drafting; on, it drafts fewer tokens where the draft is unsure, on every
decode path and with both draft kinds. Exactness with it on: tests/test_decoding_exact.py."""

import pytest
import torch

from mtad.decoding import get_decoder
from mtad.decoding.registry import specs
from mtad.models.check_cases import TOKEN_PROMPT, TOKEN_VOCAB
from mtad.models.tiny import BUILDERS, tiny_head

TOKEN_PARAMS = {m: dict(s.test_settings) for m, s in specs().items()}  # each method's small settings

PROMPT = torch.tensor([TOKEN_PROMPT])
VOCAB = TOKEN_VOCAB
ADAPTIVE_METHODS = [m for m, s in specs().items() if "stop_below" in s.settings.names()]  # every drafting method
PAIRS = [("llama", "eager", "model"), ("llama", "static", "head"), ("opt", "eager", "model")]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: "-".join(p))
def pair(request):
    arch, path, kind = request.param
    target = BUILDERS[arch](0, VOCAB, sharpness=2.0)
    draft = tiny_head(target, 1, sharpness=2.0) if kind == "head" else BUILDERS[arch](1, VOCAB, sharpness=2.0)
    return target, draft, path


def generate(method, pair, seed=0, n=24, **params):
    target, draft, path = pair
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **{**TOKEN_PARAMS[method], **params})
    return decoder.generate(PROMPT, max_new_tokens=n, generator=torch.Generator().manual_seed(seed))


def depth(method: str) -> int:
    params = TOKEN_PARAMS[method]
    return len(params["k_config"]) if method == "specinfer" else params["gamma"]


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_a_threshold_no_draft_probability_falls_below_changes_no_token(pair, method):
    """The stop rule's own reads (q of each drawn token, the beams' joint q) draw nothing: a
    threshold below every probability gives fixed drafting's tokens and counts."""
    for seed in range(3):
        fixed, tiny = generate(method, pair, seed), generate(method, pair, seed, stop_below=1e-12)
        assert tiny.tokens == fixed.tokens
        assert (tiny.stats.drafted, tiny.stats.tree_nodes) == (fixed.stats.drafted, fixed.stats.tree_nodes)


@pytest.mark.parametrize("method", ADAPTIVE_METHODS)
def test_an_unsure_draft_stops_early(pair, method):
    """A threshold above most of the draft's probabilities ends blocks before their fixed depth:
    fewer tokens drafted per block, and fewer tree nodes verified for the tree methods."""
    fixed = [generate(method, pair, seed) for seed in range(3)]
    adaptive = [
        generate(method, pair, seed, stop_below=0.5 if method in ("mtad", "mmtad") else 0.3) for seed in range(3)
    ]
    per_block = [
        sum(o.stats.drafted for o in outs) / sum(o.stats.target_calls for o in outs) for outs in (fixed, adaptive)
    ]
    assert per_block[0] == pytest.approx(depth(method), rel=0.35)  # fixed: the full depth (bar the last block)
    assert per_block[1] < per_block[0]
    if method in ("spectr", "specinfer", "mmtad"):
        assert sum(o.stats.tree_nodes for o in adaptive) < sum(o.stats.tree_nodes for o in fixed)
    assert all(len(o.tokens) == 24 for o in adaptive)


def test_the_setting_is_refused_outside_its_range():
    target = BUILDERS["llama"](0, VOCAB)
    for bad in (-0.1, 1.0, "high"):
        with pytest.raises(ValueError, match="stop_below must be in"):
            get_decoder("sps", target=target, draft=target, stop_below=bad)


def test_a_node_budget_grows_the_most_probable_branches_and_a_roomy_one_changes_nothing(pair):
    """SpecInfer's node budget (EAGLE-2's dynamic tree): a budget the whole tree fits in gives the
    fixed tree's tokens; a smaller one verifies at most that many nodes per block, fewer in all."""
    k_config = TOKEN_PARAMS["specinfer"]["k_config"]
    nodes, width = 0, 1
    for k in k_config:
        width *= k
        nodes += width
    for seed in range(3):
        fixed, roomy = generate("specinfer", pair, seed), generate("specinfer", pair, seed, node_budget=nodes)
        assert roomy.tokens == fixed.tokens and roomy.stats.tree_nodes == fixed.stats.tree_nodes
    budget = k_config[0] + k_config[1]  # the root's children and one of them expanded
    small = [generate("specinfer", pair, seed, node_budget=budget) for seed in range(3)]
    fixed = [generate("specinfer", pair, seed) for seed in range(3)]
    assert all(o.stats.tree_nodes <= budget * o.stats.target_calls for o in small)
    assert sum(o.stats.tree_nodes for o in small) < sum(o.stats.tree_nodes for o in fixed)
    assert all(len(o.tokens) == 24 for o in small)


def test_a_node_budget_below_the_roots_children_is_refused():
    target = BUILDERS["llama"](0, VOCAB)
    with pytest.raises(ValueError, match="node_budget must be 0"):
        get_decoder("specinfer", target=target, draft=target, k_config=(4, 2), node_budget=3)


def test_mmtads_node_budget_verifies_its_most_probable_beam_nodes_and_a_roomy_one_changes_nothing(pair):
    """MMTAD's node budget: at most that many beam nodes verified per block (fewer in all), the
    same tokens when every beam node fits, and a budget below zero refused."""
    params = TOKEN_PARAMS["mmtad"]
    every = params["gamma"] * params["beam_width"]
    for seed in range(3):
        fixed, roomy = generate("mmtad", pair, seed), generate("mmtad", pair, seed, node_budget=every)
        assert roomy.tokens == fixed.tokens and roomy.stats.tree_nodes == fixed.stats.tree_nodes
    small = [generate("mmtad", pair, seed, node_budget=3) for seed in range(3)]
    fixed = [generate("mmtad", pair, seed) for seed in range(3)]
    assert all(o.stats.tree_nodes <= 3 * o.stats.target_calls for o in small)
    assert sum(o.stats.tree_nodes for o in small) < sum(o.stats.tree_nodes for o in fixed)
    assert all(len(o.tokens) == 24 for o in small)
    with pytest.raises(ValueError, match="node_budget must be 0"):
        generate("mmtad", pair, node_budget=-1)


def test_the_budget_keeps_the_most_probable_paths_with_their_ancestors():
    """`within_budget` keeps the nodes of highest Π q, every kept node's parent among them, and a
    subtree renumbers them in order with their parents remapped."""
    from mtad.decoding.tree import DraftTree, path_sums, within_budget

    tree = DraftTree()
    for token, parent in [(5, -1), (6, -1), (7, 0), (8, 0), (9, 1), (10, 2), (11, 3), (12, 4)]:
        tree.add(token, parent)
    q = torch.tensor([0.6, 0.4, 0.9, 0.1, 1.0, 0.5, 1.0, 0.2])  # q of each token under its parent
    parents, depths = torch.tensor(tree.parents), torch.tensor(tree.depths)
    log_q_path = path_sums(q.log(), parents, depths)
    assert torch.allclose(log_q_path.exp(), torch.tensor([0.6, 0.4, 0.54, 0.06, 0.4, 0.27, 0.06, 0.08]))
    keep = within_budget(log_q_path, depths, 5)
    assert keep == [0, 1, 2, 4, 5]  # 0.6, 0.54, 0.4 (depth 1 before its child's tie), 0.4, 0.27
    assert all(tree.parents[n] < 0 or tree.parents[n] in keep for n in keep)
    sub = tree.subtree(keep)
    assert sub.tokens == [5, 6, 7, 9, 10] and sub.parents == [-1, -1, 0, 1, 2] and sub.depths == [1, 1, 2, 2, 3]
    assert sub.path(4) == [0, 2, 4]
