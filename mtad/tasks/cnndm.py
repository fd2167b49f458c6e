"""CNN/DailyMail summarisation scored with ROUGE-1/2/L (rouge-score, stemming on)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from mtad import data
from mtad.tasks.base import Score, Task, count_of, mean_of

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
OFFLINE_HINT = "", " (offline add --cnndm-jsonl FILE, a JSONL with fields article, highlights)"


def data_file(root=None, file: str | None = None) -> Path:
    """The CNN/DM JSONL: ``file`` (relative to cnndm/ or absolute), else cnndm/test.jsonl,
    else the only *.jsonl in cnndm/."""
    base = data.data_root(root) / "cnndm"
    if file:
        return data.require(base / file if not Path(file).is_absolute() else Path(file), "cnndm", *OFFLINE_HINT)
    if (base / "test.jsonl").exists():
        return base / "test.jsonl"
    candidates = sorted(base.glob("*.jsonl")) if base.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise data.DataMissingError(
            f"several CNN/DM files in {base}: {[c.name for c in candidates]}; set the task option `file`")
    return data.require(base / "test.jsonl", "cnndm", *OFFLINE_HINT)


def load_articles(root=None, file: str | None = None) -> list[dict]:
    """CNN/DM test articles: id, article, highlights (ids from the file, else the line number)."""
    examples = []
    for index, row in enumerate(data.read_jsonl(data_file(root, file))):
        missing = {"article", "highlights"} - row.keys()
        if missing:
            raise ValueError(f"CNN/DM row {index} lacks fields {sorted(missing)}")
        ident = row.get("id", row.get("specbench_question_id", index))
        examples.append({"id": str(ident), "article": row["article"], "highlights": row["highlights"]})
    return examples


def write_articles(root=None, jsonl: Path | None = None) -> Path:
    """Write cnndm/test.jsonl from a local JSONL, else from the HF dataset abisee/cnn_dailymail."""
    target = data.data_root(root) / "cnndm" / "test.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    if jsonl is not None:
        rows = data.read_jsonl(Path(jsonl))
    elif target.exists():
        return target
    else:
        from datasets import load_dataset  # only needed online

        try:
            split = load_dataset("abisee/cnn_dailymail", "3.0.0", split="test")
        except Exception as exc:  # offline, hub unreachable, ...
            raise data.DataMissingError(
                f"could not load abisee/cnn_dailymail 3.0.0 from the Hugging Face hub ({exc}); offline, run "
                f"`{data.FETCH_COMMAND} --only cnndm --cnndm-jsonl FILE` with a JSONL of article, highlights"
            ) from exc
        rows = ({"id": r["id"], "article": r["article"], "highlights": r["highlights"]} for r in split)
    tmp = target.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(target)
    load_articles(root)  # validates the fields
    return target


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer  # imported when first scoring (nltk takes seconds)

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F-measures of ``prediction`` against ``reference``."""
    scores = _scorer().score(reference, prediction)  # rouge-score takes (target, prediction)
    return {name: float(scores[name].fmeasure) for name in ROUGE_TYPES}


class CnnDmTask(Task):
    name = "cnndm"
    label = "CNN/DailyMail"
    scores = {"rouge1": Score("ROUGE-1 F1"), "rouge2": Score("ROUGE-2 F1"), "rougeL": Score("ROUGE-L F1")}
    primary_score = "rougeL"
    defaults = {"limit": None, "max_new_tokens": 128, "article_token_budget": 1024, "file": None}
    fetch_options = {"cnndm_jsonl": "a local CNN/DM JSONL (fields article, highlights), for offline use"}

    @classmethod
    def fetch_data(cls, root: Path, force: bool = False, cnndm_jsonl=None, **sources) -> str:
        """cnndm/test.jsonl from ``cnndm_jsonl``, else from the Hugging Face hub (when online)."""
        path = write_articles(root, Path(cnndm_jsonl) if cnndm_jsonl else None)
        return f"{sum(1 for _ in open(path, encoding='utf-8'))} articles in {path}"

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        # example id -> (article tokens, tokens kept); filled by build_prompt, read by score
        self.truncation: dict[str, tuple[int, int]] = {}

    def load_examples(self) -> list[dict]:
        return load_articles(self.data_root, self.options["file"])

    def article_text(self, example: dict, tokenizer) -> str:
        """The article cut to ``article_token_budget`` tokens (recorded per example)."""
        budget = int(self.options["article_token_budget"])
        ids = tokenizer(example["article"], add_special_tokens=False)["input_ids"]
        kept = min(len(ids), budget)
        self.truncation[example["id"]] = (len(ids), kept)
        if kept == len(ids):
            return example["article"]
        return tokenizer.decode(ids[:kept], skip_special_tokens=True)

    def chat_messages(self, example, history, tokenizer):
        request = ("Summarize the following news article in a few sentences.\n\n"
                   f"Article:\n{self.article_text(example, tokenizer)}")
        return [{"role": "user", "content": request}]

    def plain_prompt(self, example, history, tokenizer):
        return f"Article:\n{self.article_text(example, tokenizer)}\n\nSummary (a few sentences):\n"

    def postprocess(self, example, text):
        # plain completions may go on to invent the next article
        return text.split("\nArticle:", 1)[0].strip()

    def score(self, example, completions):
        (summary,) = completions
        article_tokens, kept = self.truncation.get(example["id"], (None, None))
        return {
            **rouge(summary, example["highlights"]),
            "truncated": None if kept is None else int(kept < article_tokens),
            "article_tokens": article_tokens,
        }

    def aggregate(self, example_scores, example_ids):
        result = {name: mean_of(example_scores, name) for name in ROUGE_TYPES}
        result.update({
            "examples": len(example_scores),
            "truncated": count_of(example_scores, "truncated"),
            "truncation_unknown": sum(1 for s in example_scores if s.get("truncated") is None),
            "article_token_budget": int(self.options["article_token_budget"]),
        })
        return result
