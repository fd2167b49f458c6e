"""The draft measurement on the tiny target with both draft kinds, as cells: every kind and method,
counts that add up, figures read back from the cells, goals judged per draft."""

from __future__ import annotations

import pytest
import torch

from mtad.distill.draft_measurement import GOALS, decoding_methods, goals_met, markdown
from mtad.metrics.acceptance_terms import per_token_alpha
from mtad.tasks.heldout.kinds import ALL_KINDS, UNSEEN_KINDS

torch.set_num_threads(1)
TINY = ["pair=tiny_llama", "task.per_kind=1", "task.max_new_tokens=6", "threads=1", "progress=false"]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from mtad.experiments.drafts import measure

    root = tmp_path_factory.mktemp("runs")
    overrides = [*TINY, f"results_root={root}"]
    return root, overrides, measure(overrides, compare=["tiny_llama_head"], progress=False)


@pytest.fixture(scope="module")
def result(cells):
    return cells[2]


def test_every_family_method_and_draft_is_measured(result):
    assert set(result["drafts"]) == {"tiny_llama", "tiny_llama_head"}
    assert result["drafts"]["tiny_llama_head"]["kind"] == "head"
    assert result["drafts"]["tiny_llama"]["kind"] == "LlamaForCausalLM"  # the tiny pair's draft: a small model
    for name, r in result["drafts"].items():
        assert set(r["families"]) == set(ALL_KINDS)
        for fam in r["families"].values():
            assert set(fam["decoding"]) == set(decoding_methods())
            assert fam["decoding"]["sampling"]["block_efficiency"] == pytest.approx(1.0)
            for method in ("sps", "mtad", "mmtad"):
                assert 1.0 <= fam["decoding"][method]["block_efficiency"] <= 5.0
            # per-token alpha is the i.i.d. chain's (SpS at its γ); a tree, k chains or a joint block have none
            assert 0.0 <= fam["decoding"]["sps"]["alpha"] <= 1.0
            assert all(row["alpha"] is None for m, row in fam["decoding"].items() if m != "sps")
            assert 0.0 <= fam["distribution"]["accept_paper"] <= 1.0 and fam["distribution"]["positions"] > 0
        assert r["cost"]["draft_step_ms"] > 0 and r["cost"]["target_step_ms"] > 0
    # one sampling run per prompt, shared: both drafts' tables carry the same tokens
    layers, head = (result["drafts"][n]["families"]["chat"]["decoding"]["sampling"] for n in LAYERS_HEAD)
    assert layers["new_tokens"] == head["new_tokens"]
    # the drafts differ, so their teacher-forced agreement does too
    assert (
        result["drafts"]["tiny_llama"]["families"]["chat"]["distribution"]["tv"]
        != result["drafts"]["tiny_llama_head"]["families"]["chat"]["distribution"]["tv"]
    )


LAYERS_HEAD = ("tiny_llama", "tiny_llama_head")


def test_the_figures_are_read_from_ordinary_cells_and_a_rerun_resumes_them(cells):
    """Each (pair, method) is a cell of experiment=draft on the heldout task; its records hold every
    request of every kind once, and a second run generates nothing and reads the same figures."""
    from mtad.experiments.drafts import measure
    from mtad.records import read_records

    root, overrides, first = cells
    methods = list(decoding_methods())
    found = [p.parent.relative_to(root).parts for p in root.rglob("metrics.json")]
    assert all(f[:1] == ("draft",) and f[2] == "heldout" for f in found)
    assert sorted(f[1] for f in found) == ["tiny_llama"] * len(methods) + ["tiny_llama_head"] * (len(methods) - 1)
    records = read_records(next(p for p in root.rglob("samples.jsonl") if "/tiny_llama/heldout/sps" in p.as_posix()))
    assert sorted(r["id"].split("-")[0] for r in records) == sorted(ALL_KINDS)
    again = measure(overrides, compare=["tiny_llama_head"], progress=False)
    for name in LAYERS_HEAD:
        assert again["drafts"][name]["families"] == first["drafts"][name]["families"]


def test_goals_follow_the_numbers(result):
    r = result["drafts"]["tiny_llama_head"]
    met = goals_met(r)
    chat_alpha = r["families"]["chat"]["decoding"]["sps"]["alpha"]
    assert met["alpha_chat"] == (chat_alpha >= GOALS["alpha_chat"])
    forged = {
        **r,
        "families": {
            f: {**x, "decoding": {**x["decoding"], "sps": {**x["decoding"]["sps"], "alpha": 0.99}}}
            for f, x in r["families"].items()
        },
    }
    assert goals_met(forged)["alpha_chat"] and goals_met(forged)["alpha_each_trained_kind"]
    assert goals_met(forged)["alpha_each_unseen_kind"]
    text = markdown(result, ["# x"])
    assert "| chat | tiny_llama_head | sps |" in text and "| chat | tiny_llama | sps |" in text
    assert "| chat | — | sampling |" in text and "| goal | threshold | tiny_llama | tiny_llama_head |" in text


def test_alpha_inverts_the_mean_accepted_length():
    for gamma in (2, 4):
        for alpha in (0.1, 0.4, 0.75):
            mean = sum(alpha**i for i in range(1, gamma + 1))
            assert per_token_alpha(mean, gamma) == pytest.approx(alpha, abs=1e-6)
    assert per_token_alpha(0, 4) == 0.0 and per_token_alpha(4, 4) == 1.0


def test_groups_separate_the_kinds_never_trained_and_state_the_gap(result):
    groups = result["drafts"]["tiny_llama_head"]["groups"]
    assert set(groups["unseen"]["kinds"]) == set(UNSEEN_KINDS)
    assert set(groups["trained"]["kinds"]) == set(ALL_KINDS) - set(UNSEEN_KINDS)
    fam = result["drafts"]["tiny_llama_head"]["families"]
    unseen_alpha = sum(fam[k]["decoding"]["sps"]["alpha"] for k in UNSEEN_KINDS) / len(UNSEEN_KINDS)
    assert groups["unseen"]["alpha_sps"] == pytest.approx(unseen_alpha)
    assert groups["gap"]["alpha_sps"] == pytest.approx(groups["trained"]["alpha_sps"] - unseen_alpha)
    assert "| tiny_llama_head | (b) never trained |" in markdown(result, ["# x"])


def test_the_results_page_quotes_the_committed_draft_measurement():
    """The results page's draft figures are the rendering of results/draft/draft.json's measurement: a figure
    edited by hand, or a measurement committed without its page, fails here."""
    import json
    from pathlib import Path

    from mtad.distill.draft_measurement import read_measurement, readme_block

    root = Path(__file__).resolve().parents[1]
    result = read_measurement(root / "results" / "draft")
    page = (root / "results" / "README.md").read_text()
    assert readme_block(result) in page
    other = json.loads(json.dumps(result))
    other["drafts"][result["pair"]]["groups"]["trained"]["alpha_sps"] += 0.01
    assert readme_block(other) not in page  # the check reads the figures, not just the layout


def synthetic_family(accepts: list[float], speed: float) -> dict:
    """A kind's measurement from per-request figures: request i accepts accepts[i] per position, and
    its speculative run makes 1 + accepts[i] tokens per target call, `speed` x sampling's rate."""
    from mtad.distill.draft_measurement import rows_of

    def run(tokens, calls, seconds, accepted=0, drafted=0):
        return {"new_tokens": tokens, "target_calls": calls, "seconds": seconds, "accepted": accepted,
                "drafted": drafted, "accept_lengths": [accepted / calls] * calls if drafted else []}  # fmt: skip

    by_method = {"sampling": [], "sps": [], "mtad": [], "mmtad": []}
    for a in accepts:
        calls = 10
        by_method["sampling"].append(run(40, 40, 1.0))
        for m in ("sps", "mtad", "mmtad"):
            by_method[m].append(run(round(calls * (1 + 4 * a)), calls, 1.0 / speed, round(calls * 4 * a), calls * 4))
    requests = [{"accept_paper_sum": 20 * a, "positions": 20} for a in accepts]
    return {"distribution": {"accept_paper": sum(accepts) / len(accepts), "requests": requests},
            "decoding": rows_of(by_method)}  # fmt: skip


def test_group_intervals_resample_requests_within_kinds():
    from mtad.distill.draft_measurement import group_intervals, group_means

    spread = {"chat": synthetic_family([0.2, 0.4, 0.6, 0.3], 1.2), "code": synthetic_family([0.5, 0.5, 0.5], 1.5)}
    fixed = {"chat": synthetic_family([0.4] * 4, 1.2), "code": synthetic_family([0.5] * 3, 1.5)}
    wide, narrow = group_intervals(spread)["trained"], group_intervals(fixed)["trained"]
    point = group_means(spread)["trained"]
    lo, hi = wide["accept_paper"]
    assert lo < point["accept_paper"] < hi and hi - lo > 0.05  # requests differ: the interval has width
    assert narrow["accept_paper"] == pytest.approx([0.45, 0.45])  # identical requests: no width at all
    speedup = (26 * 1.2 / 40 + 30 * 1.5 / 40) / 2  # tokens/s over sampling's 40, a mean over the two kinds
    assert narrow["speedup_vs_sampling"]["sps"] == pytest.approx([speedup, speedup])
    assert wide["block_efficiency"]["sampling"] == pytest.approx([1.0, 1.0])
    lo, hi = wide["block_efficiency"]["sps"]
    assert lo <= point["block_efficiency"]["sps"] <= hi
    single = {"chat": synthetic_family([0.4], 1.2)}
    assert group_intervals(single) == {}  # one request per kind: nothing to resample


def test_the_model_card_quotes_the_committed_draft_measurement(tmp_path):
    """The committed head's card carries the "Measured" section that the committed measurement renders."""
    import json
    import shutil
    from pathlib import Path

    from mtad.distill.card import refresh_measured
    from mtad.distill.draft_measurement import read_measurement, write_measurement

    root = Path(__file__).resolve().parents[1]
    result = read_measurement(root / "results" / "draft")
    r = result["drafts"][result["pair"]]
    card = (root / r["file"]).with_suffix(".md")
    copy = tmp_path / card.name
    shutil.copy(card, copy)
    shutil.copy(card.with_suffix(".safetensors"), copy.with_suffix(".safetensors"))
    assert refresh_measured(copy, root / "results" / "draft", r["kind"])
    assert copy.read_text() == card.read_text()
    other = json.loads(json.dumps(result))
    other["drafts"][result["pair"]]["families"]["chat"]["decoding"]["sps"]["alpha"] += 0.01
    write_measurement(tmp_path, other)
    refresh_measured(copy, tmp_path, r["kind"])
    assert copy.read_text() != card.read_text()  # the section follows the figures


def test_the_training_curves_name_their_draft_and_tell_every_kind_apart():
    import json
    from pathlib import Path

    from mtad.distill.card import curves_figure

    root = Path(__file__).resolve().parents[1] / "results" / "draft"
    curve = [json.loads(line) for line in (root / "head_training_curve.jsonl").read_text().splitlines()]
    fig = curves_figure(curve, "smollm2_135m_head")
    assert "smollm2_135m_head" in fig._suptitle.get_text()
    for ax in fig.axes:
        kinds = [line for line in ax.lines if not line.get_label().startswith("mean")]
        assert len({line.get_color() for line in kinds}) == len(kinds) > 0
