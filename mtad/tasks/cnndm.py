"""CNN/DailyMail summarisation scored with ROUGE-1/2/L (rouge-score, stemming on)."""
from __future__ import annotations

from functools import lru_cache

from mtad import data
from mtad.tasks.base import Score, Task, count_of, mean_of

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


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

    def __init__(self, data_root=None, **options):
        super().__init__(data_root, **options)
        # example id -> (article tokens, tokens kept); filled by build_prompt, read by score
        self.truncation: dict[str, tuple[int, int]] = {}

    def load_examples(self) -> list[dict]:
        return data.load_cnndm(self.data_root, self.options["file"])

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
