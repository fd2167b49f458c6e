"""The per-example loop of one cell: generate every sample and turn, score, record; and
score again the recorded answers a task could not score before (a judge that failed)."""

from __future__ import annotations

import logging
from typing import Any

from mtad.devices import output_device
from mtad.generation import timed_generate
from mtad.records import Record, SampleRecord, TurnRecord, derive_seed

log = logging.getLogger("mtad.run")


class ExampleLoop:
    """Generates, scores and records the examples of one cell."""

    def __init__(self, cfg, pair, task, decoder, meter, devices):
        import torch

        self.cfg, self.pair, self.task, self.decoder, self.meter = cfg, pair, task, decoder, meter
        self.devices = devices  # every device the pair spans (synchronised around a timed window)
        self.gen_device = output_device(pair.target)
        self.torch = torch

    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator) -> tuple[Any, dict, dict | None]:
        """One timed generation (`generation.timed_generate`); energy over the same window; with the
        run's ``profile`` on, where its blocks' time went by phase (`decoding.phases`), else None."""
        from contextlib import nullcontext

        from mtad.decoding.phases import profiling

        input_ids = self.torch.tensor([prompt_ids], dtype=self.torch.long, device=self.gen_device)  # [1, L]
        with profiling() if self.cfg.get("profile") else nullcontext() as profile:
            out, energy = timed_generate(
                self.decoder,
                input_ids,
                max_new_tokens,
                generator,
                devices=self.devices,
                meter=self.meter,
                eos_token_id=self.pair.eos_token_id,
                stop_rule=self.cfg.stop_rule,
            )
        check_settings(out.settings, self.cfg)
        return out, energy, profile.block_record(out.stats.seconds) if profile is not None else None

    def warm_up(self, example: dict) -> None:
        prompt = self.task.build_prompt(example, self.pair.tokenizer, history=())
        generator = self.torch.Generator(device=self.gen_device).manual_seed(0)
        self.decoder.generate(
            self.torch.tensor([prompt], dtype=self.torch.long, device=self.gen_device),
            max_new_tokens=max(1, int(self.cfg.warmup_tokens)),
            eos_token_id=self.pair.eos_token_id,
            generator=generator,
        )

    def run_sample(self, example: dict, sample_index: int) -> SampleRecord:
        from mtad.metrics.perplexity import sample_logprob

        seed = derive_seed(int(self.cfg.seed), str(example["id"]), sample_index)  # what `generation.seeded` draws
        generator = self.torch.Generator(device=self.gen_device).manual_seed(seed)
        history, turns = [], []
        for turn in range(self.task.num_turns(example)):
            prompt = self.task.build_prompt(example, self.pair.tokenizer, history=tuple(history))
            out, energy, profile = self.generate(prompt, self.task.max_new_tokens, generator)
            text = self.pair.tokenizer.decode(out.tokens, skip_special_tokens=True)
            logprob_sum, logprob_n = sample_logprob(self.pair.target, prompt, out.tokens)
            turns.append(
                TurnRecord(
                    turn=turn,
                    prompt_tokens=len(prompt),
                    text=text,
                    completion=self.task.postprocess(example, text),
                    token_ids=list(out.tokens),
                    stats=out.stats.as_dict(),
                    energy=energy,
                    logprob_sum=float(logprob_sum),
                    logprob_n=int(logprob_n),
                    **({"profile": profile} if profile is not None else {}),
                )
            )
            history.append(text)
        n = sum(t["logprob_n"] for t in turns)
        mean_logprob = sum(t["logprob_sum"] for t in turns) / n if n else None
        scores = self.task.score(example, [t["completion"] for t in turns])  # one sample, every turn
        return SampleRecord(sample=sample_index, seed=seed, turns=turns, mean_logprob=mean_logprob, scores=scores)

    def run_example(self, example: dict) -> Record:
        samples = [self.run_sample(example, i) for i in range(self.task.samples_per_example)]
        return Record(
            id=str(example["id"]),
            samples=samples,
            new_tokens=sum(t["stats"]["new_tokens"] for s in samples for t in s["turns"]),
            decode_seconds=sum(t["stats"]["seconds"] for s in samples for t in s["turns"]),
        )


def check_settings(settings: dict, cfg) -> None:
    """The generation ran what its cell names: every setting the record carries that the cell's config
    sets too (the method's fields, the stop rule) is the config's value; else nothing is recorded."""
    from omegaconf import OmegaConf

    method = OmegaConf.to_container(cfg.method, resolve=True) if OmegaConf.is_config(cfg.method) else cfg.method
    named = {**method, "stop_rule": cfg.stop_rule}
    named["method"] = named.pop("name", settings["method"])
    differ = {k: (named[k], v) for k, v in settings.items() if k in named and _plain(named[k]) != _plain(v)}
    if differ:
        raise RuntimeError(
            "the decoder ran other settings than its cell names (setting: cell's, decoder's): "
            + ", ".join(f"{k}: {a!r}, {b!r}" for k, (a, b) in differ.items())
        )


def _plain(value):
    """A setting as a comparable value (a list and a tuple of the same items are equal)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


def needs_rescoring(task, records: list[dict]) -> list[dict]:
    """Recorded examples with a sample the task could not score (e.g. its judge failed)."""
    return [r for r in records if any(task.unfinished(s["scores"]) for s in r["samples"])]


def rescore(task, examples_by_id: dict[str, dict], records: list[dict]) -> int:
    """Score again, from the recorded answers (nothing is generated), every sample of
    ``records`` that lacks a score; returns how many samples now have one."""
    fixed = 0
    for record in records:
        example = examples_by_id.get(record["id"])
        if example is None:  # beyond the current limit: left for a run that covers it
            continue
        for sample in record["samples"]:
            if not task.unfinished(sample["scores"]):
                continue
            sample["scores"] = task.score(example, [t["completion"] for t in sample["turns"]])
            fixed += not task.unfinished(sample["scores"])
    return fixed
