"""The paper pairs' path: Llama-2 and OPT pairs load through the ``hub`` source.

No hub access here, so tiny random Llama and OPT models and their tokenizer are saved with
``save_pretrained`` to local directories and the paper pairs' own configs
(``conf/pair/llama2_13b_7b.yaml``, ``conf/pair/opt_13b_125m.yaml``) get ``id:`` pointing there:
``from_pretrained`` then reads them as it would read a downloaded snapshot, in float16 /
bfloat16 with ``device_map: auto`` (on this CPU-only machine: everything on the CPU).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mtad.decoding.registry import METHODS
from mtad.models.pairs import DTYPES, SOURCES, list_pairs, load_pair, pair_config, resolve_device
from mtad.models.tiny import tiny_model, tiny_tokenizer

REPO = Path(__file__).resolve().parents[1]
PAPER_PAIRS = {"llama": ("llama2_13b_7b", "float16"), "opt": ("opt_13b_125m", "bfloat16")}


@pytest.fixture(scope="module")
def hub_dirs(tmp_path_factory):
    """{family: (target dir, draft dir, draft dir with another tokenizer)} saved like hub snapshots."""
    root = tmp_path_factory.mktemp("hub")
    dirs = {}
    for family in PAPER_PAIRS:
        saved = []
        for role, seed, variant in (("target", 0, "default"), ("draft", 1, "default"), ("alt_draft", 1, "alt")):
            tokenizer = tiny_tokenizer(variant)
            path = root / f"{family}-{role}"
            tiny_model(family, len(tokenizer), seed).save_pretrained(path)
            tokenizer.save_pretrained(path)
            saved.append(str(path))
        dirs[family] = tuple(saved)
    return dirs


def local_pair(family: str, target: str, draft: str) -> dict:
    name, dtype = PAPER_PAIRS[family]
    cfg = pair_config(name, target_dtype=dtype, draft_dtype=dtype)
    assert cfg["target"]["source"] == cfg["draft"]["source"] == "hub" and cfg["device_map"] == "auto"
    cfg["target"]["id"], cfg["draft"]["id"] = target, draft
    return cfg


@pytest.mark.parametrize("family", list(PAPER_PAIRS))
def test_paper_pair_loads_through_the_hub_source(family, hub_dirs):
    target_dir, draft_dir, _ = hub_dirs[family]
    pair = load_pair(local_pair(family, target_dir, draft_dir))
    assert pair.config["device_map"] == "auto"
    dtype = DTYPES[PAPER_PAIRS[family][1]]
    for model in (pair.target, pair.draft):
        assert model.dtype == dtype and not model.training
        assert {p.device.type for p in model.parameters()} == {"cpu"}  # device_map auto, no GPU here
    assert pair.tokenizer.eos_token_id == tiny_tokenizer().eos_token_id
    from mtad.decoding import get_decoder

    prompt = torch.tensor([pair.tokenizer("Summarize the article.")["input_ids"]])
    out = get_decoder("sps", target=pair.target, draft=pair.draft, decode_path=pair.decode_path).generate(
        prompt, max_new_tokens=6, generator=torch.Generator().manual_seed(0)
    )
    assert len(out.tokens) == 6 and out.stats.target_calls >= 1


@pytest.mark.parametrize("family", list(PAPER_PAIRS))
def test_paper_pair_with_another_tokenizer_is_refused(family, hub_dirs):
    target_dir, _, alt_draft_dir = hub_dirs[family]
    with pytest.raises(ValueError, match="tokenizers differ"):
        load_pair(local_pair(family, target_dir, alt_draft_dir))


@pytest.mark.parametrize("name", list_pairs())
def test_every_pair_file_resolves_without_downloading(name):
    """Each conf/pair file is a complete, valid configuration (nothing is loaded or fetched)."""
    cfg = pair_config(name)
    assert cfg["name"] == name
    for part in ("target", "draft"):
        spec = cfg[part]
        assert spec["source"] in SOURCES
        if spec["source"] == "hub":  # an owner/name id, a dtype, placement over the visible devices
            owner, _, model = spec["id"].partition("/")
            assert owner and model and "/" not in model, spec["id"]
            assert cfg["device_map"] == "auto"
    for key in ("target_dtype", "draft_dtype"):  # `auto` on a CPU: measured when the target first loads here
        assert cfg[key] in DTYPES or (cfg[key] == "auto" and resolve_device(cfg["device"]).type == "cpu"), (
            name,
            key,
            cfg[key],
        )


@pytest.mark.slow
@pytest.mark.parametrize("family", list(PAPER_PAIRS))
def test_every_method_runs_on_a_paper_pair_through_mtad_run(family, hub_dirs, suite_data, tmp_path):
    target_dir, draft_dir, _ = hub_dirs[family]
    name, dtype = PAPER_PAIRS[family]
    args = [
        f"pair={name}",
        f"pair.target.id={target_dir}",
        f"pair.draft.id={draft_dir}",
        f"pair.target_dtype={dtype}",
        f"pair.draft_dtype={dtype}",
        f"method={','.join(METHODS)}",
        "task=cnndm",
        "task.max_new_tokens=4",
        "task.article_token_budget=32",
        "limit=1",
        f"data_root={suite_data}",
        f"results_root={tmp_path / 'runs'}",
        "logger=none",
        "energy=none",
        "progress=false",
        "warmup_tokens=2",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "mtad.run", "-m", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    runs = tmp_path / "runs"  # <experiment>/<pair>/<task>/<method>/<overrides>/metrics.json
    done = sorted(p.relative_to(runs).parts[3] for p in runs.rglob("metrics.json"))
    assert done == sorted(METHODS), done


LLAMA3_ROPE = {
    "rope_theta": 500000.0,
    "max_position_embeddings": 1024,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
}


@pytest.mark.parametrize("name", ["llama31_8b_32_1b", "llama31_8b_32_1b_instruct"])
def test_the_camera_ready_pair_loads_through_the_hub_source_with_llama3_rope_scaling(name, tmp_path):
    """Tiny Llama models with Llama 3's RoPE scaling stand in for Llama-3.1-8B and Llama-3.2-1B: the
    pair loads from local folders, and every decode path gives the eager path's greedy tokens past
    the original context (where the scaled frequencies matter)."""
    from mtad.decoding import get_decoder

    tokenizer = tiny_tokenizer()
    for role, seed in (("target", 0), ("draft", 1)):
        model = tiny_model("llama", len(tokenizer), seed, **LLAMA3_ROPE)
        model.save_pretrained(tmp_path / role)
        tokenizer.save_pretrained(tmp_path / role)
    cfg = pair_config(name)
    assert cfg["target"]["id"].startswith("meta-llama/Llama-3.1-8B")
    assert cfg["draft"]["id"].startswith("meta-llama/Llama-3.2-1B")
    cfg["target"]["id"], cfg["draft"]["id"] = str(tmp_path / "target"), str(tmp_path / "draft")
    pair = load_pair(cfg, target_dtype="float32", draft_dtype="float32")
    assert pair.target.config.rope_scaling["rope_type"] == "llama3"
    prompt = torch.tensor([pair.tokenizer("Summarize the article about the rain.")["input_ids"]])
    greedy = {"temperature": 0.0}
    out = {
        path: get_decoder("sps", target=pair.target, draft=pair.draft, decode_path=path, **greedy)
        .generate(prompt, max_new_tokens=40, generator=torch.Generator().manual_seed(0))
        .tokens
        for path in ("eager", "static", "fast")
    }
    assert prompt.shape[1] + 40 > LLAMA3_ROPE["rope_scaling"]["original_max_position_embeddings"]
    assert out["static"] == out["eager"] == out["fast"]
    with torch.no_grad():  # transformers' own greedy loop, up to its first EOS
        reference = pair.target.generate(prompt, max_new_tokens=40, do_sample=False)[0, prompt.shape[1] :].tolist()
    assert out["eager"][: len(reference)] == reference


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and transformers never asked: a model that is not here must be
    refused before it would wait on the network."""
    import huggingface_hub.constants
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("transformers was asked for a model that is not on this machine")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    return tmp_path / "hf"


def test_load_pair_offline_without_the_weights_is_one_clear_error_at_once(empty_hub_cache, monkeypatch):
    from mtad.models.pairs import HubModelUnavailable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = pair_config("llama2_13b_68m")
    cfg["target"]["id"] = "mtad-test/no-such-model"
    with pytest.raises(HubModelUnavailable) as refused:
        load_pair(cfg)
    message = str(refused.value)
    assert isinstance(refused.value, FileNotFoundError) and "\n" not in message
    assert message.startswith("pair.target.id=mtad-test/no-such-model: not on this machine")
    assert f"not in the Hugging Face cache {empty_hub_cache}" in message and "(HF_HUB_OFFLINE is set)" in message
    assert "`hf download mtad-test/no-such-model --local-dir DIR`" in message and "pair.target.id=DIR" in message
    with pytest.raises(HubModelUnavailable, match="pair.target.id=meta-llama/Llama-2-13b-hf: not on this machine"):
        load_pair("llama2_13b_68m")


def test_load_pair_with_the_hub_unreachable_says_why_after_one_short_probe(empty_hub_cache, monkeypatch):
    import socket

    from mtad.models.pairs import HubModelUnavailable

    probes = []

    def unreachable(address, timeout=None):
        probes.append((address, timeout))
        raise OSError("Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    with pytest.raises(HubModelUnavailable, match=r"cannot be reached \(Name or service not known\)"):
        load_pair("llama2_13b_68m")
    assert probes == [(("huggingface.co", 443), 3.0)]
