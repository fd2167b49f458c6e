"""The teacher answers dataset: the corpus' target-sampled answers to Parquet and back, scored
again on a machine that has only the dataset."""

import pytest
import torch

from mtad.distill.answers import SHARD_GLOB, export, featurize, read_rows, row_key, shards
from mtad.distill.corpus import Corpus, score
from mtad.models.tiny import tiny_llama

TARGET = "tiny==0:model"


def corpus_with(tmp_path, target):
    """A work dir's corpus: one chunk of target-sampled records, one of real text."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 12, (n,), generator=gen).tolist() for n in (5, 7, 4)]
    answers = [torch.randint(0, 12, (n,), generator=gen).tolist() for n in (3, 6, 2)]
    corpus = Corpus(tmp_path / "work")
    for name, kind in (("p0_00000", "target"), ("p0_00001", "real")):
        records = score(target, prompts, answers, top_k=4, features=True)
        for r, family in zip(records, ("code", "sql", "howto")):
            r.update(family=family, kind=kind, setting=(1.0, 10, 0.9))
        corpus.write(name, records, {})
    return corpus, prompts, answers


def test_export_keeps_target_answers_once_and_datasets_reads_them(tmp_path):
    datasets = pytest.importorskip("datasets")
    target = tiny_llama(0, vocab=12)
    corpus, prompts, answers = corpus_with(tmp_path, target)
    dataset = tmp_path / "ds"
    stats = export(corpus.dir, dataset, TARGET, "float32")
    assert stats["answers"] == 3 and stats["added"] == 3  # the real-text chunk is not exported
    assert stats["answer_tokens"] == 11 and stats["distinct_prompts"] == 3
    again = export(corpus.dir, dataset, TARGET, "float32")
    assert again["answers"] == 3 and again["added"] == 0  # a second run adds only what is new
    assert [p.name for p in shards(dataset)] == ["answers.parquet"]  # and no empty shard
    card = (dataset / "README.md").read_text()
    assert "answers: 3, distinct prompts: 3" in card and "| sql | 1 | 6 |" in card
    loaded = datasets.load_dataset("parquet", data_files=str(dataset / SHARD_GLOB), split="train")
    assert loaded.features["answer_ids"].feature.dtype == "uint16"
    assert [list(r) for r in loaded["prompt_ids"]] == prompts and loaded["kind"] == ["code", "sql", "howto"]
    assert set(loaded["target"]) == {TARGET} and loaded[0]["top_k"] == 10


def test_new_answers_go_to_a_new_shard_and_old_shards_are_never_rewritten(tmp_path):
    datasets = pytest.importorskip("datasets")
    target = tiny_llama(0, vocab=12)
    corpus, prompts, answers = corpus_with(tmp_path, target)
    dataset = tmp_path / "ds"
    export(corpus.dir, dataset, TARGET, "float32")
    first = (dataset / "answers.parquet").read_bytes()
    records = score(target, [[1, 2, 3]], [[4, 5]], top_k=4, features=True)
    records[0].update(family="chat", kind="target", setting=(0.7, 0, 1.0))
    corpus.write("p0_00002", records, {})
    stats = export(corpus.dir, dataset, TARGET, "float32")
    assert stats["added"] == 1 and stats["answers"] == 4
    assert [p.name for p in shards(dataset)] == ["answers.parquet", "answers-00001.parquet"]
    assert (dataset / "answers.parquet").read_bytes() == first
    assert len(read_rows(dataset / "answers-00001.parquet")) == 1  # the new shard holds only the new row
    assert "`answers-00001.parquet`" in (dataset / "README.md").read_text()
    loaded = datasets.load_dataset("parquet", data_files=str(dataset / SHARD_GLOB), split="train")
    assert sorted(loaded["kind"]) == ["chat", "code", "howto", "sql"]


def test_a_fresh_machine_scores_the_dataset_into_the_corpus_the_producer_made(tmp_path):
    target = tiny_llama(0, vocab=12)
    corpus, prompts, answers = corpus_with(tmp_path, target)
    path = tmp_path / "ds"
    export(corpus.dir, path, TARGET, "float32")
    fresh = tmp_path / "fresh" / "corpus"
    assert featurize(path, fresh, target, top_k=4, batch_rows=2) == 3
    assert featurize(path, fresh, target, top_k=4) == 0  # resumable: nothing left to score
    rebuilt = {row_key(r["prompt_ids"], r["answer_ids"]): r for r in Corpus(fresh.parent).records}
    for original in Corpus(corpus.dir.parent).by_family().values():
        for r in original:
            if r["kind"] != "target":
                continue
            twin = rebuilt[row_key(r["prompt_ids"], r["answer_ids"])]
            assert twin["family"] == r["family"] and twin["setting"] == (1.0, 10, 0.9)
            assert torch.equal(twin["top_ids"], r["top_ids"])
            assert torch.equal(twin["depth_features"], r["depth_features"])
            assert torch.equal(twin["features"], r["features"])


def test_a_file_of_another_kind_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="not an mtad teacher-answers file"):
        read_rows(tmp_path / "other.parquet")
