"""The decodes that the decode-path, energy and embedded-pair checks time: one generation of a
method on a pair, a warm-up and timed repetitions of it, and the tiny float32 pairs and prompt the
decode-path and energy checks run on."""

from __future__ import annotations

import statistics
import time


def generate(method: str, target, draft, path: str, prompt, max_new_tokens: int, seed: int = 0):
    """One decode of `method` at the bench's settings (its `MethodSpec.bench_params` at the default γ), seeded."""
    import torch

    from mtad.decoding.params import ChainFields
    from mtad.decoding.registry import spec
    from mtad.generation import build_decoder, timed_generate

    decoder = build_decoder(method, target, draft, path, spec(method).bench_params(ChainFields().gamma))
    return timed_generate(decoder, prompt, max_new_tokens, torch.Generator().manual_seed(seed))[0]


def timed_runs(method, target, draft, path, prompt, max_new_tokens: int, reps: int) -> dict:
    """One warm-up generation (compilation included), then `reps` timed ones (seed 0 each)."""
    start = time.perf_counter()
    warm = generate(method, target, draft, path, prompt, max_new_tokens)
    warm_s = time.perf_counter() - start
    outs = [generate(method, target, draft, path, prompt, max_new_tokens) for _ in range(reps)]
    s = outs[-1].stats
    return {
        "resolved_path": s.decode_path,
        "tokens_per_s": statistics.median(o.stats.tokens_per_second for o in outs),
        "block_efficiency": s.block_efficiency,
        "new_tokens": s.new_tokens,
        "warm_up_s": round(warm_s, 3),
        "warm_up_compiles": warm.stats.compiles,
        "steady_compiles": sum(o.stats.compiles for o in outs),
        "tokens": outs[-1].tokens,
        "deterministic": all(o.tokens == warm.tokens for o in outs),
    }


def tiny_pairs(device) -> dict:
    """The tiny pairs of conf/pair (float32, the 320-token tiny tokenizer): tiny_llama (a layer
    draft) and tiny_llama_head (a random feature head), sharing one target."""
    from mtad.models.head import build_head
    from mtad.models.tiny import tiny_model, tiny_tokenizer

    vocab = len(tiny_tokenizer())
    target = tiny_model("llama", vocab, 0).to(device).requires_grad_(False)
    draft = tiny_model("llama", vocab, 1).to(device).requires_grad_(False)
    head = build_head(target, num_layers=1, seed=1).to(device).eval().requires_grad_(False)
    return {"tiny_llama": (target, draft), "tiny_llama_head": (target, head)}


def tiny_prompt():
    from mtad.models.tiny import tiny_tokenizer

    return tiny_tokenizer(chat=False)("Speculative decoding drafts tokens with a small model.", return_tensors="pt")[
        "input_ids"
    ]
