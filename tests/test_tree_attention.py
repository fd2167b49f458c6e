"""Tree attention and cache rollback through the public forward of Llama and OPT."""

import pytest
import torch

from mtad.decoding.static_kv import cached_model, resolve_decode_path
from mtad.models.tiny import BUILDERS

# (arch, decode path): the eager DynamicCache for both, the static cache where the model has a lean forward
# (compiled cases are slow: torch.compile takes tens of seconds per shape on a small CPU)
CASES = [
    pytest.param(arch, path, marks=[pytest.mark.slow] if path == "compiled" else [])
    for arch in BUILDERS
    for path in ("eager", "static", "compiled")
    if path == "eager" or resolve_decode_path(path, BUILDERS[arch](0, vocab=4)) == path
]


def make_lm(model, path):
    return cached_model(model, None, path)


PREFIX = torch.tensor([3, 7, 1, 9, 4])
# a tree hanging under the last prefix token: node -> parent (-1 = root), built in two levels
LEVEL1 = ([5, 2, 5], [-1, -1, -1])
LEVEL2 = ([8, 8, 1, 6], [0, 0, 1, 2])


def path_tokens(tokens, parents, node):
    out = []
    while node >= 0:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


@pytest.mark.parametrize("arch,path", CASES)
def test_every_tree_node_matches_its_path_run_alone(arch, path):
    model = BUILDERS[arch](0, vocab=12)
    lm = make_lm(model, path)
    lm.prefill(PREFIX[:-1])
    # level 1 together with the pending committed token, level 2 in a second call (as drafts do)
    out1 = lm.extend(PREFIX[-1:], nodes=torch.tensor(LEVEL1[0]), parents=LEVEL1[1])  # [1+3, V]
    out2 = lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL2[0]), parents=LEVEL2[1])  # [4, V]
    tokens, parents = LEVEL1[0] + LEVEL2[0], LEVEL1[1] + LEVEL2[1]
    node_logits = torch.cat([out1[1:], out2])
    with torch.no_grad():
        root_alone = model(input_ids=PREFIX[None]).logits[0, -1]
        assert torch.allclose(out1[0], root_alone, atol=1e-10)
        for node in range(len(tokens)):
            alone = model(input_ids=torch.cat([PREFIX, torch.tensor(path_tokens(tokens, parents, node))])[None]).logits[
                0, -1
            ]
            assert torch.allclose(node_logits[node], alone, atol=1e-10), f"{arch}: node {node} differs from its path"


@pytest.mark.parametrize("arch,path", CASES)
def test_commit_path_keeps_exactly_the_path(arch, path):
    model = BUILDERS[arch](1, vocab=12)
    lm = make_lm(model, path)
    lm.prefill(PREFIX[:-1])
    lm.extend(PREFIX[-1:], nodes=torch.tensor(LEVEL1[0]), parents=LEVEL1[1])
    lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL2[0]), parents=LEVEL2[1])
    lm.commit_path([1, 5])  # node 1 (token 2) then node 5 (token 1)
    assert lm.committed == lm.seq_length() == PREFIX.numel() + 2 and lm.num_nodes == 0
    nxt = lm.extend(torch.tensor([11]))[-1]
    with torch.no_grad():
        alone = model(input_ids=torch.cat([PREFIX, torch.tensor([2, 1, 11])])[None]).logits[0, -1]
    assert torch.allclose(nxt, alone, atol=1e-10)
    lm.crop(3)
    assert lm.seq_length() == 3
    with torch.no_grad():
        again = model(input_ids=torch.cat([PREFIX[:3], torch.tensor([6])])[None]).logits[0, -1]
    assert torch.allclose(lm.extend(torch.tensor([6]))[-1], again, atol=1e-10)


@pytest.mark.parametrize("path", ["eager", "static"])
def test_chain_cannot_follow_an_uncommitted_tree(path):
    lm = make_lm(BUILDERS["llama"](0, vocab=12), path)
    lm.extend(PREFIX, nodes=torch.tensor([1]), parents=[-1])
    with pytest.raises(RuntimeError, match="commit or drop"):
        lm.extend(torch.tensor([2]))
