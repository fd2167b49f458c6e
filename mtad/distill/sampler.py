"""Batched sampling for the teacher pass: a fixed number of slots, each refilled with a new
prompt as soon as its answer ends, over one preallocated KV cache.

Why not a plain batch: a batch that waits for its longest answer decodes finished rows for
nothing, and HF's growing cache copies every layer's keys and values at every step (a
[B, heads, T, d] concatenation per layer per token). Here

- every layer's keys and values live in one buffer [slots, heads, capacity, d], written in place
  (`SlotLayer`); the attention mask [slots, T] says which columns each slot reads;
- a finished slot is refilled at once: the new prompt is prefilled alone and its keys and values
  are written into the slot's last P columns (left-padded, so every slot ends at column T);
- when the buffer is full, columns no live slot reads (left of every slot's first column) are
  dropped by one shift to the left.

Answers come back in prompt order whatever slot served them, up to and including EOS.

`keep_top_k`: the forwards that sample an answer are the target's teacher pass of it as well
(each step's logits at temperature 1 predict the token it draws; each fed token's hidden states
are its features), so they also keep what `corpus.score` would compute by a second forward:
the top-K log-probs at every answer position and the hidden states of every position (the
final one and the depths `depths`), except the answer's last token, which is never fed (its
features are zeros: no loss reads them).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ..decoding.logits import logits_to_dist, sample


class SlotLayer(DynamicLayer):
    """One layer's keys and values in a preallocated [slots, heads, capacity, d] buffer; a forward
    appends its new columns in place and reads the first `length` columns."""

    def __init__(self, slots: int, heads: int, capacity: int, head_dim: int, dtype, device):
        super().__init__()
        self.keys = torch.zeros(slots, heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length, self.device, self.is_initialized = 0, device, True

    def update(self, key_states, value_states, *args, **kwargs):
        new = key_states.shape[-2]
        self.keys[:, :, self.length : self.length + new] = key_states
        self.values[:, :, self.length : self.length + new] = value_states
        self.length += new
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def write_slot(self, slot: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """A prefilled prompt's keys and values [heads, P, d] into the slot's last P columns."""
        P = keys.shape[-2]
        self.keys[slot, :, self.length - P : self.length] = keys
        self.values[slot, :, self.length - P : self.length] = values

    def shift(self, drop: int, grow: int = 0) -> None:
        """Drop the first `drop` columns (then leave `grow` zero columns at the left edge)."""
        keep = self.length - drop
        for buf in (self.keys, self.values):
            buf[:, :, grow : grow + keep] = buf[:, :, drop : self.length].clone()
            buf[:, :, :grow] = 0
        self.length = grow + keep


def slot_cache(model, slots: int, capacity: int) -> DynamicCache:
    """A cache whose every layer is a `SlotLayer` of the model's shape."""
    cfg = model.config.get_text_config(decoder=True)
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    param = next(model.parameters())
    cache = DynamicCache(config=model.config)
    cache.layers = [
        SlotLayer(slots, heads, capacity, head_dim, param.dtype, param.device) for _ in range(cfg.num_hidden_layers)
    ]
    return cache


def cache_argument(model) -> str:
    """transformers >= 5.2x names the forward's cache argument `cache`; older releases `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def sample_stream(
    model,
    prompts: list[list[int]],
    max_new: int,
    setting: tuple,
    eos: int,
    seed: int,
    slots: int = 48,
    logits_of=None,
    max_prompt: int = 768,
    keep_top_k: int = 0,
    keep_features: bool = False,
    depths: tuple[int, ...] = (),
    slack: int = 64,
) -> list[list[int]] | tuple[list[list[int]], list[dict]]:
    """Sample an answer to every prompt with `slots` rows decoding at once, each refilled as soon
    as its answer ends. Prompts start shortest first and the buffer drops its leading columns once
    `slack` of them are read by no slot: every step reads the whole buffer's keys and values, so it
    stays as wide as the live contexts (similar lengths, decoding together), not as the longest
    prompt ever seen. `logits_of(model, out)` maps a forward's output to [B, V] logits at the
    last position (default `out.logits[:, -1]`). Returns answers in prompt order; with
    `keep_top_k`, also each answer's teacher pass (`top_ids`, `top_logprobs` [n, K]; with
    `keep_features`, `features` [P + n, H] and `depth_features` [P + n, D*H], fp16, as
    `corpus.score` stores them)."""
    kept = TeacherPass(keep_top_k, keep_features, depths, len(prompts)) if keep_top_k else None
    stream = SlotStream(model, prompts, max_new, setting, eos, seed, slots, max_prompt, logits_of, kept)
    stream.run(slack)
    if kept is None:
        return stream.answers
    return stream.answers, [teacher_pass(k) for k in kept.rows]


class TeacherPass:
    """What the sampling forwards keep of each prompt's teacher pass: per prompt, the top-K
    log-probs of every fed position's next token and, with `features`, the final hidden state and
    the fused `depths`' states of each fed position (`teacher_pass` turns them into a record)."""

    def __init__(self, top_k: int, features: bool, depths: tuple[int, ...], prompts: int):
        self.top_k, self.features, self.depths = top_k, features, depths
        self.rows = [{"top": [], "features": [], "depths": []} for _ in range(prompts)]

    def forward_kwargs(self) -> dict:
        """What a forward is asked for beyond its logits: the hidden states, when features are kept."""
        return {"output_hidden_states": True} if self.features else {}

    def keep(self, owners: list[tuple[int, int]], logits: torch.Tensor, hidden_states: tuple, cols: slice) -> None:
        """The teacher pass of the prompts `owners` ((prompt index, batch row) pairs) from one
        forward: the top-K of `logits` [B, V] (each row's next token), the features of positions
        `cols` of each row. One batched op per kind of row, then a view per prompt."""
        top = torch.log_softmax(logits.float(), dim=-1).topk(self.top_k)  # [B, K]
        ids, logprobs = top.indices.to(torch.int32).cpu(), top.values.to(torch.float16).cpu()
        if self.features:
            final = hidden_states[-1][:, cols].to("cpu", torch.float16)  # [B, c, H]
            fused = None
            if self.depths:
                fused = torch.cat([hidden_states[d][:, cols] for d in self.depths], -1).to("cpu", torch.float16)
        for index, row in owners:
            self.rows[index]["top"].append((ids[row], logprobs[row]))
            if self.features:
                self.rows[index]["features"].append(final[row])
                if fused is not None:
                    self.rows[index]["depths"].append(fused[row])


class SlotStream:
    """The state of `sample_stream`: `slots` rows over one `slot_cache`, the mask [slots, T] of the
    columns each slot reads, each slot's next position, prompt (`owner`, -1: idle) and the token it
    feeds next (`last`), the queue of prompts (shortest first) and the answers so far."""

    def __init__(self, model, prompts, max_new, setting, eos, seed, slots, max_prompt, logits_of, kept):
        self.model, self.prompts, self.max_new, self.eos = model, prompts, max_new, eos
        self.setting, self.max_prompt, self.logits_of, self.kept = setting, max_prompt, logits_of, kept
        self.device = device = next(model.parameters()).device
        self.slots = slots = max(1, min(slots, len(prompts)))
        self.capacity = max_prompt + max_new + 64
        self.cache = slot_cache(model, slots, self.capacity)
        self.layers, self.key = self.cache.layers, cache_argument(model)
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.mask = torch.zeros(slots, 0, dtype=torch.long, device=device)  # [slots, T]: columns each slot reads
        self.position = torch.zeros(slots, dtype=torch.long, device=device)  # next position id per slot
        self.owner = [-1] * slots  # prompt index per slot (-1: idle)
        self.answers: list[list[int]] = [[] for _ in prompts]
        self.last = torch.full((slots,), eos, dtype=torch.long, device=device)  # the token each slot feeds next
        by_length = sorted(range(len(prompts)), key=lambda i: min(len(prompts[i]), max_prompt))  # stable
        self.queue = iter(by_length)
        self.forward_kw = kept.forward_kwargs() if kept is not None else {}

    def run(self, slack: int) -> None:
        """Decode until every prompt is answered: fill every slot, then record, refill, compact, step."""
        for slot in range(self.slots):
            self.fill(slot)
        while self.live():
            self.record_and_refill()
            if not self.live():
                break
            self.compact(slack)
            self.step()

    def live(self) -> bool:
        """Whether any slot still decodes an answer."""
        return any(o >= 0 for o in self.owner)

    def draw(self, out) -> torch.Tensor:
        """[B] tokens drawn from a forward's last-position logits under the stream's setting."""
        logits = self.logits_of(self.model, out) if self.logits_of else out.logits[:, -1]
        return _draw(logits, *self.setting, self.gen)

    def fill(self, slot: int) -> bool:
        """The next prompt of the queue into `slot` (prefilled alone, its keys and values written into
        the slot's last P columns) and its first token drawn; False, the slot idle, once none is left."""
        index = next(self.queue, None)
        if index is None:  # idle: from the next step on it reads only the tokens it is still fed
            self.owner[slot] = -1
            self.mask[slot] = 0
            return False
        prompt = torch.tensor(self.prompts[index][-self.max_prompt :], device=self.device)[None]  # [1, P]
        P = prompt.shape[1]
        single = DynamicCache(config=self.model.config)
        out = self.model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{self.key: single}, **self.forward_kw)
        if self.kept is not None:
            self.kept.keep([(index, 0)], out.logits[:, -1], out.hidden_states, slice(None))
        T = self.widen(P)
        for layer, fresh in zip(self.layers, single.layers):
            layer.write_slot(slot, fresh.keys[0], fresh.values[0])
        self.mask[slot] = 0
        self.mask[slot, T - P :] = 1
        self.position[slot] = P
        self.owner[slot] = index
        self.last[slot] = self.draw(out)[0]
        return True

    def widen(self, P: int) -> int:
        """The buffer's filled width T, widened on the left first when a new prompt of P tokens is longer."""
        T = self.layers[0].length
        if P > T:
            for layer in self.layers:
                layer.shift(0, grow=P - T)
            self.mask = torch.cat([torch.zeros(self.slots, P - T, dtype=torch.long, device=self.device), self.mask], 1)
            T = P
        return T

    def record_and_refill(self) -> None:
        """Each slot's token appended to its answer; a slot whose answer ended (EOS or `max_new`
        tokens) refilled, again as long as the new prompt's first token ends it too."""
        for slot in range(self.slots):
            while self.owner[slot] >= 0:
                answer = self.answers[self.owner[slot]]
                answer.append(int(self.last[slot]))
                if answer[-1] != self.eos and len(answer) < self.max_new:
                    break
                self.fill(slot)

    def compact(self, slack: int) -> None:
        """Drop the leading columns no slot reads once `slack` of them pile up (a shift copies the
        cache: not every step) or the buffer is full."""
        drop = int((self.mask.cumsum(-1) == 0).sum(-1).min())  # leading columns no slot reads any more
        if drop >= slack or self.layers[0].length + 1 > self.capacity:
            for layer in self.layers:
                layer.shift(drop)
            self.mask = self.mask[:, drop:]

    def step(self) -> None:
        """One batched forward of every slot's last token; the next tokens drawn."""
        self.mask = torch.cat([self.mask, torch.ones(self.slots, 1, dtype=torch.long, device=self.device)], dim=1)
        out = self.model(
            input_ids=self.last[:, None],
            attention_mask=self.mask,
            position_ids=self.position[:, None],
            use_cache=True,
            logits_to_keep=1,
            **{self.key: self.cache},
            **self.forward_kw,
        )
        if self.kept is not None:
            live = [(index, slot) for slot, index in enumerate(self.owner) if index >= 0]
            self.kept.keep(live, out.logits[:, -1], out.hidden_states, slice(-1, None))
        self.position += 1
        self.last = self.draw(out)


def teacher_pass(kept: dict) -> dict:
    """One answer's kept rows as a corpus record's tensors (the unfed last token's features zero)."""
    ids, logprobs = (torch.stack([t[i] for t in kept["top"]]) for i in (0, 1))
    out = {"top_ids": ids, "top_logprobs": logprobs}
    for name, key in (("features", "features"), ("depth_features", "depths")):
        if kept[key]:
            rows = torch.cat(kept[key])
            out[name] = torch.cat([rows, rows.new_zeros(1, rows.shape[-1])])
    return out


def _draw(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, gen: torch.Generator) -> torch.Tensor:
    """[B, V] logits -> [B] tokens under (temperature, top-k, top-p)."""
    dist = logits_to_dist(logits.float(), temperature, top_k, top_p)  # on top-k's survivors when top-k is on
    return sample(dist, gen).to(logits.device)  # the generator's uniforms, drawn on its own device
