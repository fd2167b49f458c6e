"""Prompt-lookup drafting (mtad/decoding/lookup.py): the n-gram rule, its point-mass q, SpS with
lookup alone and in front of a draft model or head, the pairs that load it, and the methods that
refuse it. Exactness against the enumerated target: tests/test_lookup_exact.py."""

import pytest
import torch

from mtad.decoding import DECODERS, get_decoder
from mtad.decoding.lookup import PromptLookup, ngram_continuation, point_masses
from mtad.decoding.tree import DraftTree
from mtad.models import load_pair
from mtad.models.pairs import check_pair_settings, pair_config
from mtad.models.tiny import biased_llama, tiny_head, tiny_llama

VOCAB = 4
REPEATED = torch.tensor([[1, 3, 2, 1, 3]])  # "1 3" recurs: lookup copies "2 1"
UNIQUE = torch.tensor([[1, 3, 2]])  # no token recurs: lookup finds nothing in the first block
SHORT_COPY = torch.tensor([[1, 2, 3, 3]])  # only "3" recurs, just before the end: lookup copies "3" alone
GREEDY = {"temperature": 0.0}


def seq(*tokens: int) -> torch.Tensor:
    return torch.tensor(tokens)


@pytest.mark.parametrize(
    "context,gamma,max_ngram,min_ngram,expected",
    [
        ((1, 3, 2, 1, 3), 2, 3, 1, (2, 1)),  # "1 3" recurs
        ((1, 3, 2, 1, 3), 4, 3, 1, (2, 1, 3)),  # cut at the end of the context
        ((1, 2, 9, 1, 2, 8, 2), 3, 3, 1, (8, 2)),  # only "2" recurs: its most recent earlier occurrence
        ((5, 1, 2, 7, 6, 2, 4, 1, 2), 2, 3, 1, (7, 6)),  # "1 2" (longer) beats "2" (more recent)
        ((5, 1, 2, 7, 6, 2, 4, 1, 2), 2, 3, 3, ()),  # no 3-gram recurs and min_ngram forbids shorter
        ((1, 3, 2), 2, 3, 1, ()),  # nothing recurs
        ((7,), 2, 3, 1, ()),  # one token: nothing before it
        ((5, 5, 5, 5), 4, 3, 1, (5,)),  # "5 5 5" at 0: its continuation is the last token
    ],
)
def test_the_longest_recurring_ngram_gives_the_continuation(context, gamma, max_ngram, min_ngram, expected):
    got = ngram_continuation(seq(*context), gamma, max_ngram, min_ngram)
    assert got.tolist() == list(expected)


def test_q_is_a_point_mass_on_each_copied_token():
    q = point_masses(seq(2, 0, 3), VOCAB)
    assert q.dense().tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]]
    assert q.prob_of(seq(2, 1, 3)).tolist() == [1.0, 0.0, 1.0]
    wide = point_masses(seq(2, 0, 7), 10, width=3)  # rows as wide as a top-3 draft's, ids ascending
    assert wide.ids.tolist() == [[0, 1, 2], [0, 1, 2], [0, 1, 7]]
    assert wide.dense().argmax(-1).tolist() == [2, 0, 7] and wide.probs.sum(-1).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"max_ngram": 0}, "max_ngram must be an int >= 1"),
        ({"max_ngram": 2, "min_ngram": 3}, "must not exceed"),
        ({"model_above": 0.5}, r"^lookup model_above needs a draft model to prefer \(draft.model\), got none$"),
        ({"model_above": 1.5, "model": torch.nn.Identity()}, r"^lookup model_above must be null \(off\) or a prob"),
        ({"model_above": 0, "model": torch.nn.Identity()}, r"in \(0, 1\], got 0$"),
    ],
)
def test_bad_ngram_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PromptLookup(**kwargs)


def generate(draft, prompt, max_new_tokens, method="sps", path="eager", seed=0, **params):
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **params)
    return decoder.generate(prompt, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))


def test_without_a_match_lookup_alone_takes_one_target_step_and_drafts_nothing():
    out = generate(PromptLookup(), UNIQUE, max_new_tokens=1)
    assert (out.stats.target_calls, out.stats.draft_calls, out.stats.drafted, out.stats.accepted) == (1, 0, 0, 0)
    assert out.stats.accept_lengths == []  # a block with nothing drafted is no acceptance length


def test_with_a_match_lookup_drafts_without_a_draft_call():
    out = generate(PromptLookup(), REPEATED, max_new_tokens=1, gamma=2)
    assert (out.stats.target_calls, out.stats.draft_calls, out.stats.drafted) == (1, 0, 2)
    assert out.settings["lookup"] == {"max_ngram": 3, "min_ngram": 1, "with_model": False, "model_above": None}


@pytest.mark.parametrize("kind", ["model", "head"])
def test_the_draft_model_drafts_only_where_lookup_finds_nothing(kind):
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = tiny_head(target, 1, sharpness=3.0) if kind == "head" else tiny_llama(1, VOCAB, sharpness=3.0)
    copied = generate(PromptLookup(model=model), REPEATED, max_new_tokens=1, gamma=2)
    assert (copied.stats.draft_calls, copied.stats.drafted) == (0, 2)
    drafted = generate(PromptLookup(model=model), UNIQUE, max_new_tokens=1, gamma=2)
    assert drafted.stats.draft_calls >= 1 and drafted.stats.drafted >= 1


@pytest.mark.parametrize("kind,calls", [("alone", 0), ("model", 1), ("head", 2)])
def test_the_draft_model_continues_a_copied_chain_shorter_than_gamma(kind, calls):
    """The copied "3" is followed by one token of the draft's: a model reads the copied token in
    its one forward, a head in a forward of its own."""
    assert ngram_continuation(SHORT_COPY[0], 2, 3, 1).tolist() == [3]
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = {"alone": None, "model": tiny_llama(1, VOCAB, sharpness=3.0), "head": tiny_head(target, 1, sharpness=3.0)}
    out = generate(PromptLookup(model=model[kind]), SHORT_COPY, max_new_tokens=1, gamma=2, top_k=3)
    assert (out.stats.drafted, out.stats.draft_calls) == (1 if kind == "alone" else 2, calls)


@pytest.mark.parametrize("path", ["eager", "static"])
@pytest.mark.parametrize("kind", ["alone", "model", "head"])
@pytest.mark.parametrize("prompt", [REPEATED, UNIQUE, SHORT_COPY], ids=["repeated", "unique", "short-copy"])
def test_greedy_lookup_sps_emits_the_targets_greedy_tokens(path, kind, prompt):
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = {"alone": None, "model": tiny_llama(1, VOCAB, sharpness=3.0), "head": tiny_head(target, 1, sharpness=3.0)}
    out = generate(PromptLookup(model=model[kind]), prompt, max_new_tokens=24, path=path, gamma=3, **GREEDY)
    reference = generate(None, prompt, max_new_tokens=24, method="sampling", path=path, **GREEDY)
    assert out.tokens == reference.tokens
    assert out.stats.accepted > 0  # the output repeats itself: copied drafts were accepted


def methods_that_copy() -> str:
    """The methods that take a lookup draft, as a refusal names them (SpS, SpecInfer, and any
    method registered since that declares it)."""
    takes = sorted(name for name, cls in DECODERS.items() if cls.supports_lookup)
    assert {"sps", "specinfer"} <= set(takes)
    return ", ".join(takes)


@pytest.mark.parametrize("method", ["spectr", "mtad", "mmtad"])
def test_methods_without_lookup_refuse_it_naming_those_with(method):
    with pytest.raises(
        ValueError, match=f"^{method} does not draft by prompt lookup .*methods that do: {methods_that_copy()}$"
    ):
        get_decoder(method, target=tiny_llama(0, VOCAB), draft=PromptLookup())


def test_sampling_ignores_a_lookup_draft():
    out = generate(PromptLookup(), REPEATED, max_new_tokens=3, method="sampling")
    assert "lookup" not in out.settings and out.stats.draft_calls == 0


def test_a_run_without_lookup_records_no_lookup_setting():
    out = generate(tiny_llama(1, VOCAB, sharpness=3.0), REPEATED, max_new_tokens=3)
    assert "lookup" not in out.settings


@pytest.mark.parametrize("name,carries", [("tiny_llama_lookup", None), ("tiny_llama_head_lookup", "FeatureHead")])
def test_lookup_pairs_load_and_run_sps(name, carries):
    pair = load_pair(name)
    assert isinstance(pair.draft, PromptLookup)
    assert (type(pair.draft.model).__name__ if pair.draft.model is not None else None) == carries
    prompt = torch.tensor([pair.tokenizer("Summarize the article. Summarize the article.")["input_ids"]])
    out = get_decoder("sps", target=pair.target, draft=pair.draft, decode_path=pair.decode_path).generate(
        prompt, max_new_tokens=6, generator=torch.Generator().manual_seed(0)
    )
    assert len(out.tokens) == 6 and out.stats.drafted >= 1


def test_the_embedded_lookup_pairs_resolve():
    for name in ("smollm2_135m_lookup", "smollm2_135m_head_lookup"):
        assert pair_config(name)["draft"]["source"] == "lookup"


def test_lookup_sps_repeats_itself_under_a_seed_and_stops_at_eos():
    first, again = (generate(PromptLookup(), REPEATED, max_new_tokens=16, gamma=3, seed=7) for _ in range(2))
    assert first.tokens == again.tokens
    eos = first.tokens[5]
    stopped = get_decoder("sps", target=tiny_llama(0, VOCAB, sharpness=3.0), draft=PromptLookup(), gamma=3).generate(
        REPEATED, max_new_tokens=16, eos_token_id=eos, generator=torch.Generator().manual_seed(7)
    )
    assert stopped.tokens == first.tokens[: first.tokens.index(eos) + 1]


def test_a_lookup_pair_with_a_bad_ngram_length_is_refused_in_one_line():
    cfg = pair_config("tiny_llama_lookup")
    cfg["draft"]["min_ngram"] = 0
    with pytest.raises(ValueError, match=r"^lookup min_ngram must be an int >= 1, got 0$"):
        load_pair(cfg)


def test_mtad_run_refuses_a_lookup_pair_for_a_method_that_does_not_copy_before_loading(tmp_path):
    from test_run import mtad_run

    proc = mtad_run(["pair=tiny_llama_lookup", "method=mtad", "task=chat", "limit=1"], tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.log
    assert (
        "pair=tiny_llama_lookup: mtad does not draft by prompt lookup (draft=lookup); methods that do: "
        f"{methods_that_copy()}" in proc.log
    )
    assert not (tmp_path / "runs").exists()


def draw_trees(decoder) -> list:
    """The trees `decoder` (a SpecInfer) drafts, kept as it drafts them."""
    trees, draft_tree = [], decoder.draft_tree

    def kept():
        trees.append(draft_tree())
        return trees[-1]

    decoder.draft_tree = kept
    return trees


def specinfer(draft, prompt, max_new_tokens=1, seed=0, **params):
    decoder = get_decoder("specinfer", target=tiny_llama(0, VOCAB, sharpness=3.0), draft=draft, **params)
    trees = draw_trees(decoder)
    out = decoder.generate(prompt, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))
    return out, trees


def test_specinfer_with_lookup_alone_verifies_the_copied_chain_or_takes_one_target_step():
    out, trees = specinfer(PromptLookup(), REPEATED, k_config=(2, 2))
    assert (trees[0].tokens, trees[0].parents, trees[0].copied) == ([2, 1], [-1, 0], {-1: 0, 0: 1})
    assert (out.stats.target_calls, out.stats.draft_calls, out.stats.drafted, out.stats.tree_nodes) == (1, 0, 2, 2)
    nothing, _ = specinfer(PromptLookup(), UNIQUE, k_config=(2, 2))
    assert (nothing.stats.target_calls, nothing.stats.drafted, nothing.stats.accept_lengths) == (1, 0, [])


@pytest.mark.parametrize("kind", ["model", "head"])
def test_specinfer_adds_the_copied_chain_beside_the_drawn_tree_after_every_drawn_node(kind):
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = tiny_head(target, 1, sharpness=3.0) if kind == "head" else tiny_llama(1, VOCAB, sharpness=3.0)
    out, trees = specinfer(PromptLookup(model=model), REPEATED, k_config=(2, 2))
    tree = trees[0]
    drawn = len(tree) - 2  # nodes the draft drew: every one before the copied chain
    assert tree.copied == {-1: drawn, drawn: drawn + 1} and tree.tokens[drawn:] == [2, 1]
    roots = [c for c in tree.children(-1) if c != drawn]  # the drawn root children given nodes
    assert len(roots) + len(tree.repeats) == 2 and drawn == 3 * len(roots)  # each with its 2 children
    assert out.stats.draft_calls == (2 if roots else 1) and out.stats.tree_nodes == len(tree)


def test_a_drawn_root_child_repeating_the_copy_gets_no_node_but_keeps_its_place():
    """A draft sure of the copied token draws it for every root child: none becomes a node (the
    copy's refusal makes them certain refusals), so the tree is the copied chain and no level is
    drafted below; the drawn children still count, in draw order, for the multi-draft rule."""
    sure = biased_llama(1, torch.tensor([0.0, 0.0, 30.0, 0.0]))  # q(2) = 1 to double precision
    out, trees = specinfer(PromptLookup(model=sure), REPEATED, k_config=(2, 2))
    assert (trees[0].tokens, trees[0].repeats) == ([2, 1], [0, 1])
    assert trees[0].drawn_children(-1) == ([2, 2], [None, None])
    assert (out.stats.draft_calls, out.stats.tree_nodes) == (1, 2)
    plain, plain_trees = specinfer(sure, REPEATED, k_config=(2, 2))  # the same draft without lookup
    assert len(plain_trees[0]) == 6 and plain.stats.draft_calls == 2


def test_drawn_children_interleave_the_repeats_in_draw_order():
    tree = DraftTree()
    for token in (3, 0):  # drawn children of the root, drawn 2nd and 4th of four (1st and 3rd repeated 2)
        tree.add(token, -1)
    tree.add_copied([2, 1])
    tree.repeats = [0, 2]
    assert tree.drawn_children(-1) == ([2, 3, 2, 0], [None, 0, None, 1])
    assert tree.drawn_children(2) == ([], [])  # a copied node has only its copied child


@pytest.mark.parametrize("budget,drawn,draft_calls", [(4, 2, 1), (3, 0, 0)])
def test_specinfer_node_budget_counts_the_copy_first(budget, drawn, draft_calls):
    """k_config (2, 2) and a copy of 2 tokens: a budget of 4 leaves the draft its 2 root children
    (drawn, with or without a node), no room for a level below; one of 3 leaves it no room for
    the root's children, and the draft is not called."""
    draft = PromptLookup(model=tiny_llama(1, VOCAB, sharpness=3.0))
    out, trees = specinfer(draft, REPEATED, k_config=(2, 2), node_budget=budget)
    tree = trees[0]
    assert tree.tokens[-2:] == [2, 1] and len(tree) - 2 + len(tree.repeats) == drawn
    assert out.stats.draft_calls == draft_calls and len(tree) <= budget


@pytest.mark.parametrize("path", ["eager", "static"])
@pytest.mark.parametrize("kind", ["alone", "model", "head"])
@pytest.mark.parametrize("prompt", [REPEATED, UNIQUE, SHORT_COPY], ids=["repeated", "unique", "short-copy"])
def test_greedy_lookup_specinfer_emits_the_targets_greedy_tokens(path, kind, prompt):
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = {"alone": None, "model": tiny_llama(1, VOCAB, sharpness=3.0), "head": tiny_head(target, 1, sharpness=3.0)}
    lookup = PromptLookup(model=model[kind])
    out = generate(lookup, prompt, max_new_tokens=24, method="specinfer", path=path, k_config=(2, 2), **GREEDY)
    reference = generate(None, prompt, max_new_tokens=24, method="sampling", path=path, **GREEDY)
    assert out.tokens == reference.tokens
    assert out.stats.accepted > 0


@pytest.mark.parametrize("kind", ["model", "head"])
@pytest.mark.parametrize("prompt", [REPEATED, SHORT_COPY], ids=["full-copy", "short-copy"])
def test_a_gate_never_met_drafts_what_the_merge_does(kind, prompt):
    """model_above = 1: the tiny drafts' q never reaches it, so every block is the copy and the
    draft's continuation, token for token (a full copy costs the one draft call that reads q)."""
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = tiny_head(target, 1, sharpness=3.0) if kind == "head" else tiny_llama(1, VOCAB, sharpness=3.0)
    merged = generate(PromptLookup(model=model), prompt, max_new_tokens=16, gamma=2, seed=3)
    never = generate(PromptLookup(model=model, model_above=1.0), prompt, max_new_tokens=16, gamma=2, seed=3)
    assert never.tokens == merged.tokens and never.stats.accept_lengths == merged.stats.accept_lengths
    assert never.settings["lookup"]["model_above"] == 1.0


@pytest.mark.parametrize("method,params", [("sps", {"gamma": 2}), ("specinfer", {"k_config": (2, 2)})])
@pytest.mark.parametrize("kind", ["model", "head"])
def test_a_gate_always_met_drafts_as_the_model_alone(method, params, kind):
    """model_above at its lowest: the model is always confident enough, the copy never drafts,
    and the run is the draft model's own, token for token."""
    target = tiny_llama(0, VOCAB, sharpness=3.0)
    model = tiny_head(target, 1, sharpness=3.0) if kind == "head" else tiny_llama(1, VOCAB, sharpness=3.0)
    gated = generate(PromptLookup(model=model, model_above=1e-9), REPEATED, 16, method=method, seed=5, **params)
    alone = generate(model, REPEATED, 16, method=method, seed=5, **params)
    assert gated.tokens == alone.tokens and gated.stats.accept_lengths == alone.stats.accept_lengths
    assert gated.stats.draft_calls == alone.stats.draft_calls


def test_the_gate_reads_q_at_temperature_one_when_greedy():
    """At temperature 0 q is one-hot; the gate reads the temperature-1 q instead, so a draft that
    is unsure there still leaves the block to the copy."""
    lookup = PromptLookup(model=tiny_llama(1, VOCAB), model_above=0.9)
    decoder = get_decoder("sps", target=tiny_llama(0, VOCAB), draft=lookup, temperature=0.0)
    assert not lookup.prefers_model(decoder, torch.tensor([0.0, 0.1, 0.0, 0.0]))
    assert lookup.prefers_model(decoder, torch.tensor([0.0, 9.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    "name,draft,message",
    [
        (
            "tiny_llama_head_lookup",
            {"model_above": 1.5},
            r"model_above must be null \(off\) or a probability in \(0, 1\]",
        ),
        ("tiny_llama_lookup", {"model_above": 0.7}, r"model_above needs a draft model to prefer \(draft.model\)"),
        (
            "tiny_llama_head_lookup",
            {"model_abov": 0.7},
            "takes max_ngram, min_ngram, model, model_above; unknown: model_abov",
        ),
        ("tiny_llama_lookup", {"min_ngram": 0}, "min_ngram must be an int >= 1, got 0"),
    ],
)
def test_the_runner_refuses_a_bad_lookup_setting_in_one_line_before_loading(name, draft, message):
    from mtad.runner.checks import SettingError, check_pair

    cfg = pair_config(name)
    cfg["draft"].update(draft)
    with pytest.raises(SettingError, match=f"^pair={name}: (lookup |draft.source lookup ){message}"):
        check_pair(cfg, "sps")


def test_a_pair_sets_the_gate():
    cfg = pair_config("tiny_llama_head_lookup")
    cfg["draft"]["model_above"] = 0.7
    check_pair_settings(cfg)
    pair = load_pair(cfg)
    assert pair.draft.model_above == 0.7 and pair.draft.settings()["model_above"] == 0.7
