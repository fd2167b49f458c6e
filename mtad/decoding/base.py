"""The decoding contract shared by every method: settings, statistics, the generate loop."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from transformers import PreTrainedModel

from mtad.decode_stats import DecodeStats
from mtad.decoding.capabilities import target_feature_depths
from mtad.decoding.head_kv import draft_cached_model
from mtad.decoding.kv import CachedModel
from mtad.decoding.logits import Dist, Support, logits_to_dist
from mtad.decoding.lookup import PromptLookup
from mtad.decoding.params import SamplingFields
from mtad.decoding.registry import MethodSpec, implementations, register
from mtad.decoding.static_kv import cached_model, resolve_decode_path
from mtad.devices import model_device, sync


def check_prompt_ids(input_ids: torch.Tensor, max_new_tokens: int, target) -> None:
    """Token ids that index the target's vocabulary (an integer tensor, every id in range), and a
    warning when prompt + new tokens run past the context the target was trained on."""
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"input_ids must be a [1, L] LongTensor of token ids, got dtype {input_ids.dtype}")
    vocab = target.config.vocab_size
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids holds token id {bad}, outside the target's vocabulary [0, {vocab})")
    context = getattr(target.config, "max_position_embeddings", None)
    if context and input_ids.shape[1] + max_new_tokens > context:
        warnings.warn(
            f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceed the target's "
            f"context of {context} positions: positions beyond it were never trained and the output may degrade",
            stacklevel=4,  # the caller of Decoder.generate (via check_generate_args)
        )


@dataclass
class DecodeOutput:
    """One generation's record: its tokens, its statistics (counts, time split) and what produced it:
    the method and every setting it ran with (``settings``: the params' fields, the decode path and
    the stop rule), so that a record read alone says how it was made."""

    tokens: list[int]
    stats: DecodeStats
    settings: dict = field(default_factory=dict)


@dataclass
class Step:
    """What one iteration (one target forward) produced."""

    emitted: list[int]  # accepted draft tokens followed by the one token sampled from p
    accepted: int  # how many of `emitted` came from the draft
    drafted: int  # drafted tokens charged to this iteration (γ, or the tree depth)
    tree_nodes: int = 0


STOP_RULES = ("eos", "block")  # how a generation ends at EOS (Decoder.generate)


def check_generate_args(input_ids: torch.Tensor, max_new_tokens: int, stop_rule: str, target) -> None:
    """What ``Decoder.generate`` takes: a [1, L] prompt of at least one token in the target's
    vocabulary (``check_prompt_ids``), ``max_new_tokens`` an int >= 1 and a stop rule of ``STOP_RULES``."""
    if not (isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] == 1):
        raise ValueError(f"input_ids must be a [1, L] LongTensor, got {getattr(input_ids, 'shape', type(input_ids))}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token")
    check_prompt_ids(input_ids, max_new_tokens, target)
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens}")
    if stop_rule not in STOP_RULES:
        raise ValueError(f"stop_rule must be one of {STOP_RULES}, got {stop_rule!r}")


class Decoder:
    """Base class: settings, cache set-up, the stop rules and the statistics.

    A method declares `spec` (its `mtad.decoding.registry.MethodSpec`: name, label, settings class, ...),
    which registers the class and sets `name` and `params_type` (its frozen settings class,
    mtad/decoding/params.py) from it; it sets `needs_draft` and implements `step()`, which runs one
    target forward and returns a Step; it reads its settings from `self.params`. A class without a
    `spec` of its own (a shared base such as `MultiTokenDecoder`) registers nothing. `decode_path`
    (not a method parameter: it never changes what is sampled) picks how the models run:
    eager | static | compiled | fast (static_kv.py).
    """

    spec: ClassVar[MethodSpec]
    name: ClassVar[str] = ""
    needs_draft: ClassVar[bool] = True
    supports_lookup: ClassVar[bool] = False  # takes a PromptLookup as its draft (lookup.py)
    params_type: ClassVar[type[SamplingFields]] = SamplingFields
    # the settings' names and defaults, read-only, derived from params_type when a method class is
    # made (for readers that only need the names, such as the runner's check of command-line keys)
    defaults: ClassVar[Mapping[str, Any]]
    params: SamplingFields

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:  # declared here, not inherited
            cls.name, cls.params_type = cls.spec.name, cls.spec.settings
            register(cls)
        cls.defaults = MappingProxyType(cls.params_type.defaults())

    def __init__(
        self,
        target: PreTrainedModel,
        draft: PreTrainedModel | None = None,
        decode_path: str | None = None,
        params: SamplingFields | None = None,
        **values: Any,
    ):
        self.params = self.settings(params, **values)
        if target is None:
            raise ValueError(f"{self.name}: a target model is required")
        self.lookup, draft = self._split_lookup(draft)
        if self.needs_draft and draft is None and self.lookup is None:
            raise ValueError(f"{self.name} needs a draft model (draft=None given)")
        self.target = target
        self.draft = draft if self.needs_draft else None
        self.decode_path = decode_path or "fast"
        resolve_decode_path(self.decode_path, target)  # a bad name fails here, not mid-run
        if self.draft is not None:
            check_same_vocab(target, self.draft)

    def _split_lookup(self, draft) -> tuple[PromptLookup | None, PreTrainedModel | None]:
        """A lookup draft (lookup.py) and the model it carries, or None and `draft` as given. A
        method without `supports_lookup` refuses one; one that needs no draft ignores it."""
        if not isinstance(draft, PromptLookup) or not self.needs_draft:
            return None, draft
        refusal = self.lookup_refusal()
        if refusal:
            raise ValueError(refusal)
        return draft, draft.model

    @classmethod
    def lookup_refusal(cls) -> str | None:
        """Why this method cannot take a lookup draft, in one line; None when it can (or drafts nothing)."""
        if cls.supports_lookup or not cls.needs_draft:
            return None
        takes = sorted(name for name, sub in implementations().items() if sub.supports_lookup)
        return f"{cls.name} does not draft by prompt lookup (draft=lookup); methods that do: {', '.join(takes)}"

    # -- settings -------------------------------------------------------------------
    @classmethod
    def settings(cls, params: SamplingFields | None = None, **values: Any) -> SamplingFields:
        """The method's validated settings, built without any model (a bad setting fails before
        models are loaded): `params` (a `params_type`; default: its defaults) with the keyword
        `values` replaced. An unknown keyword raises TypeError naming the valid ones."""
        if params is None:
            params = cls.params_type()
        elif type(params) is not cls.params_type:  # exact: MMTADParams is an MTADParams but not MTAD's
            raise TypeError(f"{cls.name}: params must be a {cls.params_type.__name__}, got {type(params).__name__}")
        names = cls.params_type.names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise TypeError(f"{cls.name}: unknown parameter(s) {unknown}; valid: {sorted(names)}")
        return replace(params, **values) if values else params

    def probs(self, logits: torch.Tensor, support: Support | None = None) -> Dist:
        """[..., V] logits (or [..., n] over `support`: a restricted head's, `CachedModel.support`)
        -> the processed distribution on its support (p or q)."""
        p = self.params
        return logits_to_dist(logits, p.temperature, p.top_k, p.top_p, support)

    # -- the loop -------------------------------------------------------------------
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        eos_token_id: int | list[int] | None = None,
        generator: torch.Generator | None = None,
        stop_rule: str = "eos",
    ) -> DecodeOutput:
        """``stop_rule`` (one of ``STOP_RULES``): ``eos`` ends the output at its first EOS, dropping
        the rest of the block it came in; ``block`` is the official implementation's: after each block
        it stops if an EOS is among the sequence's last ``draft_depth`` tokens (γ; the prompt counts),
        keeping the whole block. An EOS that opens a block of γ + 1 lies outside that window and is
        missed, as there."""
        check_generate_args(input_ids, max_new_tokens, stop_rule, self.target)
        eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
        self.generator = generator
        out_device = model_device(self.target)
        self._open_caches(out_device, room=input_ids.shape[1] + max_new_tokens)
        compiles_before = self._compiles()
        prompt = self._open_sequence(input_ids, max_new_tokens, out_device)
        stats, tokens = DecodeStats(), []
        sync(out_device)
        start = time.perf_counter()
        with torch.inference_mode():
            self.target_lm.prefill(prompt[:-1])  # the last prompt token stays pending
            if self.draft_lm is not None:
                self.draft_lm.prefill(prompt[:-1])
            prefilled = self._forward_counters()
            while len(tokens) < max_new_tokens:
                if self._block(tokens, stats, max_new_tokens, eos, stop_rule):
                    break
        sync(out_device)
        stats.seconds = time.perf_counter() - start
        return self._finish(stats, tokens, prompt, compiles_before, prefilled, stop_rule)

    def _open_caches(self, out_device: torch.device, room: int) -> None:
        """This generation's caches of the target and the draft; ``room``: the committed positions a
        cache may need (prompt + new tokens; trees come on top)."""
        self.target_lm = self.draft_lm = None  # the last generation's caches go first: their buffers are reused
        self.target_lm = cached_model(
            self.target, out_device, self.decode_path, room, features=target_feature_depths(self.draft)
        )
        self.draft_lm = (
            draft_cached_model(self.draft, self.target_lm, out_device, self.decode_path, room)
            if self.draft is not None
            else None
        )
        if self.draft_lm is not None:
            self.draft_lm.role = "draft"

    def _open_sequence(self, input_ids: torch.Tensor, max_new_tokens: int, out_device: torch.device) -> torch.Tensor:
        """The committed sequence buffer (``self.seq``: prompt + generated, with room for one
        oversized block) holding the prompt; returns the prompt on ``out_device``. [L]"""
        prompt = input_ids[0].to(out_device)
        self.seq = torch.empty(prompt.numel() + max_new_tokens + 64, dtype=torch.long, device=out_device)
        self.seq[: prompt.numel()] = prompt
        self.length = prompt.numel()
        return prompt

    def _block(self, tokens: list[int], stats: DecodeStats, max_new_tokens: int, eos: set, stop_rule: str) -> bool:
        """One iteration: the method's ``step``, its tokens cut to the ``max_new_tokens`` left and at an
        EOS by ``stop_rule``, committed and appended to ``tokens``, its counts added to ``stats``.
        Returns whether an EOS ended the output."""
        step = self.step()
        emitted = step.emitted[: max_new_tokens - len(tokens)]
        first_eos = next((i for i, tok in enumerate(emitted) if tok in eos), None)
        ended = first_eos is not None
        if ended and stop_rule == "eos":  # tokens after EOS inside a block are dropped, not counted
            emitted = emitted[: first_eos + 1]
        self._commit(emitted)
        if stop_rule == "block":  # the official loop's test: an EOS among the sequence's last γ tokens
            window = self.seq[max(0, self.length - self.params.draft_depth) : self.length].tolist()
            ended = any(tok in eos for tok in window)
        tokens.extend(emitted)
        kept = min(step.accepted, len(emitted))
        stats.drafted += step.drafted
        stats.accepted += kept
        stats.tree_nodes += step.tree_nodes
        if step.drafted:
            stats.accept_lengths.append(kept)
        return ended

    def _finish(
        self,
        stats: DecodeStats,
        tokens: list[int],
        prompt: torch.Tensor,
        compiles_before: int,
        prefilled: tuple[int, int, int],
        stop_rule: str,
    ) -> DecodeOutput:
        """The generation's record: the counts, decode path and compilations completed in ``stats``
        (its seconds already set), and every setting it ran with."""
        stats.new_tokens = len(tokens)
        stats.prompt_tokens = prompt.numel()
        stats.decode_path = resolve_decode_path(self.decode_path, self.target)
        stats.compiles = self._compiles() - compiles_before
        self._record_forwards(stats, prefilled)
        settings = {"method": self.name, **asdict(self.params), "decode_path": self.decode_path, "stop_rule": stop_rule}
        if self.lookup is not None:
            settings["lookup"] = self.lookup.settings()
        return DecodeOutput(tokens=tokens, stats=stats, settings=settings)

    def _forward_counters(self) -> tuple[int, int, int]:
        """Target calls, draft calls and the rows the draft has read so far."""
        if self.draft_lm is None:
            return self.target_lm.calls, 0, 0
        return self.target_lm.calls, self.draft_lm.calls, self.draft_lm.tokens_fed

    def _record_forwards(self, stats: DecodeStats, prefilled: tuple[int, int, int]) -> None:
        """The models' forwards into `stats`: the calls and the draft's rows since the prefill
        (`prefilled`: the counters when it ended; a prefill is no iteration), and the seconds inside
        each model's forwards, its prefill's apart."""
        target_calls, draft_calls, draft_rows = (now - then for now, then in zip(self._forward_counters(), prefilled))
        stats.target_calls, stats.draft_calls, stats.draft_rows = target_calls, draft_calls, draft_rows
        stats.target_seconds = self.target_lm.seconds
        stats.target_prefill_seconds = self.target_lm.prefill_seconds
        if self.draft_lm is not None:
            stats.draft_seconds = self.draft_lm.seconds
            stats.draft_prefill_seconds = self.draft_lm.prefill_seconds

    def _compiles(self) -> int:
        """Compilations so far of the bodies these caches run (one body per model, counted once)."""
        bodies = {
            id(lm.compiled): lm.compiles
            for lm in (self.target_lm, self.draft_lm)
            if getattr(lm, "compiled", None) is not None
        }
        return sum(bodies.values())

    def _commit(self, emitted: list[int]) -> None:
        if self.length + len(emitted) > self.seq.numel():
            self.seq = torch.cat([self.seq, torch.empty_like(self.seq)])
        self.seq[self.length : self.length + len(emitted)] = torch.tensor(emitted, dtype=torch.long)
        self.length += len(emitted)

    def uncached(self, lm: CachedModel) -> torch.Tensor:
        """Committed tokens that `lm`'s cache lacks (at least the pending one). [m]"""
        return self.seq[lm.committed : self.length]

    def step(self) -> Step:
        raise NotImplementedError


def check_same_vocab(target: PreTrainedModel, draft: PreTrainedModel) -> None:
    """Draft and target must score the same token ids."""
    vt, vd = target.config.vocab_size, draft.config.vocab_size
    if vt != vd:
        raise ValueError(
            f"draft and target vocabularies differ (target {vt} tokens, draft {vd}); "
            "speculative methods need the same tokenizer on both"
        )
