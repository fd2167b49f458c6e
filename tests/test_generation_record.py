"""One generation record from the decoder to every report: `Decoder.generate` fills a `DecodeStats`
with the counts and the split of the wall time; the runner's cell metrics, the claims report's
per-example sums, Table 2 and the bench all give the cost model the same counts of one cell."""

import json
from dataclasses import asdict

import pytest
import torch

from mtad.bench.modelled import modelled_rows
from mtad.bench.timings import Config, summarise
from mtad.decode_stats import DecodeStats
from mtad.decoding import get_decoder
from mtad.decoding.registry import specs
from mtad.metrics.cost_model import COUNT_FIELDS, Counts, GenerationCost
from mtad.models.check_cases import TOKEN_PROMPT, TOKEN_VOCAB
from mtad.models.tiny import tiny_head, tiny_llama
from mtad.report.cells import load_cells
from mtad.report.examples import example_frame, paired
from mtad.report.kind_claims import _modelled_ratio
from mtad.report.tables import _counts, add_modelled_speedups
from mtad.runner.aggregate import cell_metrics

TOKEN_PARAMS = {m: dict(s.test_settings) for m, s in specs().items()}  # each method's small settings

PAIR = "smollm2_135m_head"  # a pair the accelerator profile knows; the counts come from the tiny models
PROMPTS = ([5, 1, 9, 2, 7], [3, 8, 8, 1, 6, 2, 4, 9, 11, 5, 7])


@pytest.fixture(scope="module")
def models():
    return tiny_llama(0, TOKEN_VOCAB, sharpness=2.0), tiny_llama(1, TOKEN_VOCAB, sharpness=2.0)


def decode(models, method: str, prompt: list[int], seed: int = 0, **params) -> DecodeStats:
    target, draft = models
    decoder = get_decoder(
        method, target=target, draft=draft, decode_path="static", **{**TOKEN_PARAMS[method], **params}
    )
    out = decoder.generate(torch.tensor([prompt]), max_new_tokens=12, generator=torch.Generator().manual_seed(seed))
    assert out.stats.new_tokens == len(out.tokens)
    return out.stats


@pytest.mark.parametrize("kind", ["model", "head"])
@pytest.mark.parametrize("method", ["sampling", "sps", "specinfer", "mtad"])
def test_a_decode_fills_the_split_of_its_time_and_the_counts_the_cost_model_reads(models, method, kind):
    target, draft = models
    stats = decode((target, tiny_head(target, 1, sharpness=2.0) if kind == "head" else draft), method, TOKEN_PROMPT)
    assert stats.prompt_tokens == len(TOKEN_PROMPT)
    assert 0 < stats.target_prefill_seconds < stats.target_seconds and stats.prefill_seconds <= stats.seconds
    assert stats.draft_prefill_seconds <= stats.draft_seconds
    assert stats.target_seconds + stats.draft_seconds <= stats.seconds
    assert stats.host_seconds == pytest.approx(stats.seconds - stats.target_seconds - stats.draft_seconds)
    if method == "sampling":
        assert stats.draft_calls == stats.draft_rows == stats.draft_seconds == 0
    else:  # every draft forward after the prefill reads a row at least
        assert stats.draft_calls > 0 and stats.draft_rows >= stats.draft_calls and stats.draft_prefill_seconds > 0
    counts = Counts.of(stats)
    assert counts == Counts.of(stats.as_dict())  # the record and its stored form
    assert (counts.new_tokens, counts.target_calls, counts.draft_calls, counts.drafted, counts.tree_nodes) == (
        stats.new_tokens,
        stats.target_calls,
        stats.draft_calls,
        stats.drafted,
        stats.tree_nodes,
    )
    assert (counts.prompt_tokens, counts.generations) == (len(TOKEN_PROMPT), 1)
    if stats.draft_calls:
        assert counts.draft_rows_per_call == stats.draft_rows / stats.draft_calls
    # the cost model's split: the prefills out of the forwards' seconds, host the rest
    cost = GenerationCost.of(method, stats.as_dict())
    assert cost.prefill_seconds == pytest.approx(stats.prefill_seconds)
    assert cost.target_seconds == pytest.approx(stats.target_seconds - stats.target_prefill_seconds)
    assert cost.host_seconds == pytest.approx(stats.host_seconds)


def test_a_trees_draft_rows_are_what_its_forwards_read_not_its_nodes(models):
    # SpecInfer's (4, 2, 2) tree: 28 nodes from three draft forwards of 1, 4 and 8 rows (13, plus the
    # accepted tokens a block's first forward catches up on), not 28
    stats = decode(models, "specinfer", TOKEN_PROMPT, k_config=(4, 2, 2))
    blocks = len(stats.accept_lengths)
    assert stats.draft_calls == 3 * blocks and stats.tree_nodes == 28 * blocks
    assert 13 * blocks <= stats.draft_rows < 28 * blocks
    assert Counts.of(stats).draft_rows_per_call < stats.tree_nodes / stats.draft_calls


# ---------------------------------------------------------------- one cell, three reports


class NoScores:
    """A task that scores nothing: the cell metrics of the runner without a task's scorer."""

    def aggregate(self, scores, ids):
        return {}

    def unfinished(self, scores):
        return None


def turn(stats: DecodeStats, prompt: list[int]) -> dict:
    """A turn as the runner records it (mtad.runner.loop)."""
    tokens = [1] * stats.new_tokens
    return {
        "turn": 0,
        "prompt_tokens": len(prompt),
        "text": "x",
        "completion": "x",
        "token_ids": tokens,
        "stats": stats.as_dict(),
        "logprob_sum": -1.0,
        "logprob_n": len(tokens),
        "energy": {"meter": "none", "joules": None, "reason": "no meter"},
    }


def write_cell(root, method: str, params, generations: list[DecodeStats]) -> None:
    """A finished cell of the runner's layout, one example per generation."""
    cell = root / "claims" / PAIR / "chat" / method
    cell.mkdir(parents=True)
    records = [
        {"id": f"e{i}", "samples": [{"turns": [turn(g, PROMPTS[i])], "scores": {}, "mean_logprob": None}]}
        for i, g in enumerate(generations)
    ]
    (cell / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    metrics = cell_metrics(NoScores(), records, [r["id"] for r in records])
    (cell / "metrics.json").write_text(json.dumps({"status": "complete", **metrics}))
    machine = {"machine": "this CPU (2 CPUs)", "cpu": "this CPU", "cpu_count": 2, "cpu_isa": ["avx2"], "gpus": []}
    env = {**machine, "cell": {"method": {"name": method, **asdict(params)}}}
    (cell / "env.json").write_text(json.dumps(env))


def test_one_cell_gives_the_same_modelled_ratio_in_the_claims_table2_and_the_bench(models, tmp_path):
    methods = ("mtad", "sampling")
    configs = {
        m: Config(f"{m} fast", "ours", m, get_decoder(m, target=models[0], draft=models[1], **TOKEN_PARAMS[m]).params)
        for m in methods
    }
    generations = {m: [decode(models, m, p, seed=i) for i, p in enumerate(PROMPTS)] for m in methods}
    for m in methods:
        write_cell(tmp_path, m, configs[m].params, generations[m])
    cells = load_cells(tmp_path)

    # Table 2: each cell's metrics.json totals
    table2 = add_modelled_speedups(cells).set_index("method").loc["mtad", "modelled_vs_sampling"]
    # the claims report: the per-example sums of the paired prompts
    frame = example_frame(cells)
    wide = paired(frame, list(methods), ["seconds", *COUNT_FIELDS])
    claims = _modelled_ratio(wide, list(methods), PAIR)["ratio"]
    # the bench: the same records summed as one repetition of the two prompts
    rows = summarise(list(configs.values()), {c.label: [generations[m]] for m, c in configs.items()})
    payload = {"setup": {"pair": PAIR}, "environment": {"threads": 1}, "rows": rows, "curve": None}
    (bench,) = [r["modelled_on_accelerator"] for r in modelled_rows(payload) if r["method"] == "mtad"]

    assert claims == pytest.approx(table2, rel=1e-12) and bench == pytest.approx(table2, rel=1e-12)
    # and the counts behind them: prompts, generations and the draft's rows included
    by_method = cells.set_index("method")
    table_counts = _counts(by_method.loc["mtad"].to_dict())
    (bench_row,) = [r for r in rows if r["method"] == "mtad"]
    assert table_counts == Counts.of(bench_row["counts"])
    assert table_counts.prompt_tokens == sum(map(len, PROMPTS)) and table_counts.generations == 2
    drafted = generations["mtad"]
    assert table_counts.draft_rows_per_call == sum(g.draft_rows for g in drafted) / sum(g.draft_calls for g in drafted)


def test_the_record_names_what_made_it_and_a_cell_refuses_a_decoder_that_ran_other_settings(models):
    from omegaconf import OmegaConf

    from mtad.runner.loop import check_settings

    target, draft = models
    decoder = get_decoder("mtad", target=target, draft=draft, decode_path="static", beam_width=3)
    out = decoder.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=4, generator=torch.Generator().manual_seed(0))
    assert out.settings == {
        "method": "mtad",
        **asdict(decoder.params),
        "decode_path": "static",
        "stop_rule": "eos",
    }
    assert out.settings["beam_width"] == 3
    cfg = OmegaConf.create({"method": {**asdict(decoder.params)}, "stop_rule": "eos"})
    check_settings(out.settings, cfg)  # the cell names what ran
    cfg.method.beam_width = 4
    with pytest.raises(RuntimeError, match="beam_width: 4, 3"):
        check_settings(out.settings, cfg)
    cfg.method.beam_width, cfg.stop_rule = 3, "block"
    with pytest.raises(RuntimeError, match="stop_rule"):
        check_settings(out.settings, cfg)
