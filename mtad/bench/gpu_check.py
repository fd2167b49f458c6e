"""`make gpu-check`: the GPU paths checked in one prepared run (at most 8 minutes on one GPU) on tiny
random-weight models built from configs, with nothing downloaded (HF_HUB_OFFLINE=1):

- ``exactness``: tree attention through the public forward (every node's logits against its path
  run alone), every method's tokens on the device against the same decode on the CPU (float64
  models, the same CPU generator: greedy and seeded sampling must give the same tokens), and a
  chi-square test of the lossless methods' draws on the device against the target distribution
  enumerated on the CPU. The exactness tests (tests/test_decoding_exact.py, test_tree_attention.py,
  test_decode_paths.py) build their models and prompts on the CPU, so their cases run here instead;
- ``decode_paths``: every method on every decode path (`static_kv.DECODE_PATHS`) with the tiny
  pairs (a layer draft and a feature head): tokens/s, block efficiency, the path it resolved to,
  warm-up (compilation) time, and whether its tokens are the eager path's;
- ``energy``: an NVML energy meter (`make_energy_meter("nvml", ...)`) around a short decode;
- ``cost_curve``: ms of one target forward of 1, 2, 3, 5, 9, 17, 33, 65 new tokens over a
  256-token cache (`forward_ms`, eager and static paths) on a 16-layer, 2048-wide bf16 Llama with
  random weights (weights far larger than the cache: the memory-bound regime), its parameter bytes
  and the copy bandwidth (`copy_bandwidth`), hence the floor of a decode step;
- ``embedded_pair``: the embedded pair's methods and their speed-ups over sampling, when its files
  are on this machine (skipped with the reason otherwise).

Without a CUDA device (unless asked for ``device="cpu"``) it is a dry run: every check is listed
with what it would run and the reason it is skipped. Every check is recorded as ran, skipped (with
the reason) or failed (with the error); the report (gpu_check.json, gpu_check.md) is rewritten after
each one. Importing this module needs only the standard library, so the dry run works with a python
that has no torch.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CHECKS = ("exactness", "decode_paths", "energy", "cost_curve", "embedded_pair")
TITLES = {
    "exactness": "exactness on the device (tiny float64 models against the CPU)",
    "decode_paths": "every method on every decode path (tiny pairs)",
    "energy": "NVML energy of a short decode",
    "cost_curve": "target cost curve (one forward per width over a 256-token cache) and copy bandwidth",
    "embedded_pair": "the embedded pair's methods and speed-ups over sampling",
}
# the share of the time budget each check may use (what a check leaves goes to the later ones)
SHARES = {"exactness": 0.3, "decode_paths": 0.35, "energy": 0.04, "cost_curve": 0.11, "embedded_pair": 0.2}
DEFAULT_MINUTES = 8.0
# the tiny models' checks run torch on one CPU thread (more only add overhead to their small products)
ONE_THREAD = ("exactness", "decode_paths", "energy")
DEFAULT_OUT = "results/local/gpu_check"
NO_CUDA = "no CUDA device"
# mtad.decoding.static_kv.DECODE_PATHS, named here for the dry run of a python without torch (a test keeps them equal)
KNOWN_PATHS = ("eager", "static", "compiled", "fast")
KNOWN_METHODS = ("sampling", "sps", "spectr", "specinfer", "mtad", "mmtad")
EMBEDDED_PAIR = "smollm2_135m_head"

# exactness: the cases of tests/test_decode_paths.py and tests/test_decoding_exact.py (which read TOKEN_PARAMS)
TOKEN_VOCAB = 24
TOKEN_PROMPT = [5, 1, 9, 2, 7]
TOKEN_PARAMS = {
    "sampling": {},
    "sps": {"gamma": 3},
    "spectr": {"gamma": 3, "num_drafts": 3},
    "specinfer": {"k_config": (3, 2, 1)},
    "mtad": {"gamma": 3, "beam_width": 3},
    "mmtad": {"gamma": 3, "beam_width": 3},
}
FLOAT64_PAIRS = ("llama", "opt", "llama+head")
DIST_VOCAB, DIST_TOKENS, DIST_PROMPT, FALSE_ALARM = 4, 3, [1, 3, 2], 1e-3
NO_TRUNCATION = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
PAPER = {"temperature": 1.0, "top_k": 3, "top_p": 0.9}
DIST_CASES = (  # (float64 pair, decode path, method, settings, processing)
    ("llama", "static", "sampling", {}, NO_TRUNCATION),
    ("llama", "static", "sps", {"gamma": 2}, NO_TRUNCATION),
    ("llama", "eager", "spectr", {"gamma": 2, "num_drafts": 3}, NO_TRUNCATION),
    ("opt", "eager", "specinfer", {"k_config": (3, 2), "replacement": True}, PAPER),
    ("llama+head", "static", "specinfer", {"k_config": (3, 2), "replacement": False}, NO_TRUNCATION),
    ("llama+head", "static", "sps", {"gamma": 2}, NO_TRUNCATION),
)
TREE_PREFIX = [3, 7, 1, 9, 4]
TREE_LEVELS = (([5, 2, 5], [-1, -1, -1]), ([8, 8, 1, 6], [0, 0, 1, 2]))  # node -> parent, two levels
TREE_ATOL = 1e-9

# the cost curve: widths over a 256-token cache; "gpu": ~0.85 B parameters (1.7 GB in bf16) against
# a ~10 MB cache; "small": the same shape scaled down, for a CPU
CURVE_WIDTHS = (1, 2, 3, 5, 9, 17, 33, 65)
CURVE_CONTEXT = 256
CURVE_PATHS = ("eager", "static")
CURVE_MODELS = {
    "gpu": {
        "config": dict(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
            tie_word_embeddings=False,
        ),
        "dtype": "bfloat16",
        "copy_mb": 1024,
    },
    "small": {
        "config": dict(
            hidden_size=256,
            intermediate_size=704,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=2048,
            max_position_embeddings=1024,
            tie_word_embeddings=False,
        ),
        "dtype": "float32",
        "copy_mb": 64,
    },
}


@dataclass
class Options:
    """What to run. `device`: auto (CUDA when there is one, else a dry run) | cuda | cuda:N | cpu
    (the checks on the CPU: their code paths, not a GPU's numbers); `paths`: decode paths of the
    decode-path check (None: all on CUDA, all but compiled on a CPU); `curve_model`: "gpu" | "small"
    (None: gpu on CUDA, small on a CPU); `quick`: fewer tokens, seeds, draws and repetitions."""

    device: str = "auto"
    checks: tuple[str, ...] = CHECKS
    quick: bool = False
    paths: tuple[str, ...] | None = None
    max_minutes: float = DEFAULT_MINUTES
    curve_model: str | None = None
    embedded_pair: str = EMBEDDED_PAIR

    def __post_init__(self):
        unknown = sorted(set(self.checks) - set(CHECKS))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; valid: {', '.join(CHECKS)}")
        if self.paths is not None and set(self.paths) - set(KNOWN_PATHS):
            raise ValueError(f"unknown decode path(s) {sorted(set(self.paths) - set(KNOWN_PATHS))}")
        if self.curve_model is not None and self.curve_model not in CURVE_MODELS:
            raise ValueError(f"unknown curve model {self.curve_model!r}; valid: {', '.join(CURVE_MODELS)}")

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


class Skipped(Exception):
    """A check that could not run here: the reason, and what it measured before it stopped."""

    def __init__(self, reason: str, data: dict | None = None):
        super().__init__(reason)
        self.data = data or {}


class Failed(Exception):
    """A check whose results are wrong: what is wrong, and the results."""

    def __init__(self, reason: str, data: dict | None = None):
        super().__init__(reason)
        self.data = data or {}


@dataclass
class Context:
    device: object  # torch.device
    options: Options
    until: float = float("inf")  # time.monotonic() deadline of the running check
    log: Callable[[str], None] = print
    pairs: dict | None = None  # the tiny pairs on the device, built once (their compiled bodies are kept)
    warm_paths: set = field(default_factory=set)  # (pair, path, method) that have run

    def tiny_pairs(self) -> dict:
        if self.pairs is None:
            self.pairs = tiny_pairs(self.device)
        return self.pairs

    @property
    def quick(self) -> bool:
        return self.options.quick

    def time_left(self) -> float:
        return self.until - time.monotonic()

    def out_of_time(self, need: float = 0.0) -> bool:
        return self.time_left() < need


# ---------------------------------------------------------------- the machine


def cuda_problem() -> str | None:
    """Why no CUDA device can be used here (None when one can)."""
    try:
        import torch
    except Exception as err:  # noqa: BLE001 - a broken install is as good as none
        return f"{NO_CUDA}: torch is not importable ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        return f"{NO_CUDA}: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"
    return None


def machine_record() -> dict:
    """The machine, python and library versions, the GPUs and the code state."""
    record = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "cpu_count": os.cpu_count(),
    }
    try:
        from mtad.provenance import cpu_model

        record["cpu"] = cpu_model()
    except Exception:  # noqa: BLE001 - the record is best effort
        record["cpu"] = platform.processor() or platform.machine()
    try:
        import torch

        record.update(torch=torch.__version__, cuda_build=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            record["cudnn"] = torch.backends.cudnn.version()
            record["gpus"] = [
                {
                    "index": i,
                    "name": torch.cuda.get_device_name(i),
                    "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
                    "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
                }
                for i in range(torch.cuda.device_count())
            ]
    except Exception as err:  # noqa: BLE001
        record["torch"] = None
        record["torch_problem"] = f"{type(err).__name__}: {err}"
    for name in ("transformers", "scipy"):
        try:
            record[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            record[name] = None
    record["pynvml"] = importlib.util.find_spec("pynvml") is not None
    if record["pynvml"] and record.get("gpus"):
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            record["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception as err:  # noqa: BLE001
            record["driver"] = f"unreadable ({type(err).__name__}: {err})"
    try:
        from mtad.provenance import git_commit

        git = git_commit()
        record["git"] = {k: git.get(k) for k in ("commit", "dirty")}
    except Exception as err:  # noqa: BLE001 - a copy of the tree without git
        record["git"] = f"unknown ({type(err).__name__}: {err})"
    return record


def decode_paths() -> tuple[str, ...]:
    try:
        from mtad.decoding.static_kv import DECODE_PATHS

        return tuple(DECODE_PATHS)
    except Exception:  # noqa: BLE001 - the dry run of a python without torch
        return KNOWN_PATHS


def methods() -> tuple[str, ...]:
    try:
        from mtad.methods import METHODS

        return tuple(METHODS)
    except Exception:  # noqa: BLE001
        return KNOWN_METHODS


def chosen_paths(options: Options, device_type: str) -> tuple[str, ...]:
    if options.paths is not None:
        return tuple(options.paths)
    return tuple(p for p in decode_paths() if device_type == "cuda" or p != "compiled")


def plan(name: str, options: Options, device_type: str = "cuda") -> str:
    """What check `name` runs, in one line."""
    all_methods = ", ".join(methods())
    if name == "exactness":
        dist = ", ".join(f"{m} ({pair}, {path})" for pair, path, m, _, _ in DIST_CASES)
        return (
            f"tree attention (llama eager/static, opt eager) node by node against the path alone (atol {TREE_ATOL}); "
            f"{all_methods} on the float64 pairs {', '.join(FLOAT64_PAIRS)} (eager and static paths), greedy and "
            f"seeded, tokens equal to the CPU's; chi-square of {DIST_TOKENS}-token draws (false alarm {FALSE_ALARM}) "
            f"for {dist}"
        )
    if name == "decode_paths":
        paths = ", ".join(chosen_paths(options, device_type))
        return (
            f"{all_methods} on the paths {paths} with tiny_llama and tiny_llama_head: tokens/s, block efficiency, "
            "resolved path, warm-up and compile time, same tokens as eager"
        )
    if name == "energy":
        return "make_energy_meter('nvml', [device]) around sps decodes of tiny_llama for a few seconds: joules, watts"
    if name == "cost_curve":
        model = options.curve_model or ("gpu" if device_type == "cuda" else "small")
        spec = CURVE_MODELS[model]
        c = spec["config"]
        return (
            f"forward_ms at widths {', '.join(map(str, CURVE_WIDTHS))} over a {CURVE_CONTEXT}-token cache, paths "
            f"{', '.join(CURVE_PATHS)}, on a random {spec['dtype']} Llama ({c['num_hidden_layers']} layers, hidden "
            f"{c['hidden_size']}, vocab {c['vocab_size']}); parameter bytes, copy_bandwidth, the floor of a step"
        )
    if name == "embedded_pair":
        return f"{all_methods} on {options.embedded_pair} (its files must be on this machine): tokens/s, speed-up"
    raise KeyError(name)


# ---------------------------------------------------------------- running and recording


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run(options: Options, out: str | os.PathLike = DEFAULT_OUT, log: Callable[[str], None] = print) -> dict:
    """Run the chosen checks (a dry run without a CUDA device unless `options.device` is cpu), writing
    gpu_check.json and gpu_check.md under `out` after each; returns the payload."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.monotonic()
    out = Path(out)
    problem = None if options.device == "cpu" else cuda_problem()
    payload = {
        "started": now(),
        "dry_run": problem is not None,
        "dry_run_reason": problem,
        "device": None,
        "options": options.as_dict(),
        "machine": machine_record(),
        "checks": [],
    }
    if problem is not None:
        for name in options.checks:
            entry = {"name": name, "title": TITLES[name], "plan": plan(name, options), "status": "skipped"}
            entry["reason"] = problem
            if name == "embedded_pair" and problem.startswith(f"{NO_CUDA}: torch.cuda"):
                files = embedded_pair_problem(options.embedded_pair)
                entry["data"] = {"files": f"missing: {files}" if files else "present: it would run"}
            payload["checks"].append(entry)
        return finish(payload, started, out, log)
    import torch

    device = torch.device("cuda" if options.device == "auto" else options.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    payload["device"] = str(device)
    if device.type == "cuda":
        payload["device_name"] = torch.cuda.get_device_name(device)
    ctx = Context(device=device, options=options, log=log)
    deadline = started + 60 * options.max_minutes
    # a check that will only say why it is skipped keeps no time for itself
    instant = {n for n in options.checks if n == "embedded_pair" and embedded_pair_problem(options.embedded_pair)}
    for i, name in enumerate(options.checks):
        later = sum(SHARES[n] for n in options.checks[i + 1 :] if n not in instant) * 60 * options.max_minutes
        ctx.until = deadline - later
        entry = {"name": name, "title": TITLES[name], "plan": plan(name, options, device.type)}
        if time.monotonic() >= deadline:
            entry.update(status="skipped", reason=f"the time budget of {options.max_minutes:g} min is spent")
        else:
            log(f"[gpu-check] {name}: {entry['plan']}")
            entry.update(run_check(name, ctx))
            log(f"[gpu-check] {name}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else ""))
        payload["checks"].append(entry)
        write_report(payload, out)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return finish(payload, started, out, log)


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's CPU threads set to `n` inside (None: left alone)."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_check(name: str, ctx: Context) -> dict:
    start = time.perf_counter()
    try:
        with torch_threads(1 if name in ONE_THREAD else None):
            data = CHECK_FUNCTIONS[name](ctx)
        result = {"status": "ran", "data": data}
    except Skipped as err:
        result = {"status": "skipped", "reason": str(err), "data": err.data}
    except Failed as err:
        result = {"status": "failed", "reason": str(err), "data": err.data}
    except Exception as err:  # noqa: BLE001 - one check's error is its result, the others still run
        result = {
            "status": "failed",
            "reason": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(limit=12)[-4000:],
        }
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def finish(payload: dict, started: float, out: Path, log) -> dict:
    payload["wall_s"] = round(time.monotonic() - started, 2)
    payload["summary"] = {s: sum(c["status"] == s for c in payload["checks"]) for s in ("ran", "skipped", "failed")}
    json_path, md_path = write_report(payload, out)
    log(f"[gpu-check] {'dry run: ' if payload['dry_run'] else ''}{payload['summary']} -> {json_path}, {md_path}")
    return payload


def exit_code(payload: dict) -> int:
    """0 unless a check failed (a dry run, or skipped checks, exit 0)."""
    return 1 if payload["summary"]["failed"] else 0


# ---------------------------------------------------------------- tiny models


def float64_pair(kind: str, vocab: int, sharpness: float, device):
    """A float64 (target, draft) of the exactness tests on `device`: "llama", "opt" (a layer draft of
    another seed) or "llama+head" (a random feature head over the target)."""
    from mtad.models.tiny import tiny_head, tiny_llama, tiny_opt

    build = tiny_opt if kind == "opt" else tiny_llama
    target = build(0, vocab, sharpness=sharpness).to(device)
    if kind == "llama+head":
        return target, tiny_head(target, 1, sharpness=sharpness).to(device)
    return target, build(1, vocab, sharpness=sharpness).to(device)


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


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# ---------------------------------------------------------------- 1. exactness


def check_exactness(ctx: Context) -> dict:
    data = {
        "reference": "cpu" if ctx.device.type != "cpu" else "cpu (the device itself: the comparison is trivial)",
        "dtype": "float64",
        "note": "the exactness tests build their models and prompts on the CPU; their cases run here on the device",
    }
    failures = []
    for part, cases in (
        ("tree_attention", tree_attention_cases),
        ("tokens", token_agreement),
        ("distribution", distribution_cases),
    ):
        try:
            data[part] = cases(ctx)
        except Exception as err:  # noqa: BLE001 - one part's error is recorded, the other parts still run
            data[part] = []
            data[f"{part}_error"] = f"{type(err).__name__}: {err}"
            data[f"{part}_traceback"] = traceback.format_exc(limit=12)[-4000:]
            failures.append(f"{part}: {data[f'{part}_error']}")
    failures += [
        f"tree attention {r['arch']}/{r['path']}: max diff {r['max_abs_diff']:.2e}"
        for r in data["tree_attention"]
        if not r["ok"]
    ]
    failures += [
        f"tokens {r['pair']}/{r['path']}/{r['method']}/{r['mode']}: differ from the CPU's at {r['first_difference']}"
        for r in data["tokens"]
        if r.get("same") is False
    ]
    failures += [
        f"distribution {r['pair']}/{r['path']}/{r['method']}: p={r['pvalue']:.2e}, impossible draws {r['impossible']}"
        for r in data["distribution"]
        if r.get("ok") is False
    ]
    skipped = [r for r in data["tokens"] + data["distribution"] if r.get("skipped")]
    if skipped:
        data["incomplete"] = f"{len(skipped)} case(s) not run: {skipped[0]['skipped']}"
    if failures:
        more = f" (+{len(failures) - 6} more)" if len(failures) > 6 else ""
        raise Failed("; ".join(failures[:6]) + more, data)
    return data


def tree_attention_cases(ctx: Context) -> list[dict]:
    """tests/test_tree_attention.py's first case on `device`: a two-level tree extended through the
    cache; each node's logits against its path run alone through the plain forward."""
    import torch

    from mtad.decoding.static_kv import cached_model, resolve_decode_path
    from mtad.models.tiny import BUILDERS

    device, rows = ctx.device, []
    prefix = torch.tensor(TREE_PREFIX)
    (tok1, par1), (tok2, par2) = TREE_LEVELS
    tokens, parents = tok1 + tok2, par1 + par2
    for arch, build in BUILDERS.items():
        model = build(0, vocab=12).to(device)
        for path in ("eager", "static"):
            if resolve_decode_path(path, model) != path:
                continue
            lm = cached_model(model, None, path)
            lm.prefill(prefix[:-1])
            out1 = lm.extend(prefix[-1:], nodes=torch.tensor(tok1), parents=par1)
            out2 = lm.extend(prefix[:0], nodes=torch.tensor(tok2), parents=par2)
            node_logits = torch.cat([out1[1:], out2]).to(device)
            diffs = []
            with torch.no_grad():
                root = model(input_ids=prefix[None].to(device)).logits[0, -1]
                diffs.append(float((out1[0].to(device) - root).abs().max()))
                for node in range(len(tokens)):
                    ids, n = [], node
                    while n >= 0:
                        ids.append(tokens[n])
                        n = parents[n]
                    alone_ids = torch.cat([prefix, torch.tensor(ids[::-1])])[None].to(device)
                    alone = model(input_ids=alone_ids).logits[0, -1]
                    diffs.append(float((node_logits[node] - alone).abs().max()))
            worst = max(diffs)
            rows.append(
                {"arch": arch, "path": path, "nodes": len(tokens), "max_abs_diff": worst, "ok": worst <= TREE_ATOL}
            )
    return rows


def token_agreement(ctx: Context) -> list[dict]:
    """Every method on the float64 pairs, device against CPU: greedy, then seeded sampling (the
    generator is a CPU one on both sides, so the draws are the same)."""
    import torch

    from mtad.decoding import get_decoder
    from mtad.decoding.static_kv import resolve_decode_path

    cpu = torch.device("cpu")
    n_tokens = 16 if ctx.quick else 40
    modes = ("greedy", "seed 0") if ctx.quick else ("greedy", "seed 0", "seed 1")
    prompt = torch.tensor([TOKEN_PROMPT])
    rows = []
    for kind in FLOAT64_PAIRS:
        pairs = {d: float64_pair(kind, TOKEN_VOCAB, 2.0, d) for d in dict.fromkeys((ctx.device, cpu))}
        for path in ("eager", "static"):
            if resolve_decode_path(path, pairs[cpu][0]) != path:
                continue
            for method in methods():
                for mode in modes:
                    row = {"pair": kind, "path": path, "method": method, "mode": mode}
                    rows.append(row)
                    if ctx.out_of_time():
                        row["skipped"] = "out of this check's time"
                        continue
                    params = dict(TOKEN_PARAMS[method], **({"temperature": 0} if mode == "greedy" else {}))
                    seed = 0 if mode == "greedy" else int(mode.split()[1])
                    got = {}
                    for d, (target, draft) in pairs.items():
                        decoder = get_decoder(method, target=target, draft=draft, decode_path=path, **params)
                        out = decoder.generate(
                            prompt, max_new_tokens=n_tokens, generator=torch.Generator().manual_seed(seed)
                        )
                        got[d] = out.tokens
                    row["first_difference"] = first_difference(got[ctx.device], got[cpu])
                    row["same"] = row["first_difference"] is None
    return rows


def distribution_cases(ctx: Context) -> list[dict]:
    """Chi-square of the lossless methods' (and sampling's) draws on the device against the target
    distribution enumerated on the CPU (tests/test_decoding_exact.py's cases, fewer draws)."""
    if importlib.util.find_spec("scipy") is None:
        return [
            {"method": m, "skipped": "scipy is not importable (the chi-square test)"} for _, _, m, _, _ in DIST_CASES
        ]
    import torch

    from mtad.metrics.exactness import chisquare_exactness, empirical_counts, sequence_probs

    runs = 40 if ctx.quick else 1000
    prompt = torch.tensor([DIST_PROMPT])
    rows = []
    for kind, path, method, params, processing in DIST_CASES:
        row = {
            "pair": kind,
            "path": path,
            "method": method,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
            "processing": processing,
        }
        rows.append(row)
        if ctx.out_of_time():
            row["skipped"] = "out of this check's time"
            continue
        start = time.perf_counter()
        target, draft = float64_pair(kind, DIST_VOCAB, 3.0, ctx.device)
        cpu_target = float64_pair(kind, DIST_VOCAB, 3.0, torch.device("cpu"))[0]
        probs = sequence_probs(cpu_target, prompt, DIST_TOKENS, processing)
        counts = empirical_counts(
            method, target, draft, {**params, **processing}, prompt, DIST_TOKENS, runs, decode_path=path
        )
        test = chisquare_exactness(counts, probs)
        row.update(
            test.as_dict(),
            ok=test.impossible == 0 and test.pvalue > FALSE_ALARM,
            seconds=round(time.perf_counter() - start, 2),
        )
    return rows


# ---------------------------------------------------------------- 2. decode paths


def generate(method: str, target, draft, path: str, prompt, max_new_tokens: int, seed: int = 0):
    import torch

    from mtad.bench.measure import method_params
    from mtad.decoding import SpSParams, get_decoder

    params = method_params(SpSParams().gamma)[method]
    decoder = get_decoder(method, target=target, draft=draft, decode_path=path, params=params)
    return decoder.generate(prompt, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed))


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


def check_decode_paths(ctx: Context) -> dict:
    paths = chosen_paths(ctx.options, ctx.device.type)
    pairs = ctx.tiny_pairs()
    prompt = tiny_prompt()
    n_tokens, reps = (16, 1) if ctx.quick else (64, 3)
    # the uncompiled paths first, for every pair; then a pair at a time its compiled paths (fast
    # reuses what compiled compiled), so that a budget spent on compiling leaves whole pairs
    compiling = [p for p in paths if p in ("compiled", "fast")]
    order = [(pair, path) for path in paths if path not in compiling for pair in pairs]
    order += [(pair, path) for pair in pairs for path in compiling]
    rows, eager = [], {}
    for pair_name, path in order:
        target, draft = pairs[pair_name]
        for method in methods():
            row = {"pair": pair_name, "path": path, "method": method}
            rows.append(row)
            if ctx.out_of_time():
                row.update(status="skipped", reason="out of this check's time")
                continue
            try:
                row.update(timed_runs(method, target, draft, path, prompt, n_tokens, reps), status="ran")
            except Exception as err:  # noqa: BLE001 - recorded per row, the other rows still run
                row.update(status="failed", reason=f"{type(err).__name__}: {err}")
                continue
            ctx.warm_paths.add((pair_name, path, method))
            tokens = row.pop("tokens")
            if path == "eager":
                eager[(pair_name, method)] = tokens
            if (pair_name, method) in eager:
                row["same_tokens_as_eager"] = tokens == eager[(pair_name, method)]
    data = {"paths": list(paths), "max_new_tokens": n_tokens, "reps": reps, "rows": rows}
    if ctx.device.type != "cuda" and ctx.options.paths is None:
        data["note"] = (
            "compiled left out on a CPU (torch.compile takes tens of seconds per shape there); --paths adds it"
        )
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        raise Failed(
            f"{len(failed)} of {len(rows)} runs failed, first: {failed[0]['pair']}/{failed[0]['path']}/"
            f"{failed[0]['method']}: {failed[0]['reason']}",
            data,
        )
    if any(r["status"] == "skipped" for r in rows):
        data["incomplete"] = f"{sum(r['status'] == 'skipped' for r in rows)} run(s) not made: out of this check's time"
    return data


# ---------------------------------------------------------------- 3. energy


def check_energy(ctx: Context) -> dict:
    from mtad.decoding.kv import sync
    from mtad.metrics.energy import make_energy_meter

    found = importlib.util.find_spec("pynvml") is not None
    target, draft = ctx.tiny_pairs()["tiny_llama"]
    # the fast path once the decode-path check has compiled it, else the static one (no compilation here)
    path = "fast" if ("tiny_llama", "fast", "sps") in ctx.warm_paths else "static"
    prompt = tiny_prompt()
    n_tokens = 16 if ctx.quick else 64
    window = 0.2 if ctx.device.type != "cuda" else (1.0 if ctx.quick else 3.0)
    generate("sps", target, draft, path, prompt, n_tokens)  # warm-up
    meter, reason = make_energy_meter("nvml", [ctx.device])
    sync(ctx.device)
    meter.start()
    start, tokens, decodes = time.perf_counter(), 0, 0
    while time.perf_counter() - start < window or decodes == 0:
        tokens += len(generate("sps", target, draft, path, prompt, n_tokens, seed=decodes).tokens)
        decodes += 1
    sync(ctx.device)
    reading = meter.stop()
    seconds = time.perf_counter() - start
    data = {
        "pynvml_importable": found,
        "path": path,
        "meter": reading.meter,
        "available": reading.joules is not None,
        "joules": reading.joules,
        "per_device": reading.per_device,
        "seconds": round(seconds, 3),
        "decodes": decodes,
        "tokens": tokens,
        "watts": reading.joules / seconds if reading.joules is not None else None,
        "joules_per_token": reading.joules / tokens if reading.joules is not None else None,
    }
    if reading.joules is None:
        why = reason or reading.reason
        if not found:
            why = f"pynvml (nvidia-ml-py) is not importable; {why}"
        raise Skipped(f"no energy reading: {why}", data)
    return data


# ---------------------------------------------------------------- 4. cost curve


def curve_model(name: str, device):
    """The cost curve's random Llama, built on `device`, in its dtype, with its build time."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = CURVE_MODELS[name]
    dtype = getattr(torch, spec["dtype"])
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        dtype = torch.float16
    start = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**spec["config"]))
    model = model.to(dtype).eval().requires_grad_(False)
    return model, time.perf_counter() - start


def check_cost_curve(ctx: Context) -> dict:
    import torch

    from mtad.bench.curves import copy_bandwidth, weight_bytes
    from mtad.metrics.forward_time import forward_ms

    name = ctx.options.curve_model or ("gpu" if ctx.device.type == "cuda" else "small")
    model, build_s = curve_model(name, ctx.device)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * (CURVE_CONTEXT + max(CURVE_WIDTHS))
    kv_bytes *= model.dtype.itemsize
    param_bytes = weight_bytes(model)
    bandwidth = copy_bandwidth(ctx.device, megabytes=CURVE_MODELS[name]["copy_mb"])
    reps = 3 if ctx.quick else 10
    data = {
        "model": name,
        "config": CURVE_MODELS[name]["config"],
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameter_bytes": param_bytes,
        "kv_cache_bytes": kv_bytes,
        "build_s": round(build_s, 2),
        "context": CURVE_CONTEXT,
        "reps": reps,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "floor_ms": 1e3 * param_bytes / bandwidth,
        "paths": list(CURVE_PATHS),
        "note": "no compiled path: it would compile this model once per width's bucket",
        "rows": [],
    }
    for width in CURVE_WIDTHS:
        row = {"width": width}
        for path in CURVE_PATHS:
            if ctx.out_of_time():
                row[f"{path}_ms"] = None
                data["incomplete"] = "out of this check's time"
                continue
            row[f"{path}_ms"] = forward_ms(model, path, width, context=CURVE_CONTEXT, reps=reps)
        data["rows"].append(row)
    for path in CURVE_PATHS:
        base = data["rows"][0].get(f"{path}_ms")
        for row in data["rows"]:
            ms = row.get(f"{path}_ms")
            row[f"{path}_vs_width_1"] = ms / base if ms and base else None
    del model
    if ctx.device.type == "cuda":
        data["peak_memory_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**30
    return data


# ---------------------------------------------------------------- 5. the embedded pair


def embedded_pair_problem(name: str) -> str | None:
    """Why the embedded pair cannot be loaded here without downloading anything (None when it can)."""
    try:
        from mtad.models.gguf_cache import CONVERTED_MARKER, converted_dir
        from mtad.models.pairs import draft_file, pair_config

        cfg = pair_config(name, device="cpu")
    except Exception as err:  # noqa: BLE001
        return f"cannot read the pair {name!r}: {type(err).__name__}: {err}"
    spec = cfg["target"]
    if spec["source"] == "gguf_package":
        from mtad.data import cache_root

        stem = Path(spec["file"]).stem
        converted = converted_dir(stem)
        module = spec["package"].replace("-", "_")
        extracted = cache_root() / "gguf" / f"{module}-{spec['version']}" / spec["file"]
        found = importlib.util.find_spec(module)
        installed = (
            found is not None
            and found.submodule_search_locations
            and (Path(list(found.submodule_search_locations)[0]) / spec["file"]).is_file()
        )
        if not ((converted / CONVERTED_MARKER).is_file() or extracted.is_file() or installed):
            return (
                f"its target's files are not on this machine: no converted target in {converted}, no {spec['file']} "
                f"from an installed {spec['package']} or under {extracted.parent}; getting them needs a download "
                f"(pip {spec['package']}=={spec['version']}), which this check never does"
            )
    elif spec["source"] == "hub":
        from mtad.models.pairs import hub_model_problem

        problem = hub_model_problem(spec["id"], "target")
        if problem:
            return problem
    if cfg["draft"]["source"] in ("distilled", "head") and cfg["draft"].get("file"):
        try:
            draft_file(cfg)
        except FileNotFoundError as err:
            return str(err)
    return None


def check_embedded_pair(ctx: Context) -> dict:
    from mtad.decoding import SpSParams
    from mtad.models import load_pair
    from mtad.tasks.prompts import chat_ids, make_prompts

    name = ctx.options.embedded_pair
    problem = embedded_pair_problem(name)
    if problem:
        raise Skipped(f"{name}: {problem}")
    start = time.perf_counter()
    pair = load_pair(name, device=str(ctx.device))
    load_s = time.perf_counter() - start
    prompt = chat_ids(pair.tokenizer, make_prompts(1, seed=7, held_out=True)[0])
    n_tokens, reps = (16, 1) if ctx.quick else (64, 3)
    gamma = SpSParams().gamma
    data = {
        "pair": name,
        "path": pair.decode_path,
        "target_dtype": str(pair.target.dtype).removeprefix("torch."),
        "draft_dtype": str(pair.draft.dtype).removeprefix("torch."),
        "load_s": round(load_s, 2),
        "prompt_tokens": int(prompt.shape[1]),
        "max_new_tokens": n_tokens,
        "reps": reps,
        "gamma": gamma,
        "rows": [],
    }
    for method in methods():
        row = {"method": method}
        data["rows"].append(row)
        if ctx.out_of_time():
            row.update(status="skipped", reason="out of this check's time")
            data["incomplete"] = "out of this check's time"
            continue
        result = timed_runs(method, pair.target, pair.draft, pair.decode_path, prompt, n_tokens, reps)
        result.pop("tokens")
        row.update(result, status="ran")
    base = next((r for r in data["rows"] if r["method"] == "sampling" and r["status"] == "ran"), None)
    for row in data["rows"]:
        if base and row["status"] == "ran":
            row["speedup_vs_sampling"] = row["tokens_per_s"] / base["tokens_per_s"]
    return data


CHECK_FUNCTIONS = {
    "exactness": check_exactness,
    "decode_paths": check_decode_paths,
    "energy": check_energy,
    "cost_curve": check_cost_curve,
    "embedded_pair": check_embedded_pair,
}


# ---------------------------------------------------------------- the report


def write_report(payload: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu_check.json", out / "gpu_check.md"
    json_path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md_path.write_text(markdown(payload))
    return json_path, md_path


def _num(value, fmt: str = ".3g") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, fmt)
    return str(value)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def markdown(payload: dict) -> str:
    m = payload["machine"]
    lines = ["# GPU check", ""]
    if payload["dry_run"]:
        lines += [
            f"**Dry run**: nothing ran ({payload['dry_run_reason']}). Each check below is what a run on a GPU does.",
            "",
        ]
    else:
        where = payload["device"] + (f" ({payload['device_name']})" if payload.get("device_name") else "")
        lines += [f"Ran on {where}.", ""]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in m.get("gpus", [])) or "none"
    git = m.get("git")
    git_text = f"{git.get('commit')}{' (dirty)' if git.get('dirty') else ''}" if isinstance(git, dict) else git
    lines += [
        f"- started: {payload['started']}; wall time: {_num(payload.get('wall_s'), '.1f')} s",
        f"- machine: {m.get('cpu')} ({m.get('cpu_count')} CPUs), {m.get('platform')}; GPUs: {gpus}"
        + (f"; driver {m['driver']}" if m.get("driver") else ""),
        f"- python {m.get('python')}, torch {m.get('torch')} (CUDA build {m.get('cuda_build')}), "
        f"transformers {m.get('transformers')}, pynvml {'importable' if m.get('pynvml') else 'not importable'}",
        f"- code: {git_text}",
        f"- options: {json.dumps(payload['options'])}",
        "",
    ]
    summary = payload.get("summary")
    if summary:
        lines += [f"Checks: {summary['ran']} ran, {summary['skipped']} skipped, {summary['failed']} failed.", ""]
    rows = [
        [
            f"{i}. {c['name']}",
            c["status"],
            _num(c.get("seconds"), ".1f"),
            c.get("reason") or c.get("data", {}).get("incomplete", ""),
        ]
        for i, c in enumerate(payload["checks"], 1)
    ]
    lines += _table(["check", "status", "s", "reason / note"], rows)
    for i, c in enumerate(payload["checks"], 1):
        lines += [f"## {i}. {c['title']}: {c['status']}", "", f"What it runs: {c['plan']}.", ""]
        if c.get("reason"):
            lines += [f"{'Skipped' if c['status'] == 'skipped' else 'Failed'}: {c['reason']}", ""]
        if c.get("traceback"):
            lines += ["```", c["traceback"].rstrip(), "```", ""]
        data = c.get("data") or {}
        if set(data) == {"files"}:
            lines += [f"The embedded pair's files: {data['files']}.", ""]
        elif data:
            try:
                lines += SECTIONS[c["name"]](data)
            except (KeyError, TypeError, ValueError):  # a check stopped part-way: its data as recorded
                lines += ["```json", json.dumps(data, indent=1, default=str)[:6000], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _exactness_md(data: dict) -> list[str]:
    lines = [data.get("note", "") + ".", ""] if data.get("note") else []
    if data.get("tree_attention"):
        lines += ["Tree attention (each node's logits against its path alone):", ""]
        lines += _table(
            ["arch", "path", "nodes", "max abs diff", "ok"],
            [
                [r["arch"], r["path"], r["nodes"], _num(r["max_abs_diff"], ".1e"), _num(r["ok"])]
                for r in data["tree_attention"]
            ],
        )
    tokens = [r for r in data.get("tokens", []) if "same" in r]
    if tokens:
        groups: dict = {}
        for r in tokens:
            groups.setdefault((r["pair"], r["path"], r["method"]), []).append(r)
        lines += ["Tokens on the device against the CPU (float64, same CPU generator):", ""]
        lines += _table(
            ["pair", "path", "method", "runs", "same", "first difference"],
            [
                [
                    *key,
                    len(rs),
                    sum(r["same"] for r in rs),
                    ", ".join(f"{r['mode']}: {r['first_difference']}" for r in rs if not r["same"]) or "—",
                ]
                for key, rs in groups.items()
            ],
        )
    dist = [r for r in data.get("distribution", []) if "pvalue" in r]
    if dist:
        lines += [
            f"Draws on the device against the exact target distribution (chi-square, false alarm {FALSE_ALARM}):",
            "",
        ]
        lines += _table(
            ["pair", "path", "method", "params", "draws", "TV", "p", "ok"],
            [
                [
                    r["pair"],
                    r["path"],
                    r["method"],
                    json.dumps(r["params"]),
                    r["runs"],
                    _num(r["tv"], ".3f"),
                    _num(r["pvalue"], ".3g"),
                    _num(r["ok"]),
                ]
                for r in dist
            ],
        )
    return lines


def _paths_md(data: dict) -> list[str]:
    lines = [f"{data['max_new_tokens']} new tokens, median of {data['reps']} after a warm-up; seed 0.", ""]
    if data.get("note"):
        lines += [data["note"] + ".", ""]
    rows = []
    for r in data["rows"]:
        if r["status"] != "ran":
            rows.append([r["pair"], r["path"], r["method"], r["status"], "", "", "", "", r.get("reason", "")])
            continue
        rows.append(
            [
                r["pair"],
                r["path"],
                r["method"],
                r["resolved_path"],
                _num(r["tokens_per_s"], ".1f"),
                _num(r["block_efficiency"], ".2f"),
                f"{_num(r['warm_up_s'], '.2f')} ({r['warm_up_compiles']} compiles)",
                r["steady_compiles"],
                _num(r.get("same_tokens_as_eager")),
            ]
        )
    return lines + _table(
        ["pair", "path", "method", "ran as", "tokens/s", "block eff.", "warm-up s", "steady compiles", "= eager"], rows
    )


def _energy_md(data: dict) -> list[str]:
    return [
        f"- meter: {data['meter']} (pynvml {'importable' if data['pynvml_importable'] else 'not importable'}); "
        f"available: {_num(data['available'])}",
        f"- window: {_num(data['seconds'], '.2f')} s, {data['decodes']} sps decodes on the {data['path']} path, "
        f"{data['tokens']} tokens",
        f"- energy: {_num(data['joules'], '.2f')} J, {_num(data['watts'], '.1f')} W, "
        f"{_num(data['joules_per_token'], '.3g')} J/token",
        "",
    ]


def _curve_md(data: dict) -> list[str]:
    c = data["config"]
    lines = [
        f"- model: random Llama, {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, intermediate "
        f"{c['intermediate_size']}, {c['num_attention_heads']}/{c['num_key_value_heads']} heads, "
        f"vocab {c['vocab_size']}, {data['dtype']}; {data['parameters'] / 1e6:.0f} M parameters, "
        f"{data['parameter_bytes'] / 2**20:.0f} MiB (the KV cache at {data['context']}+{max(CURVE_WIDTHS)} tokens: "
        f"{data['kv_cache_bytes'] / 2**20:.1f} MiB); built in {data['build_s']} s",
        f"- copy bandwidth: {data['copy_bandwidth_gb_s']:.1f} GB/s; floor of a step (parameter bytes / bandwidth): "
        f"{data['floor_ms']:.3f} ms",
        f"- median of {data['reps']} forwards over a {data['context']}-token cache (rolled back after each)"
        + (f"; peak memory {data['peak_memory_gib']:.2f} GiB" if data.get("peak_memory_gib") else "")
        + (f"; {data['note']}" if data.get("note") else ""),
        "",
    ]
    header = ["width"]
    for path in data["paths"]:
        header += [f"{path} ms", f"{path} / width 1"]
    header.append("static / floor")
    rows = []
    for r in data["rows"]:
        row = [r["width"]]
        for path in data["paths"]:
            row += [_num(r.get(f"{path}_ms"), ".3f"), _num(r.get(f"{path}_vs_width_1"), ".2f")]
        static = r.get("static_ms")
        row.append(_num(static / data["floor_ms"] if static else None, ".2f"))
        rows.append(row)
    return lines + _table(header, rows)


def _embedded_md(data: dict) -> list[str]:
    lines = [
        f"- {data['pair']} on the {data['path']} path, target {data['target_dtype']}, draft {data['draft_dtype']}, "
        f"γ = {data['gamma']}; loaded in {data['load_s']} s; a {data['prompt_tokens']}-token prompt, "
        f"{data['max_new_tokens']} new tokens, median of {data['reps']}",
        "",
    ]
    rows = [
        [
            r["method"],
            r["status"],
            r.get("resolved_path", ""),
            _num(r.get("tokens_per_s"), ".1f"),
            _num(r.get("block_efficiency"), ".2f"),
            _num(r.get("speedup_vs_sampling"), ".2f"),
            _num(r.get("warm_up_s"), ".2f"),
        ]
        for r in data["rows"]
    ]
    return lines + _table(["method", "status", "ran as", "tokens/s", "block eff.", "speed-up", "warm-up s"], rows)


SECTIONS = {
    "exactness": _exactness_md,
    "decode_paths": _paths_md,
    "energy": _energy_md,
    "cost_curve": _curve_md,
    "embedded_pair": _embedded_md,
}
