"""The teacher pass's sampled answers as a versioned dataset: the part of the corpus that costs
target sampling, kept so that a fresh machine starts from it instead of from nothing.

One row per target-sampled answer: prompt and answer token ids (uint16: the vocabulary has
49,152 ids), the kind of request, the sampling setting, the producer chunk it came from, and
the target's identity (pair, weights, dtype). Parquet with zstd in shards that
`datasets.load_dataset("parquet", data_files="<dir>/answers*.parquet")` reads as one split, a
card beside them (`README.md`, written from the rows by `write_card`).

- `export` (`export_rows`): the workdir's (or a GPU round's) target-sampled answers that no shard
  holds yet (deduplicated on prompt and answer ids) written as one new shard, so each run of the pipeline adds to the
  dataset and a version-controlled history holds every row once (a shard is never rewritten);
- `featurize`: the dataset's rows that a workdir's corpus lacks, scored teacher-forced by the
  target (`corpus.score`: top-K log-probs and hidden states) into corpus chunks, which the
  trainers read as they read the producer's.

Only answers the target sampled are kept: real-text chunks re-score offline text
(`sources`), which any machine rebuilds, and the held-out sets are never in the corpus.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from ..models.pairs import ASSETS_DIR
from .corpus import score, write_chunk

log = logging.getLogger(__name__)

DATASET_DIR = ASSETS_DIR / "drafts" / "teacher_answers"
FIRST_SHARD = "answers.parquet"  # then answers-00001.parquet, answers-00002.parquet, ...
SHARD_GLOB = "answers*.parquet"
FORMAT = "mtad-teacher-answers-v1"
COLUMNS = ("prompt_ids", "answer_ids", "kind", "temperature", "top_k", "top_p", "chunk", "target", "target_dtype")


def row_key(prompt_ids, answer_ids) -> str:
    """What makes two rows the same answer: the prompt's and the answer's ids."""
    digest = hashlib.sha1()
    for ids in (prompt_ids, answer_ids):
        digest.update(torch.as_tensor(ids, dtype=torch.int32).numpy().tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def target_identity(pair_cfg: dict) -> str:
    """The target's weights as the pair names them (package, version and file, or a hub id)."""
    target = pair_cfg["target"]
    if target.get("package"):
        return f"{target['package']}=={target['version']}:{target['file']}"
    return str(target.get("id") or target.get("path") or target)


def shards(dataset: str | Path) -> list[Path]:
    """The dataset directory's shard files, in the order they were written."""
    found = Path(dataset).glob(SHARD_GLOB)
    return sorted(found, key=lambda p: (p.name != FIRST_SHARD, p.name))


def next_shard(dataset: str | Path) -> Path:
    have = shards(dataset)
    return Path(dataset) / (FIRST_SHARD if not have else f"answers-{len(have):05d}.parquet")


def read_rows(dataset: str | Path) -> list[dict]:
    """The rows of a dataset directory's shards, or of one shard file (token ids as lists of
    ints); [] when there is none yet."""
    dataset = Path(dataset)
    paths = shards(dataset) if dataset.is_dir() else [dataset] if dataset.exists() else []
    return [row for path in paths for row in _read_shard(path)]


def _read_shard(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: not an mtad teacher-answers file (columns {missing} missing)")
    return table.to_pylist()


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Rows to Parquet (uint16 ids, zstd), written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("prompt_ids", pa.list_(pa.uint16())),
            ("answer_ids", pa.list_(pa.uint16())),
            ("kind", pa.string()),
            ("temperature", pa.float64()),
            ("top_k", pa.int32()),
            ("top_p", pa.float64()),
            ("chunk", pa.string()),
            ("target", pa.string()),
            ("target_dtype", pa.string()),
        ],
        metadata={"format": FORMAT},
    )
    if any(max(r["prompt_ids"] + r["answer_ids"], default=0) > 65535 for r in rows):
        raise ValueError("token ids above 65535 do not fit the dataset's uint16 columns")
    table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows], schema=schema)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=19)
    tmp.replace(path)
    return path


def chunk_records(corpus_dir: Path):
    """Every record of a corpus directory's chunks, one file in memory at a time (features dropped)."""
    for path in sorted(Path(corpus_dir).glob("chunk_*.pt")):
        for r in torch.load(path, weights_only=False)["records"]:
            yield {k: v for k, v in r.items() if k not in ("features", "depth_features")} | {
                "chunk": path.stem.removeprefix("chunk_")
            }


def rows_of_corpus(corpus_dir: Path, target: str, target_dtype: str) -> list[dict]:
    """The corpus' target-sampled records as dataset rows (chunk names from the files they came in)."""
    rows = []
    for r in chunk_records(corpus_dir):
        if r.get("kind") == "target":
            temperature, top_k, top_p = r["setting"]
            rows.append(
                {
                    "prompt_ids": [int(i) for i in r["prompt_ids"]],
                    "answer_ids": [int(i) for i in r["answer_ids"]],
                    "kind": r["family"],
                    "temperature": float(temperature),
                    "top_k": int(top_k),
                    "top_p": float(top_p),
                    "chunk": r["chunk"],
                    "target": target,
                    "target_dtype": target_dtype,
                }
            )
    return rows


def export(corpus_dir: Path, dataset: str | Path, target: str, target_dtype: str) -> dict:
    """Write the corpus' target-sampled answers that no shard of the dataset directory holds as a
    new shard (none when nothing is new) and rewrite the card; returns the counts the card shows."""
    return export_rows(rows_of_corpus(corpus_dir, target, target_dtype), dataset)


def export_rows(candidates, dataset: str | Path) -> dict:
    """`export` of dataset rows from anywhere (a corpus' chunks, a GPU round's answers)."""
    dataset = Path(dataset)
    rows = read_rows(dataset)
    seen = {row_key(r["prompt_ids"], r["answer_ids"]) for r in rows}
    new = []
    for r in candidates:
        key = row_key(r["prompt_ids"], r["answer_ids"])
        if key not in seen:
            seen.add(key)
            new.append(r)
    if new:
        write_rows(new, next_shard(dataset))
    files = shards(dataset)
    stats = summary(rows + new) | {
        "added": len(new),
        "bytes": sum(p.stat().st_size for p in files),
        "shards": [(p.name, p.stat().st_size) for p in files],
    }
    write_card(stats, dataset / "README.md")
    return stats


def summary(rows: list[dict]) -> dict:
    kinds: dict[str, dict] = {}
    for r in rows:
        k = kinds.setdefault(r["kind"], {"answers": 0, "answer_tokens": 0})
        k["answers"] += 1
        k["answer_tokens"] += len(r["answer_ids"])
    return {
        "answers": len(rows),
        "distinct_prompts": len({tuple(r["prompt_ids"]) for r in rows}),
        "answer_tokens": sum(len(r["answer_ids"]) for r in rows),
        "prompt_tokens": sum(len(r["prompt_ids"]) for r in rows),
        "kinds": dict(sorted(kinds.items())),
        "settings": sorted({(r["temperature"], r["top_k"], r["top_p"]) for r in rows}),
        "targets": sorted({f"{r['target']} ({r['target_dtype']})" for r in rows}),
    }


def write_card(stats: dict, path: Path) -> Path:
    """The dataset card, every figure read from the rows."""
    kinds = "\n".join(f"| {k} | {v['answers']} | {v['answer_tokens']} |" for k, v in stats["kinds"].items())
    settings = ", ".join(f"T {t:g} / top-k {k or 'off'} / top-p {p:g}" for t, k, p in stats["settings"])
    files = ", ".join(f"`{name}` ({size / 1e6:.1f} MB)" for name, size in stats["shards"])
    text = f"""# Teacher answers: the embedded target's sampled answers to generated requests

Shards {files}: Parquet with zstd, format `{FORMAT}`, read as one split by
`datasets.load_dataset("parquet", data_files="{path.parent.name}/{SHARD_GLOB}")`. One row per answer
the target sampled while distilling its draft (`mtad/distill/`), the costly part of the distillation
corpus. `python scripts/distill_draft.py featurize` scores the rows a work directory lacks (the target's
top-K log-probs and hidden states, teacher-forced) so a fresh machine trains from them; `python
scripts/distill_draft.py snapshot` writes a work directory's new answers as one more shard (a shard is
never rewritten, so a repository's history holds each row once) and rewrites this card.

- answers: {stats["answers"]}, distinct prompts: {stats["distinct_prompts"]}
- answer tokens: {stats["answer_tokens"]}, prompt tokens: {stats["prompt_tokens"]}
- sampling settings: {settings}
- target: {", ".join(stats["targets"])}

Columns: `prompt_ids`, `answer_ids` (uint16 token ids of the target's tokenizer; the prompt through
its chat template, the answer up to and including the end-of-turn token or cut at the length limit),
`kind` (the kind of request, `mtad.tasks.heldout.kinds`), `temperature`, `top_k`, `top_p` (0 = off), `chunk`
(the producer chunk), `target` and `target_dtype` (the weights and the dtype that sampled it).

| kind | answers | answer tokens |
|---|---:|---:|
{kinds}

The requests are generated from text available offline (documentation, package metadata, Debian
text, translation catalogues: `mtad/tasks/heldout/requests.py`) with every held-out subject and kind left
out, and no evaluation set is among them (Spec-Bench, MT-Bench, HumanEval, the Spider dev set, the
CNN/DailyMail test articles, the chat task's held-out topics). The answers are the model's own
output (SmolLM2-135M-Instruct, Apache-2.0).
"""
    path.write_text(text)
    return path


def score_rows(target, rows: list[dict], top_k: int = 32, max_tokens: int = 4096, store="cpu") -> list[dict]:
    """Dataset rows (or held-out answers: no sampling setting) scored teacher-forced with features
    (`corpus.score`) into corpus records of their kind, their tensors on `store`."""
    prompts, answers = [r["prompt_ids"] for r in rows], [r["answer_ids"] for r in rows]
    records = score(target, prompts, answers, top_k, features=True, max_tokens=max_tokens, store=store)
    for rec, r in zip(records, rows):
        rec.update(family=r["kind"], kind="target", setting=(r.get("temperature"), r.get("top_k"), r.get("top_p")))
    return records


def featurize(
    dataset: str | Path, corpus_dir: Path, target, top_k: int = 32, batch_rows: int = 96, max_chunks: int = 10**9
) -> int:
    """Score the rows of the dataset (a directory of shards, or one shard) that the corpus in
    `corpus_dir` does not hold yet into corpus chunks
    (`chunk_ds_<n>.pt`, features on); resumable: rows already in a chunk are skipped. Returns
    the rows scored."""
    corpus_dir = Path(corpus_dir)
    corpus_dir.mkdir(parents=True, exist_ok=True)
    have = {row_key(r["prompt_ids"], r["answer_ids"]) for r in chunk_records(corpus_dir)}
    todo = [r for r in read_rows(dataset) if row_key(r["prompt_ids"], r["answer_ids"]) not in have]
    n = len(list(corpus_dir.glob("chunk_ds_*.pt")))
    done = 0
    for start in range(0, len(todo), batch_rows):
        if n >= max_chunks:
            break
        rows = todo[start : start + batch_rows]
        records = score_rows(target, rows, top_k)
        write_chunk(corpus_dir, f"ds_{n:05d}", records, {"kind": "target", "from": "dataset", "rows": len(rows)})
        n += 1
        done += len(rows)
        log.info("featurized %d of %d dataset rows", done, len(todo))
    return done
