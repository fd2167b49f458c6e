"""``mtad-run`` (also ``python -m mtad.run``): one (pair, method, task) cell -> results.

    mtad-run pair=smollm2_135m method=mtad task=cnndm limit=4
    mtad-run experiment=table2            # the whole grid, as a Hydra multirun

A cell writes ``<results_root>/<experiment>/<pair>/<task>/<method>[/<overrides>]/``:

- ``samples.jsonl``: one line per example, appended (and fsynced) as soon as it finishes:
  id, per sample and turn the text, completion, token ids, decoder stats, energy, target
  log-probability and scores. A rerun skips the ids already there, so an
  interrupted cell resumes without duplicates or losses.
- ``metrics.json``: task scores, perplexity, speed/acceptance aggregates, energy per token,
  peak memory — recomputed from every line of ``samples.jsonl`` at the end of each run.
- ``env.json``: machine, threads, dtype, device, versions, git commit, seed, config.

``<overrides>`` holds the command-line overrides that change what is generated (e.g.
``method.gamma=3``), so a changed config lands in a new directory; changing ``limit`` does
not (it extends the cell). A cell directory whose recorded config differs from the current
one (an edited experiment file) is refused with the differences listed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("mtad.run")

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
# Override keys that do not change what a cell generates: they never name a directory.
NEUTRAL_KEYS = {"experiment", "pair", "task", "method", "sweep", "logger", "energy", "hydra", "experiment_name",
                "limit", "data_root", "results_root", "progress", "warmup_tokens", "threads"}
NEUTRAL_PREFIXES = ("logger.", "energy.", "hydra.", "hydra/")


# ----------------------------------------------------------------------------- naming
@dataclass(frozen=True)
class Cell:
    experiment: str
    pair: str
    task: str
    method: str
    overrides: str  # "" or e.g. "method.gamma=3,seed=1"
    directory: Path

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.experiment, self.pair, self.task, self.method, self.overrides) if p)


def override_dirname(overrides: list[str]) -> str:
    """The generation-changing command-line overrides, sorted, as ``k=v,k2=v2``."""
    kept = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in NEUTRAL_KEYS or key.startswith(NEUTRAL_PREFIXES):
            continue
        if key == "task.limit" or (key.startswith("per_task.") and key.endswith(".limit")):
            continue
        kept.append(f"{key}={value}".replace("/", "_"))
    return ",".join(sorted(kept))


def resolve_cell(cfg: DictConfig) -> Cell:
    hc = HydraConfig.get()
    choices = hc.runtime.choices
    names = {group: choices.get(group) for group in ("pair", "task", "method")}
    missing = [g for g, v in names.items() if not v]
    if missing:
        raise ValueError(f"no {', '.join(missing)} chosen; pick one, e.g. method=mtad task=cnndm")
    overrides = override_dirname(list(hc.overrides.task))
    directory = Path(cfg.results_root) / cfg.experiment_name / names["pair"] / names["task"] / names["method"]
    if overrides:
        directory = directory / overrides
    return Cell(cfg.experiment_name, names["pair"], names["task"], names["method"], overrides, directory)


def task_settings(cfg: DictConfig, task_name: str) -> tuple[dict, int | None]:
    """Task options (conf/task/<task>.yaml + per_task overrides) and the example limit.

    The limit is the top-level ``limit`` when set (a quick cap from the command line), else
    ``per_task.<task>.limit``, else the task file's ``limit``. It is not an option of the
    cell's identity: raising it extends the same cell.
    """
    options = OmegaConf.to_container(cfg.task, resolve=True) or {}
    options.update(OmegaConf.to_container(cfg.per_task, resolve=True).get(task_name) or {})
    limit = options.pop("limit", None)
    if cfg.limit is not None:
        limit = cfg.limit
    return options, limit


def cell_identity(cfg: DictConfig, cell: Cell, task_options: dict) -> dict:
    """Everything that decides what the cell generates (not how many examples)."""
    return {"experiment": cell.experiment, "pair": {"name": cell.pair, **OmegaConf.to_container(cfg.pair, resolve=True)},
            "task": {"name": cell.task, **task_options},
            "method": {"name": cell.method, **OmegaConf.to_container(cfg.method, resolve=True)}, "seed": cfg.seed}


def check_identity(directory: Path, identity: dict) -> None:
    env_path = directory / "env.json"
    if not env_path.exists():
        return
    recorded = json.loads(env_path.read_text()).get("cell")
    if recorded is None or recorded == json.loads(json.dumps(identity)):
        return
    diffs = _diff(recorded, json.loads(json.dumps(identity)))
    raise ValueError(f"{directory} holds results of a different config ({'; '.join(diffs)}). Use another "
                     "experiment_name, pass the change as a command-line override (it then gets its own "
                     "directory), or delete that directory to start it again.")


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) for d in _diff(old.get(k), new.get(k), f"{path}.{k}".lstrip("."))]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


# ----------------------------------------------------------------------------- seeds and files
def derive_seed(seed: int, example_id: str, sample_index: int) -> int:
    """A 63-bit seed from (run seed, example id, sample index): stable across resumes and runs."""
    digest = hashlib.sha256(f"{seed}\x1f{example_id}\x1f{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def read_finished(samples_path: Path) -> list[dict]:
    """Records already in samples.jsonl; a torn last line (killed mid-write) is cut off."""
    if not samples_path.exists():
        return []
    raw = samples_path.read_bytes()
    records, good_bytes = [], 0
    for line in raw.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("unterminated line")
            records.append(json.loads(line))
        except ValueError:
            log.warning("cutting a torn line off %s (an interrupted write)", samples_path)
            break
        good_bytes += len(line)
    if good_bytes != len(raw):  # keep only whole records, so the rerun appends after them
        with open(samples_path, "r+b") as f:
            f.truncate(good_bytes)
    return records


def append_record(samples_path: Path, record: dict) -> None:
    with open(samples_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


# ----------------------------------------------------------------------------- models
_PAIR_CACHE: dict[str, Any] = {}


def load_pair_cached(pair_cfg: dict):
    """Load a pair once per process: the cells of a multirun share it."""
    from mtad.models import load_pair

    key = json.dumps(pair_cfg, sort_keys=True, default=str)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()  # keep one pair in memory
        _PAIR_CACHE[key] = load_pair(pair_cfg)
    return _PAIR_CACHE[key]


def model_devices(*models) -> list:
    import torch

    devices = set()
    for model in models:
        if model is None:
            continue
        device_map = getattr(model, "hf_device_map", None)
        if device_map:
            devices.update(torch.device(d if not isinstance(d, int) else f"cuda:{d}") for d in device_map.values()
                           if d not in ("disk",))
        else:
            devices.update(p.device for p in model.parameters())
    return sorted(devices, key=str)


def output_device(model):
    return model.get_output_embeddings().weight.device


def sync(devices) -> None:
    from mtad.decoding.kv import sync as sync_device

    for device in devices:
        sync_device(device)


# ----------------------------------------------------------------------------- one example
class CellRunner:
    """Generates, scores and records the examples of one cell."""

    def __init__(self, cfg: DictConfig, cell: Cell, pair, task, decoder, meter):
        import torch

        self.cfg, self.cell, self.pair, self.task, self.decoder, self.meter = cfg, cell, pair, task, decoder, meter
        self.devices = model_devices(pair.target, pair.draft)
        self.gen_device = output_device(pair.target)
        self.torch = torch

    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator) -> tuple[Any, dict]:
        """One timed generation; energy over the same window."""
        input_ids = self.torch.tensor([prompt_ids], dtype=self.torch.long, device=self.gen_device)  # [1, L]
        sync(self.devices)
        self.meter.start()
        out = self.decoder.generate(input_ids, max_new_tokens=max_new_tokens, eos_token_id=self.pair.eos_token_id,
                                    generator=generator)
        sync(self.devices)
        energy = self.meter.stop()
        return out, energy.as_dict()

    def warm_up(self, example: dict) -> None:
        prompt = self.task.build_prompt(example, self.pair.tokenizer, history=())
        generator = self.torch.Generator(device=self.gen_device).manual_seed(0)
        self.decoder.generate(self.torch.tensor([prompt], dtype=self.torch.long, device=self.gen_device),
                              max_new_tokens=max(1, int(self.cfg.warmup_tokens)),
                              eos_token_id=self.pair.eos_token_id, generator=generator)

    def run_sample(self, example: dict, sample_index: int) -> dict:
        from mtad.metrics.perplexity import sample_logprob

        seed = derive_seed(int(self.cfg.seed), str(example["id"]), sample_index)
        generator = self.torch.Generator(device=self.gen_device).manual_seed(seed)
        history, turns = [], []
        for turn in range(self.task.num_turns(example)):
            prompt = self.task.build_prompt(example, self.pair.tokenizer, history=tuple(history))
            out, energy = self.generate(prompt, self.task.max_new_tokens, generator)
            text = self.pair.tokenizer.decode(out.tokens, skip_special_tokens=True)
            logprob_sum, logprob_n = sample_logprob(self.pair.target, prompt, out.tokens)
            turns.append({"turn": turn, "prompt_tokens": len(prompt), "text": text,
                          "completion": self.task.postprocess(example, text), "token_ids": list(out.tokens),
                          "stats": out.stats.as_dict(), "energy": energy,
                          "logprob_sum": float(logprob_sum), "logprob_n": int(logprob_n)})
            history.append(text)
        n = sum(t["logprob_n"] for t in turns)
        mean_logprob = sum(t["logprob_sum"] for t in turns) / n if n else None
        scores = self.task.score(example, [t["completion"] for t in turns])  # one sample, every turn
        return {"sample": sample_index, "seed": seed, "turns": turns, "mean_logprob": mean_logprob,
                "scores": scores}

    def run_example(self, example: dict) -> dict:
        samples = [self.run_sample(example, i) for i in range(self.task.samples_per_example)]
        return {"id": str(example["id"]), "samples": samples,
                "new_tokens": sum(t["stats"]["new_tokens"] for s in samples for t in s["turns"]),
                "decode_seconds": sum(t["stats"]["seconds"] for s in samples for t in s["turns"])}


# ----------------------------------------------------------------------------- aggregation
def cell_metrics(task, records: list[dict], limit_ids: list[str]) -> dict:
    from mtad.metrics.perplexity import perplexity
    from mtad.metrics.speed import aggregate_energy, aggregate_speed

    by_id = {r["id"]: r for r in records}
    done = [by_id[i] for i in limit_ids if i in by_id]
    turns = [t for r in done for s in r["samples"] for t in s["turns"]]
    speed = aggregate_speed(t["stats"] for t in turns)
    mean_logprobs = [s["mean_logprob"] for r in done for s in r["samples"] if s["mean_logprob"] is not None]
    sample_scores = [(r["id"], s["scores"]) for r in done for s in r["samples"]]  # ids repeat for n > 1
    scores = task.aggregate([sc for _, sc in sample_scores], [i for i, _ in sample_scores]) if done else {}
    return {
        "examples": len(done), "examples_planned": len(limit_ids),
        "samples": sum(len(r["samples"]) for r in done),
        "scores": scores,
        "perplexity": float(perplexity(mean_logprobs)) if mean_logprobs else None,
        "mean_logprob": sum(mean_logprobs) / len(mean_logprobs) if mean_logprobs else None,
        **speed,
        **aggregate_energy([t["energy"] for t in turns], speed["new_tokens"]),
    }


def peak_memory(devices) -> dict:
    import torch

    cuda = [d for d in devices if d.type == "cuda"]
    if cuda:
        peak = sum(torch.cuda.max_memory_allocated(d) for d in cuda)
        return {"peak_memory_mb": peak / 2**20, "peak_memory_kind": "cuda max_memory_allocated, summed over GPUs"}
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"peak_memory_mb": rss_kb / 1024, "peak_memory_kind": "process peak RSS (CPU)"}


# ----------------------------------------------------------------------------- environment
def git_commit() -> dict:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return {"commit": commit or None, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(cfg: DictConfig, devices, pair) -> dict:
    import torch
    import transformers

    gpus = [torch.cuda.get_device_name(d) for d in devices if d.type == "cuda"]
    cpu = cpu_model()
    machine = f"{len(gpus)}x {gpus[0]}" if gpus else f"{cpu} ({os.cpu_count()} CPUs)"
    dtypes = sorted({str(p.dtype).replace("torch.", "") for m in (pair.target, pair.draft) if m is not None
                     for p in list(m.parameters())[:1]})
    return {
        "machine": machine, "cpu": cpu, "cpu_count": os.cpu_count(), "gpus": gpus,
        "devices": [str(d) for d in devices], "dtype": ",".join(dtypes), "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(), "python": sys.version.split()[0],
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "hydra": hydra.__version__, "cuda": torch.version.cuda},
        "git": git_commit(), "seed": cfg.seed, "pair_name": getattr(pair, "name", None),
    }


# ----------------------------------------------------------------------------- the cell
def run_cell(cfg: DictConfig, cell: Cell, logger) -> dict:
    import torch
    from tqdm import tqdm

    from mtad.decoding import get_decoder
    from mtad.metrics.energy import make_energy_meter
    from mtad.tasks import get_task

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    options, limit = task_settings(cfg, cell.task)
    identity = cell_identity(cfg, cell, options)
    cell.directory.mkdir(parents=True, exist_ok=True)
    check_identity(cell.directory, identity)

    task = get_task(cell.task, data_root=cfg.data_root, **options)
    examples = task.examples(limit=limit)
    example_ids = [str(e["id"]) for e in examples]
    samples_path = cell.directory / "samples.jsonl"
    records = read_finished(samples_path)
    finished = {r["id"] for r in records}
    pending = [e for e in examples if str(e["id"]) not in finished]
    log.info("cell %s: %d examples, %d already done, %d to run", cell.name, len(examples),
             len(examples) - len(pending), len(pending))

    pair = load_pair_cached(OmegaConf.to_container(cfg.pair, resolve=True))
    use_target_as_judge(task, options, pair)
    decoder = get_decoder(cell.method, target=pair.target, draft=pair.draft, decode_path=pair.decode_path,
                          **OmegaConf.to_container(cfg.method, resolve=True))
    devices = model_devices(pair.target, pair.draft)
    meter, energy_reason = make_energy_meter(cfg.energy.meter, devices)
    if energy_reason:
        log.info("energy: %s", energy_reason)
    env = {**environment(cfg, devices, pair), "cell": identity, "energy_meter": cfg.energy.meter,
           "energy_missing_reason": energy_reason, "started": _now(),
           "config": OmegaConf.to_container(cfg, resolve=True)}
    write_json(cell.directory / "env.json", env)

    runner = CellRunner(cfg, cell, pair, task, decoder, meter)
    if pending and cfg.warmup_tokens:
        runner.warm_up(pending[0])  # untimed: first-call allocations and kernel selection
    for device in devices:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    for example in tqdm(pending, desc=cell.name, disable=not cfg.progress, dynamic_ncols=True):
        record = runner.run_example(example)
        append_record(samples_path, record)
        records.append(record)
        logger.log_example(example_ids.index(record["id"]),
                           {"scores": record["samples"][0]["scores"], "new_tokens": record["new_tokens"],
                            "decode_seconds": record["decode_seconds"]})

    metrics = {"cell": cell.name, "experiment": cell.experiment, "pair": cell.pair, "task": cell.task,
               "method": cell.method, "overrides": cell.overrides, "status": "complete",
               **cell_metrics(task, records, example_ids), **peak_memory(devices),
               "machine": env["machine"], "dtype": env["dtype"], "seed": cfg.seed, "finished": _now()}
    if metrics["examples"] < len(example_ids):
        metrics["status"] = "incomplete"
    write_json(cell.directory / "metrics.json", metrics)
    (cell.directory / "error.txt").unlink(missing_ok=True)  # an earlier failure is now resolved
    write_json(cell.directory / "env.json", {**env, "finished": metrics["finished"]})
    logger.log_metrics(metrics)
    log.info("cell %s: %s", cell.name, _summary(metrics))
    return metrics


def use_target_as_judge(task, options: dict, pair) -> None:
    """``judge: {kind: hf, model: target}`` (MT-Bench) grades with the pair's loaded target."""
    judge = options.get("judge")
    if isinstance(judge, dict) and judge.get("kind") == "hf" and judge.get("model") == "target":
        task.set_judge(model=pair.target, tokenizer=pair.tokenizer)


def _summary(metrics: dict) -> str:
    keys = ("perplexity", "tokens_per_s", "block_efficiency", "acceptance_rate", "energy_j_per_token")
    parts = [f"{k}={metrics[k]:.3f}" for k in keys if isinstance(metrics.get(k), float) and math.isfinite(metrics[k])]
    return ", ".join(parts + [f"{k}={v:.3f}" for k, v in metrics["scores"].items() if isinstance(v, float)])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_with_logger(cfg: DictConfig) -> dict:
    """The task_wrapper pattern: the logger always finishes; a failure is recorded, then raised.

    In a multirun Hydra records the exception for this job and goes on with the other cells.
    """
    cell = resolve_cell(cfg)
    logger = hydra.utils.instantiate(cfg.logger, name=cell.name,
                                     run_config=OmegaConf.to_container(cfg, resolve=True),
                                     _recursive_=False, _convert_="all")  # the config is data, not objects
    failed = True
    try:
        metrics = run_cell(cfg, cell, logger)
        failed = False
        return metrics
    except Exception:
        cell.directory.mkdir(parents=True, exist_ok=True)
        (cell.directory / "error.txt").write_text(f"{_now()}\n{traceback.format_exc()}")
        log.exception("cell %s failed (traceback in %s)", cell.name, cell.directory / "error.txt")
        raise
    finally:
        logger.finish(failed=failed)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    start = time.perf_counter()
    run_with_logger(cfg)
    log.info("done in %.1f s", time.perf_counter() - start)


if __name__ == "__main__":
    main()
