"""CNN/DailyMail summarisation scored with ROUGE-1/2/L (rouge-score, stemming on)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from mtad import data
from mtad.tasks.base import Score, Task, count_of, mean_of

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
OFFLINE_HINT = "", " (offline add --cnndm-jsonl FILE, a JSONL with fields article, highlights)"
PACKAGED = "cnndm/specbench_cnndm_80.jsonl"  # 80 test articles (Spec-Bench), shipped with the package
HUB = "hub"  # --cnndm-jsonl hub: the full test split from the Hugging Face hub


def data_file(root=None, file: str | None = None) -> Path:
    """The CNN/DM JSONL: ``file`` (relative to cnndm/ or absolute, else the packaged file of that
    name), else cnndm/test.jsonl, else the only *.jsonl in cnndm/, else the packaged 80 articles."""
    base = data.data_root(root) / "cnndm"
    if file:
        path = base / file if not Path(file).is_absolute() else Path(file)
        shipped = data.packaged(Path("cnndm") / file) if not Path(file).is_absolute() else None
        return path if path.exists() else shipped or data.require(path, "cnndm", *OFFLINE_HINT)
    if (base / "test.jsonl").exists():
        return base / "test.jsonl"
    candidates = sorted(base.glob("*.jsonl")) if base.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise data.DataMissingError(
            f"several CNN/DM files in {base}: {[c.name for c in candidates]}; set the task option `file`"
        )
    return data.packaged(PACKAGED) or data.require(base / "test.jsonl", "cnndm", *OFFLINE_HINT)


def articles_of(rows, where: str) -> list[dict]:
    """Rows as articles (id, article, highlights; ids from the file, else the line number); a row
    without both fields is an error naming ``where`` and the line."""
    examples = []
    for index, row in enumerate(rows):
        missing = {"article", "highlights"} - row.keys() if isinstance(row, dict) else {"article", "highlights"}
        if missing:
            raise ValueError(f"{where}: line {index + 1} lacks field(s) {sorted(missing)}")
        ident = row.get("id", row.get("specbench_question_id", index))
        examples.append({"id": str(ident), "article": row["article"], "highlights": row["highlights"]})
    if not examples:
        raise ValueError(f"{where}: no articles")
    return examples


def load_articles(root=None, file: str | None = None) -> list[dict]:
    """CNN/DM test articles: id, article, highlights."""
    path = data_file(root, file)
    return articles_of(data.read_jsonl(path), str(path))


def write_articles(root=None, jsonl: Path | str | None = None) -> Path:
    """Write cnndm/test.jsonl from a local JSONL or, with ``jsonl="hub"``, from the HF dataset
    abisee/cnn_dailymail; the rows are checked before anything is written (a bad file leaves the
    old one in place). Without a source: the file already there, else the packaged 80 articles."""
    target = data.data_root(root) / "cnndm" / "test.jsonl"
    if jsonl is None:
        return target if target.exists() else data.packaged(PACKAGED)
    if str(jsonl) == HUB:
        from datasets import load_dataset  # only needed online

        try:
            split = load_dataset("abisee/cnn_dailymail", "3.0.0", split="test")
        except Exception as exc:  # offline, hub unreachable, ...
            raise data.DataMissingError(
                f"could not load abisee/cnn_dailymail 3.0.0 from the Hugging Face hub ({exc}); offline, run "
                f"`{data.FETCH_COMMAND} --only cnndm --cnndm-jsonl FILE` with a JSONL of article, highlights"
            ) from exc
        rows = [{"id": r["id"], "article": r["article"], "highlights": r["highlights"]} for r in split]
    else:
        source = data.require(Path(jsonl), "cnndm", *OFFLINE_HINT)
        try:
            rows = data.read_jsonl(source)
        except ValueError as exc:
            raise ValueError(f"{source}: not JSON lines ({exc})") from exc
        articles_of(rows, str(source))

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    return data.write_atomically(target, write)


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
    defaults = {
        "limit": None,
        "max_new_tokens": 128,
        "article_token_budget": 1024,
        "file": None,
        "samples_per_example": 1,
    }
    fetch_options = {
        "cnndm_jsonl": "a CNN/DM JSONL (fields article, highlights), or `hub` for the full test split "
        "from the Hugging Face hub (default: the 80 articles shipped with mtad)"
    }

    @classmethod
    def fetch_data(cls, root: Path, force: bool = False, cnndm_jsonl=None, **sources) -> str:
        """cnndm/test.jsonl from ``cnndm_jsonl`` (a file, or ``hub``); without it the file already
        there, else the packaged 80 articles (nothing to fetch)."""
        path = write_articles(root, cnndm_jsonl)
        count = sum(1 for _ in open(path, encoding="utf-8"))
        shipped = (
            " (shipped with mtad; the full test split: --cnndm-jsonl hub)" if path == data.packaged(PACKAGED) else ""
        )
        return f"{count} articles in {path}{shipped}"

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        # example id -> (article tokens, tokens kept); filled by build_prompt, read by score
        self.truncation: dict[str, tuple[int, int]] = {}

    def load_examples(self) -> list[dict]:
        return load_articles(self.data_root, self.options["file"])

    def more_examples_hint(self) -> str:
        return (
            "the 80 articles shipped with mtad unless a fuller file was fetched; the whole test split: "
            "python scripts/get_data.py --cnndm-jsonl hub (or a JSONL of your own with --cnndm-jsonl FILE)"
        )

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
        request = (
            "Summarize the following news article in a few sentences.\n\n"
            f"Article:\n{self.article_text(example, tokenizer)}"
        )
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
        result.update(
            {
                "examples": len(example_scores),
                "truncated": count_of(example_scores, "truncated"),
                "truncation_unknown": sum(1 for s in example_scores if s.get("truncated") is None),
                "article_token_budget": int(self.options["article_token_budget"]),
            }
        )
        return result
