"""The feature-head draft kind: the target's features on every decode path, the head's cache
against its teacher-forced unroll (what training optimises), rollback, files and training."""

import pytest
import torch

from mtad.decoding.head_kv import HeadCachedModel
from mtad.decoding.static_kv import cached_model, resolve_decode_path
from mtad.models.head import load_head, read_head_meta, save_head
from mtad.models.tiny import BUILDERS, tiny_head

CASES = [
    pytest.param(arch, path, marks=[pytest.mark.slow] if path == "compiled" else [])
    for arch in BUILDERS
    for path in ("eager", "static", "compiled")
    if path == "eager" or resolve_decode_path(path, BUILDERS[arch](0, vocab=4)) == path
]
PREFIX = torch.tensor([3, 7, 1, 9, 4])
PROMPT_IDS = PREFIX[None]
LEVEL1 = ([5, 2, 5], [-1, -1, -1])  # node -> parent (-1 = the pending token), two levels
LEVEL2 = ([8, 8, 1, 6], [0, 0, 1, 2])
TOKENS, PARENTS = LEVEL1[0] + LEVEL2[0], LEVEL1[1] + LEVEL2[1]


def atol_of(path):
    """Float64 agreement expected on a decode path. The compiled body computes the rotary table's
    cos/sin (float32 in transformers' Llama, whatever the model's dtype) with inductor's own
    vectorised float32 maths, which differs from eager's by an ulp (2.4e-7 measured on an AVX2 CPU):
    far below what a wrong slot or depth would show (order 1)."""
    return 1e-5 if path == "compiled" else 1e-9


def path_of(node):
    out = []
    while node >= 0:
        out.append(node)
        node = PARENTS[node]
    return out[::-1]


# the two designs of `models.head`: one depth on the target's LM head, and fused depths with its own output layer
# the final-depth design reads hidden_states[-1] where the fused one reads hidden_states[L]: the
# same tensor on these small targets, reached by another index on every path
DESIGNS = {
    "one_depth": {},
    "fused": {"fused": True, "own_output": True},
    "fused_final": {"fused": True, "own_output": True, "final": True},
}


def hidden(model, ids, depths=(-1,)):
    """The target's hidden states at `depths` (default: the final one, after the final norm) of a
    chain run alone, side by side. [T, D*H]"""
    with torch.no_grad():
        states = model(input_ids=ids[None], output_hidden_states=True).hidden_states
    return torch.cat([states[d][0] for d in depths], dim=-1)


@pytest.mark.parametrize("depths", [(-1,), (1, 2)], ids=["final", "two_depths"])
@pytest.mark.parametrize("arch,path", CASES)
def test_target_features_follow_the_cache(arch, path, depths):
    """Every slot's features are the hidden states of its path run alone, before and after commit_path."""
    model = BUILDERS[arch](0, vocab=12)
    lm = cached_model(model, None, path, features=depths)
    hidden_of = lambda m, ids: hidden(m, ids, depths)  # noqa: E731
    lm.prefill(PREFIX[:-1])
    lm.extend(PREFIX[-1:], nodes=torch.tensor(LEVEL1[0]), parents=LEVEL1[1])
    lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL2[0]), parents=LEVEL2[1])
    c = PREFIX.numel()
    assert torch.allclose(lm.features.buf[:c], hidden_of(model, PREFIX), atol=atol_of(path))
    for node in range(len(TOKENS)):
        alone = hidden_of(model, torch.cat([PREFIX, torch.tensor([TOKENS[i] for i in path_of(node)])]))[-1]
        assert torch.allclose(lm.features.buf[c + node], alone, atol=atol_of(path)), f"node {node}"
    lm.commit_path([1, 5])
    lm.extend(torch.tensor([11]))
    sequence = torch.cat([PREFIX, torch.tensor([2, 1, 11])])
    assert torch.allclose(lm.features.buf[: sequence.numel()], hidden_of(model, sequence), atol=atol_of(path))
    lm.crop(3)
    lm.extend(torch.tensor([6]))
    assert torch.allclose(
        lm.features.buf[:4], hidden_of(model, torch.cat([PREFIX[:3], torch.tensor([6])])), atol=atol_of(path)
    )


def head_pair(arch, path, **kw):
    target = BUILDERS[arch](0, vocab=12, sharpness=2.0)
    head = tiny_head(target, 1, sharpness=2.0, **kw)
    target_lm = cached_model(target, None, path, features=head.target_depths)
    return target, head, target_lm, HeadCachedModel(head, target_lm)


# two head layers on the uncompiled paths; the compiled target (slow to build) with one
TREE_CASES = [
    pytest.param(*c.values, layers, marks=c.marks)
    for c in CASES
    for layers in (1, 2)
    if layers == 1 or c.values[1] != "compiled"
]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("arch,path,layers", TREE_CASES)
def test_head_tree_nodes_match_the_unroll_training_uses(arch, path, layers, design):
    """A node at depth d is the head's (d+1)-th drafted position: its logits equal
    FeatureHead.unroll(steps=d+1) at that position, so decoding drafts what training trains
    (on every decode path: the target's cache keeps the depths the head reads)."""
    target, head, target_lm, lm = head_pair(arch, path, layers=layers, **DESIGNS[design])
    target_lm.prefill(PREFIX[:-1])  # as Decoder.generate: the target first, the pending token left out
    lm.prefill(PREFIX[:-1])
    root = lm.extend(PREFIX[-1:])[-1]
    out1 = lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL1[0]), parents=LEVEL1[1])
    out2 = lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL2[0]), parents=LEVEL2[1])
    node_logits = torch.cat([out1, out2])

    def unrolled(sequence, steps):
        with torch.no_grad():
            f_hat = head.unroll(sequence[None], hidden(target, sequence, head.target_depths)[None], steps)[-1][0, -1]
        return head.expand_logits(head.head_logits(f_hat))

    assert torch.allclose(root, unrolled(PREFIX, 1), atol=atol_of(path))
    for node in range(len(TOKENS)):
        path_nodes = path_of(node)
        sequence = torch.cat([PREFIX, torch.tensor([TOKENS[i] for i in path_nodes])])
        assert torch.allclose(node_logits[node], unrolled(sequence, len(path_nodes) + 1), atol=atol_of(path)), (
            f"node {node}"
        )


@pytest.mark.parametrize("design", DESIGNS)
def test_head_rollback_feeds_accepted_tokens_again_with_the_target_features(design):
    target, head, target_lm, lm = head_pair("llama", "static", **DESIGNS[design])
    target_lm.prefill(PREFIX[:-1])
    lm.prefill(PREFIX[:-1])
    lm.extend(PREFIX[-1:])
    lm.extend(PREFIX[:0], nodes=torch.tensor(LEVEL1[0]), parents=LEVEL1[1])
    lm.commit_path([1])  # accepted node 1: the head drops it (its input was its own prediction)
    assert lm.committed == lm.exact == PREFIX.numel() and lm.num_nodes == 0
    sequence = torch.cat([PREFIX, torch.tensor([2, 11])])  # accepted token 2, then the bonus 11
    target_lm.extend(sequence[PREFIX.numel() - 1 : -1])  # the target scored the pending token and token 2
    q = lm.extend(sequence[lm.committed :])[-1]
    with torch.no_grad():
        f_hat = head.unroll(sequence[None], hidden(target, sequence, head.target_depths)[None])[0][0]
    assert torch.allclose(lm.features.buf[: sequence.numel()], f_hat, atol=1e-9)
    assert torch.allclose(q, head.expand_logits(head.head_logits(f_hat[-1])), atol=1e-9)
    # a chain past the target's features: drafted one token at a time, then cropped back to `exact`
    lm.extend(torch.tensor([4]))
    assert lm.committed == sequence.numel() + 1 and lm.exact == sequence.numel()
    with pytest.raises(RuntimeError, match="no feature for position"):
        lm.extend(torch.tensor([1, 2]))
    lm.crop(lm.committed)
    assert lm.committed == sequence.numel()


def test_head_needs_the_targets_features_and_parents_first():
    target = BUILDERS["llama"](0, vocab=12)
    head = tiny_head(target, 1)
    with pytest.raises(ValueError, match="features=True"):
        HeadCachedModel(head, cached_model(target, None, "static"))
    _, head, target_lm, lm = head_pair("llama", "eager")
    target_lm.prefill(PREFIX[:-1])
    lm.prefill(PREFIX[:-1])
    lm.extend(PREFIX[-1:])
    with pytest.raises(RuntimeError, match="parent must be forwarded"):
        lm.extend(PREFIX[:0], nodes=torch.tensor([1, 2]), parents=[-1, 0])


def test_head_file_round_trip_keeps_only_its_own_parameters(tmp_path):
    target = BUILDERS["llama"](0, vocab=12)
    head = tiny_head(target, 3, head_token_ids=[0, 2, 5, 7, 11])
    path = save_head(head, tmp_path / "head.safetensors", dtype=torch.float64, extra_meta={"note": "x"})
    meta = read_head_meta(path)
    assert meta["num_layers"] == 1 and meta["head_token_ids"] == [0, 2, 5, 7, 11] and meta["note"] == "x"
    from safetensors.torch import load_file

    saved = load_file(str(path))
    assert not any("embed" in k or "lm_head" in k for k in saved)  # shared with the target, never saved
    again = load_head(path, target, dtype=torch.float64)
    ids, feats = PREFIX[None], hidden(target, PREFIX)[None]
    with torch.no_grad():
        a = head.expand_logits(head.head_logits(head.unroll(ids, feats)[0]))
        b = again.expand_logits(again.head_logits(again.unroll(ids, feats)[0]))
    assert torch.equal(a, b) and torch.isinf(a[..., 1]).all()  # q = 0 off the restricted vocabulary
    assert again.get_input_embeddings() is target.get_input_embeddings()
    with pytest.raises(ValueError, match="not an mtad feature-head file"):
        from safetensors.torch import save_file

        save_file(saved, str(tmp_path / "bare.safetensors"))
        load_head(tmp_path / "bare.safetensors", target)


def test_fused_head_file_keeps_its_output_layer_and_v1_files_still_load(tmp_path):
    """A fused head saves its depth map and its own output layer (never the embedding) and reloads
    to the same q; a file of the first format (no design fields) loads as a one-depth head."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    target = BUILDERS["llama"](0, vocab=12)
    head = tiny_head(target, 3, head_token_ids=[0, 2, 5, 7, 11], fused=True, own_output=True)
    path = save_head(head, tmp_path / "head.safetensors", dtype=torch.float64)
    meta, saved = read_head_meta(path), load_file(str(path))
    assert meta["fused_depths"] == [1, 1, 2] and meta["own_output"] is True
    assert saved["lm_head.weight"].shape == (5, 32) and "model.depths_fc.weight" in saved
    assert not any("embed" in k for k in saved)
    again = load_head(path, target, dtype=torch.float64)
    ids, feats = PREFIX[None], hidden(target, PREFIX, head.target_depths)[None]
    with torch.no_grad():
        a = head.expand_logits(head.head_logits(head.unroll(ids, feats, 2)[-1]))
        b = again.expand_logits(again.head_logits(again.unroll(ids, feats, 2)[-1]))
    assert torch.equal(a, b) and again.target_depths == (1, 1, 2)
    deeper = BUILDERS["llama"](0, vocab=12, layers=6)
    with pytest.raises(ValueError, match="trained on another target"):
        load_head(path, deeper)
    final = tiny_head(target, 3, head_token_ids=[0, 2, 5, 7, 11], fused=True, own_output=True, final=True)
    reloaded = load_head(save_head(final, tmp_path / "final.safetensors", dtype=torch.float64), target)
    assert reloaded.target_depths == (1, 1, -1)  # the final feature as its high depth, kept by the file

    one = tiny_head(target, 4)
    v2 = save_head(one, tmp_path / "one.safetensors", dtype=torch.float64)
    with safe_open(str(v2), framework="pt") as f:
        old = {k: v for k, v in json.loads(f.metadata()["mtad"]).items() if k not in ("fused_depths", "own_output")}
    save_file(
        load_file(str(v2)),
        str(tmp_path / "v1.safetensors"),
        metadata={"mtad": json.dumps(old | {"format": "mtad-head-v1"})},
    )
    v1 = load_head(tmp_path / "v1.safetensors", target, dtype=torch.float64)
    assert v1.fused_depths is None and not v1.own_output and v1.target_depths == (-1,)
    with torch.no_grad():
        feats = hidden(target, PREFIX)[None]
        assert torch.equal(one.unroll(ids, feats)[0], v1.unroll(ids, feats)[0])


def teacher_records(target, n=4, length=14, prompt=6, seed=0):
    """Stored teacher records of random sequences, as the producer writes them (features at every depth)."""
    gen = torch.Generator().manual_seed(seed)
    records = []
    for _ in range(n):
        seq = torch.randint(0, target.config.vocab_size, (length,), generator=gen)
        with torch.no_grad():
            out = target(input_ids=seq[None], output_hidden_states=True)
        top = out.logits[0, prompt - 1 : -1].log_softmax(-1).topk(8)
        records.append(
            {
                "prompt_ids": seq[:prompt].int(),
                "answer_ids": seq[prompt:].int(),
                "top_ids": top.indices.int(),
                "top_logprobs": top.values.float(),
                "features": out.hidden_states[-1][0].float(),
                "depth_features": torch.cat([out.hidden_states[d][0] for d in (1, 1, 2)], -1).float(),
            }
        )
    return records


@pytest.mark.parametrize("design", DESIGNS)
def test_head_training_lowers_the_unrolled_loss(design):
    """A few optimiser steps on one batch of stored teacher records lower every unrolled step's KL
    (the fused head reads the stored depths, with no regression term, and trains its output layer)."""
    from mtad.distill.head_training import HeadTrainConfig, collate_features, feature_key, head_loss
    from mtad.distill.training import full_to_head_index

    target = BUILDERS["llama"](0, vocab=12, sharpness=3.0).float()
    head = tiny_head(target, 1, **DESIGNS[design]).float()
    output_before = head.lm_head.weight.detach().clone() if head.own_output else None
    records = teacher_records(target)
    batch = collate_features(records, max_len=12, key=feature_key(head))  # cuts 2 prompt positions of every record
    assert batch[0].shape == (4, 12) and batch[4].min() == 3
    assert batch[1].shape[-1] == (96 if head.fused_depths else 32) and batch[-1].shape[-1] == 32
    if head.fused_depths:  # the stored depths in order, the final feature where the head reads -1
        high = batch[-1] if head.fused_depths[-1] == -1 else collate_features(records, 12, (2,))[1]
        assert torch.equal(batch[1][..., 64:], high) and not torch.equal(high, collate_features(records, 12, (1,))[1])
    cfg = HeadTrainConfig(workdir="unused", steps=3, noise=0.0, reg_weight=0.0 if head.own_output else 0.1)
    index = full_to_head_index(head)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = head_loss(head, batch, index, cfg)[1]
    for _ in range(60):
        loss, _ = head_loss(head, batch, index, cfg)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    last = head_loss(head, batch, index, cfg)[1]
    assert all(b < 0.7 * a for a, b in zip(first, last)), (first, last)
    assert target.get_input_embeddings().weight.grad is None  # the shared embedding stays frozen
    if output_before is not None:  # its own output layer trains; the target's LM head does not
        assert not torch.equal(head.lm_head.weight, output_before)
        assert target.get_output_embeddings().weight.grad is None


def test_input_noise_scales_with_each_depths_own_rms():
    """Per-depth noise follows each depth's scale (a small depth keeps its signal); "row" noise
    follows the depths together; for one depth the two rules agree; an unknown rule is refused."""
    from mtad.distill.head_training import HeadTrainConfig, input_noise

    scales = torch.tensor([0.5, 5.0, 50.0])  # three depths of very different size, side by side
    features = (torch.randn(2, 64, 3, 16) * scales[:, None]).flatten(-2)  # [B, T, 3*16]

    def amplitude(scale: str, depths: int = 3) -> torch.Tensor:
        cfg = HeadTrainConfig(workdir="unused", noise=0.1, noise_scale=scale)
        noise = input_noise(features, depths, cfg, torch.Generator().manual_seed(0)).unflatten(-1, (3, 16))
        return noise.abs().amax(dim=(0, 1, 3))  # the largest draw per depth: close to 0.1 x its RMS

    per_depth, together = amplitude("depth"), amplitude("row")
    rms = features.unflatten(-1, (3, 16)).pow(2).mean(-1).sqrt()  # [B, T, 3]
    assert torch.allclose(per_depth / rms.amax(dim=(0, 1)), torch.full((3,), 0.1), rtol=0.15)
    assert torch.allclose(together, together[0].expand(3), rtol=0.15)  # one scale for all three
    assert together[0] > 5 * per_depth[0]  # the small depth drowned by the large one's scale
    assert torch.equal(amplitude("depth", depths=1), amplitude("row", depths=1))
    with pytest.raises(ValueError, match="'depth' and 'row'"):
        amplitude("layer")


def eagle1_reference_logits(state, target, ids):
    """EAGLE-1's forward written out (model/cnets1.py), independent of mtad.models.head: fc over
    [embedding; feature of the position before], one Llama layer whose attention input is not
    normed, no final norm, the target's LM head. [T, V]"""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = target.config
    H, heads, kv_heads = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = H // heads
    T = ids.shape[1]
    with torch.no_grad():
        f = hidden(target, ids[0])
        previous = torch.cat([torch.zeros(1, H, dtype=f.dtype), f[:-1]])[None]
        x = torch.cat([target.get_input_embeddings()(ids), previous], -1) @ state["fc.weight"].T + state["fc.bias"]
        q = (x @ state["layers.0.self_attn.q_proj.weight"].T).view(1, T, heads, D).transpose(1, 2)
        k = (x @ state["layers.0.self_attn.k_proj.weight"].T).view(1, T, kv_heads, D).transpose(1, 2)
        v = (x @ state["layers.0.self_attn.v_proj.weight"].T).view(1, T, kv_heads, D).transpose(1, 2)
        cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(T)[None])
        q, k = apply_rotary_pos_emb(q, k, cos.to(x.dtype), sin.to(x.dtype))
        k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
        scores = (q @ k.transpose(-1, -2)) / D**0.5 + torch.full((T, T), float("-inf")).triu(1)
        o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, T, H)
        x = x + o @ state["layers.0.self_attn.o_proj.weight"].T
        h = (
            x
            * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
            * state["layers.0.post_attention_layernorm.weight"]
        )
        mlp = torch.nn.functional.silu(h @ state["layers.0.mlp.gate_proj.weight"].T) * (
            h @ state["layers.0.mlp.up_proj.weight"].T
        )
        x = x + mlp @ state["layers.0.mlp.down_proj.weight"].T
        return target.get_output_embeddings()(x)[0]


def test_a_head_in_eagles_published_format_loads_through_the_head_kind(tmp_path):
    import json

    from mtad.models.pairs import load_draft_model

    target = BUILDERS["llama"](0, vocab=12, sharpness=2.0)
    cfg = target.config
    H, inner, kv = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads),
    )
    gen = torch.Generator().manual_seed(3)
    shapes = {
        "fc.weight": (H, 2 * H),
        "fc.bias": (H,),
        "layers.0.self_attn.q_proj.weight": (H, H),
        "layers.0.self_attn.k_proj.weight": (kv, H),
        "layers.0.self_attn.v_proj.weight": (kv, H),
        "layers.0.self_attn.o_proj.weight": (H, H),
        "layers.0.mlp.gate_proj.weight": (inner, H),
        "layers.0.mlp.up_proj.weight": (inner, H),
        "layers.0.mlp.down_proj.weight": (H, inner),
        "layers.0.post_attention_layernorm.weight": (H,),
    }
    state = {k: 0.3 * torch.randn(s, generator=gen, dtype=torch.float64) for k, s in shapes.items()}
    state["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()  # EAGLE ships it; unused
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict() | {"num_hidden_layers": 1}))
    head, _ = load_draft_model(
        {"draft": {"source": "head", "format": "eagle", "id": str(tmp_path)}, "draft_dtype": "float32"},
        target,
        dtype="float32",
    )
    head = head.double()
    ids = PREFIX[None]
    with torch.no_grad():
        ours = head.expand_logits(head.head_logits(head.unroll(ids, hidden(target, PREFIX)[None])[0][0]))
    assert torch.allclose(ours, eagle1_reference_logits(state, target, ids), atol=1e-9)
    # and it drafts through the engine like any head
    from mtad.decoding import get_decoder

    out = get_decoder("sps", target=target, draft=head, gamma=3).generate(
        PROMPT_IDS, 12, generator=torch.Generator().manual_seed(0)
    )
    assert len(out.tokens) == 12 and out.stats.draft_calls > 0
    del state["fc.bias"]
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="missing"):
        load_draft_model({"draft": {"source": "head", "format": "eagle", "id": str(tmp_path)}}, target)


@pytest.mark.parametrize("layers", [1, 2])
def test_unroll_of_a_left_padded_batch_equals_each_sequence_alone(layers):
    """Training batches are left-padded (collate_features): every step of every real row must
    be what the sequence gives alone (rotary positions are relative; pad keys are never seen)."""
    target = BUILDERS["llama"](0, vocab=12, sharpness=2.0)
    head = tiny_head(target, 1, sharpness=2.0, layers=layers)
    short, long = torch.tensor([4, 2, 9, 1, 7]), torch.tensor([3, 7, 1, 9, 4, 5, 2, 8, 6])
    T = long.numel()
    ids = torch.stack([torch.cat([torch.zeros(T - short.numel(), dtype=torch.long), short]), long])
    feats = torch.zeros(2, T, target.config.hidden_size, dtype=torch.float64)
    feats[0, T - short.numel() :], feats[1] = hidden(target, short), hidden(target, long)
    valid = ids.new_ones(2, T, dtype=torch.bool)
    valid[0, : T - short.numel()] = False
    with torch.no_grad():
        batched = head.unroll(ids, feats, steps=3, first_row=T - 3, valid=valid)
        alone = [
            head.unroll(seq[None], f[None], steps=3)
            for seq, f in ((short, feats[0, T - short.numel() :]), (long, feats[1]))
        ]
    for s in range(2, 4):  # step s is exact from row first_row + s - 2 on (FeatureHead.unroll)
        exact = 3 - (s - 2)
        assert torch.allclose(batched[s - 1][0, T - exact :], alone[0][s - 1][0, -exact:], atol=1e-9, rtol=0), s
        assert torch.allclose(batched[s - 1][1, T - exact :], alone[1][s - 1][0, -exact:], atol=1e-9, rtol=0), s
    assert torch.allclose(
        batched[0][0, T - short.numel() :], alone[0][0][0], atol=1e-9, rtol=0
    )  # step 1: every real row


@pytest.mark.parametrize("design", DESIGNS)
def test_confidence_bins_add_up_to_the_expected_acceptance(design):
    """sum over bins of (drafted share x acceptance) is sum_x q'(x) min(1, p'/q') = sum_x min(p', q'):
    the calibration table holds the same acceptance as evaluate_head, split by the head's confidence."""
    from mtad.distill.head_training import confidence_calibration, evaluate_head

    target = BUILDERS["llama"](0, vocab=12, sharpness=2.0).float()
    head = tiny_head(target, 1, sharpness=2.0, **DESIGNS[design]).float()
    heldout = {"code": teacher_records(target)}
    table = confidence_calibration(head, heldout, steps=3)
    stats = evaluate_head(head, heldout, steps=3)
    for s, bins in table["rows"].items():
        assert sum(b["drafted_share"] for b in bins) == pytest.approx(1.0)
        total = sum(b["drafted_share"] * b["acceptance"] for b in bins if b["acceptance"] is not None)
        assert total == pytest.approx(stats["code"][f"accept_paper@{s}"], abs=1e-5)
        for b in bins:
            if b["mean_confidence"] is not None:
                assert b["bin"][0] <= b["mean_confidence"] <= b["bin"][1]
                assert 0.0 <= b["acceptance"] <= 1.0


def test_the_learning_rate_warms_up_then_anneals_on_a_cosine_to_its_floor():
    from mtad.distill.head_training import HeadTrainConfig, learning_rate

    cfg = HeadTrainConfig(workdir="unused", lr=1e-3, warmup_steps=10, lr_floor=0.1)
    assert learning_rate(cfg, 0, 0.0) == pytest.approx(1e-4)  # first warm-up step
    assert learning_rate(cfg, 9, 0.0) == pytest.approx(1e-3)
    assert learning_rate(cfg, 100, 0.5) == pytest.approx(0.55e-3)  # half-way down the cosine
    assert learning_rate(cfg, 100, 1.0) == pytest.approx(1e-4) == learning_rate(cfg, 100, 3.0)
    rates = [learning_rate(cfg, 100, d / 10) for d in range(11)]
    assert all(a > b for a, b in zip(rates, rates[1:]))
    constant = HeadTrainConfig(workdir="unused", lr=1e-3, warmup_steps=10)  # the default floor: no anneal
    assert {learning_rate(constant, 100, d / 4) for d in range(5)} == {1e-3}
