"""A distillation round on one accelerator (mtad.distill.gpu_round), end to end on a tiny random
target on the CPU: sampling, scoring, heads side by side with their curves, and the files a
round leaves."""

import json
import random

import pytest
import torch

from mtad.distill import gpu_round as R
from mtad.distill.answers import read_rows, write_rows
from mtad.distill.card_round import round_made_lines
from mtad.distill.corpus import SAMPLING_SETTINGS
from mtad.models.head import build_head, load_head, read_head_meta, save_head
from mtad.models.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    target = tiny_model("llama", len(tokenizer), seed=0).eval().requires_grad_(False)
    return target, tokenizer


def random_prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randrange(3, 10))] for _ in range(n)]


def test_sampling_batches_take_every_prompt_once_in_runs_of_similar_length():
    prompts = random_prompts(23, 50, seed=1)
    batches = R.sampling_batches(prompts, 4, seed=0)
    taken = [i for batch, _ in batches for i in batch]
    assert sorted(taken) == list(range(len(prompts)))
    by_length = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    runs = [by_length[i : i + 4] for i in range(0, len(prompts), 4)]
    assert sorted(map(sorted, (b for b, _ in batches))) == sorted(map(sorted, runs))
    settings = [s for _, s in batches]
    counts = [settings.count(s) for s in SAMPLING_SETTINGS]
    assert max(counts) - min(counts) <= 1 and set(settings) <= set(SAMPLING_SETTINGS)


def test_a_bundle_reads_back_and_a_wrong_file_says_what_makes_one(tmp_path):
    held = {"chat": [{"prompt_ids": torch.tensor([5, 6]), "answer_ids": torch.tensor([7, 2])}]}
    path = R.write_bundle(tmp_path / "b.pt.gz", [{"prompt_ids": [4, 5], "kind": "code"}], held, {"seed": 3})
    bundle = R.read_bundle(path)
    assert bundle["requests"] == [{"prompt_ids": [4, 5], "kind": "code"}]
    assert bundle["heldout"] == [{"prompt_ids": [5, 6], "answer_ids": [7, 2], "kind": "chat"}]
    (tmp_path / "junk.pt.gz").write_bytes(b"not a bundle")
    with pytest.raises(ValueError, match="round-requests"):
        R.read_bundle(tmp_path / "junk.pt.gz")


SOURCES = {"sha256": "ab" * 32, "documents": 2, "catalogue_sentences": 3}


def test_a_round_writes_its_answers_every_arms_head_and_curve(tiny, tmp_path):
    target, tokenizer = tiny
    vocab, eos = target.config.vocab_size, tokenizer.eos_token_id
    committed = save_head(
        build_head(target, 1, seed=1), tmp_path / "committed.safetensors", extra_meta={"trained_tokens": 1000}
    )
    old = [
        {"prompt_ids": p, "answer_ids": a + [eos], "kind": k, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
        | {"chunk": "p0_00000", "target": "tiny", "target_dtype": "float32"}
        for p, a, k in zip(random_prompts(3, vocab, 2), random_prompts(3, vocab, 3), ("chat", "code", "chat"))
    ]
    write_rows(old, tmp_path / "dataset" / "answers.parquet")
    requests = [{"prompt_ids": p, "kind": k} for p, k in zip(random_prompts(6, vocab, 4), ["code", "sql"] * 3)]
    held = [
        {"prompt_ids": p, "answer_ids": a + [eos], "kind": k}
        for p, a, k in zip(random_prompts(4, vocab, 5), random_prompts(4, vocab, 6), ("chat", "code", "rewrite", "sql"))
    ]
    out = tmp_path / "out"
    report = R.run_round(
        target,
        tokenizer,
        {"requests": requests, "heldout": held, "meta": {"text_sources": SOURCES}},
        tmp_path / "dataset",
        committed,
        out,
        "tiny",
        minutes=10,
        batch_rows=4,
        max_new=6,
        score_tokens=256,
        batch_seqs=2,
        curve_every=20,
        train_tokens=40,
        special_ids=[eos],
        seed=0,
        scratch=R.ROUND_ARMS,
        lr_floor=1.0,
    )
    rows = read_rows(out / "answers-round.parquet")
    assert [r["prompt_ids"] for r in rows] and len(rows) == len(requests)  # before the deadline: all answered
    assert all(r["answer_ids"][-1] == eos or len(r["answer_ids"]) == 6 for r in rows)
    assert {(r["temperature"], r["top_k"], r["top_p"]) for r in rows} <= set(SAMPLING_SETTINGS)
    corpus = report["corpus"]
    assert (corpus["answers"], corpus["dataset_answers"], corpus["new_answers"]) == (9, 3, 6)
    assert corpus["distinct_prompts"] == 9 and sum(k["answers"] for k in corpus["kinds"].values()) == 9
    assert corpus["text_sources"] == SOURCES  # the fingerprint of what the requests were drawn from, kept
    made = "\n".join(round_made_lines(report, R.CONTINUED, {}, "round"))
    assert "sources sha256 abababababababab: 2 documents, 3 catalogue sentences" in made
    assert "recorded no fingerprint" in "\n".join(
        round_made_lines(report | {"corpus": {**corpus, "text_sources": None}}, R.CONTINUED, {}, "round")
    )
    assert list(report["arms"]) == [R.CONTINUED, *R.ROUND_ARMS]
    assert report["tokens"] >= 40
    for arm in report["arms"].values():
        curve = arm["curve"]
        assert curve[0]["tokens"] == 0 and len(curve) >= 2  # where it starts, then every 20 tokens
        head = load_head(out / arm["file"], target, torch.float32)
        assert head.num_layers == arm["design"]["layers"]
    trained = {n: read_head_meta(out / a["file"])["trained_tokens"] for n, a in report["arms"].items()}
    assert trained.pop(R.CONTINUED) == 1000 + report["tokens"]  # counted from the committed head's start
    assert set(trained.values()) == {report["tokens"]}
    # exported again, a round takes its own place among the rounds; another round comes after it
    from mtad.distill.head_reports import ROUNDS_KEY, add_round
    from mtad.result_files import DRAFT, read_section

    kept = json.loads((out / "round.json").read_text())
    add_round(tmp_path / "results", kept)
    table = add_round(tmp_path / "results", kept)
    assert "## Round 1 on one GPU" in table and "## Round 2" not in table
    table = add_round(tmp_path / "results", kept | {"timings": {"sample_s": -1.0}})
    assert "## Round 2 on one GPU" in table
    assert len(read_section(DRAFT, tmp_path / "results", "head_design")[ROUNDS_KEY]) == 2


def test_round_arms_are_picked_by_name_and_an_unknown_one_lists_the_valid():
    assert R.scratch_arms("all") == R.ROUND_ARMS and R.scratch_arms("") == {}
    name = next(iter(R.ROUND_ARMS))
    assert R.scratch_arms(f" {name} ") == {name: R.ROUND_ARMS[name]}
    with pytest.raises(ValueError, match="valid are") as err:
        R.scratch_arms(f"{name}; fused, 9 layers")
    assert all(n in str(err.value) for n in R.ROUND_ARMS)
