"""transformers' own `generate()` behind the decoders' contract: the reference implementation every
speed-up of the bench is also set against.

It samples with the same processing (temperature, then top-k, then top-p) from the same target and
stops at the same EOS, but draws from torch's global generator (seeded from the generator it is
given) and runs transformers' loop, caches and kernels; its output is the target's distribution, not
our draws. Its record holds what `generate()` lets us see: new tokens, prompt tokens, the call's
seconds, and one target forward per token (its loop scores one token per forward, the first in the
prompt's). `static_compile` runs transformers' static cache with its own torch.compile of the
decode step. `hf_assisted` (its own module) is its assisted generation with a draft model.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import torch

from mtad.decode_stats import DecodeStats
from mtad.decoding.base import DecodeOutput, Decoder, check_generate_args
from mtad.decoding.params import HFGenerateParams
from mtad.decoding.registry import REFERENCE, MethodSpec
from mtad.devices import model_device, sync

HF_PATH = "transformers"  # the record's decode path: transformers' own loop, none of ours


def generate_kwargs(params, target, max_new_tokens: int, eos: list[int]) -> dict:
    """`generate()`'s keywords for `params`' processing, `max_new_tokens` and the stop tokens."""
    kwargs = {
        "max_new_tokens": max_new_tokens,
        "do_sample": params.temperature > 0,
        "eos_token_id": eos or None,
        "pad_token_id": eos[0] if eos else target.config.eos_token_id,
    }
    if kwargs["do_sample"]:
        kwargs.update(temperature=params.temperature, top_k=params.top_k or None, top_p=params.top_p)
    else:
        kwargs.update(temperature=None, top_k=None, top_p=None)  # greedy: no processing warnings
    if not eos:
        kwargs["min_new_tokens"] = max_new_tokens  # no stop token: every output is max_new_tokens long
    return kwargs


class HFGenerate(Decoder):
    spec = MethodSpec(
        name="hf_generate",
        label="HF generate",
        order=110,
        color="#17becf",
        marker="s",
        settings=HFGenerateParams,
        lossless=True,  # transformers' own sampling from the target
        drafts="none",
        implements=REFERENCE,
        study=False,  # a reference implementation: the bench's rows beside ours
    )
    needs_draft = False
    params: HFGenerateParams

    def extra_kwargs(self) -> dict:
        """What this method adds to `generate()`'s keywords: the static cache and its compilation."""
        if not self.params.static_compile:
            return {}
        from transformers import CompileConfig

        compile_config = CompileConfig(dynamic=False)
        compile_config._compile_all_devices = True  # transformers compiles on CUDA only unless told
        return {"cache_implementation": "static", "compile_config": compile_config}

    def generate(
        self,
        input_ids: torch.Tensor,  # [1, L]
        max_new_tokens: int,
        eos_token_id: int | list[int] | None = None,
        generator: torch.Generator | None = None,
        stop_rule: str = "eos",
    ) -> DecodeOutput:
        check_generate_args(input_ids, max_new_tokens, stop_rule, self.target)
        if stop_rule != "eos":
            raise ValueError(
                f"{self.name} stops as transformers does, at the first EOS: stop_rule 'eos', got {stop_rule!r}"
            )
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or ())
        kwargs = generate_kwargs(self.params, self.target, max_new_tokens, eos) | self.extra_kwargs()
        torch.manual_seed(generator.initial_seed() if generator is not None else 0)  # generate() draws from torch's
        device = model_device(self.target)
        prompt = input_ids.to(device)
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.target.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)  # [1, L + n]
        sync(device)
        tokens = out[0, prompt.shape[1] :].tolist()
        stats = DecodeStats(new_tokens=len(tokens), prompt_tokens=prompt.shape[1], seconds=time.perf_counter() - start)
        stats.decode_path = HF_PATH
        self.count_forwards(stats)
        settings = {"method": self.name, **asdict(self.params), "decode_path": HF_PATH, "stop_rule": stop_rule}
        return DecodeOutput(tokens=tokens, stats=stats, settings=settings)

    def count_forwards(self, stats: DecodeStats) -> None:
        """Plain sampling scores one token per target forward, the first in the prompt's."""
        stats.target_calls = stats.new_tokens
