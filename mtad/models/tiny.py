"""Tiny random-weight models and the test tokenizer: the tiny pairs (conf/pair/tiny_*.yaml) and the tests.

Everything is built in memory in well under a second, with no network:

- `tiny_tokenizer`: a byte-level BPE trained on a few embedded sentences (cached per variant),
  so it encodes any text; a ChatML chat template, or none (a plain model's tokenizer), and
  optionally a BOS token added to every encoding;
- `tiny_model`: the tiny pairs' models, random-weight configs whose `vocab_size` is that
  tokenizer's size. A larger `initializer_range` than the default makes the random next-token
  distributions peaked and different between seeds, which is what tests of acceptance rules want;
- `tiny_llama`, `tiny_opt`, `biased_llama`, `tiny_head`: the exactness tests' float64 models over
  tiny vocabularies (enumerable distributions), `sharpness` scaling the output head so that
  distributions are far from uniform; float64 so that a chain forward and a tree forward agree
  to ~1e-15 and greedy ties never flip;
- `float64_pair`: the float64 pairs the shared small cases (`check_cases.py`) run on.
"""

from __future__ import annotations

import functools

import torch
from transformers import LlamaForCausalLM

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# A ChatML template like SmolLM2's, without the default system message.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = {
    "default": [
        "The quick brown fox jumps over the lazy dog.",
        "Speculative decoding drafts tokens with a small model and verifies them with a large one.",
        "SELECT name FROM employees WHERE salary > 1000 ORDER BY name;",
        "def add(a, b):\n    return a + b\n",
        "Summarize the article in three sentences.",
        "A joint distribution over several tokens can be approximated with beam sampling.",
        "The weather today is sunny with a light breeze from the west.",
        "Question: what is two plus three? Answer: five.",
    ],
    # A different corpus and size: a tokenizer that must be refused next to "default".
    "alt": [
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
        "Pack my box with five dozen liquor jugs.",
        "Colourless green ideas sleep furiously.",
    ],
}
VOCAB_SIZE = {"default": 320, "alt": 300}


@functools.lru_cache(maxsize=None)
def _tokenizer_json(variant: str) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if variant not in CORPUS:
        raise KeyError(f"unknown tiny tokenizer {variant!r}; valid: {', '.join(CORPUS)}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE[variant],
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS[variant], trainer=trainer)
    return tok.to_str()


def tiny_tokenizer(variant: str = "default", chat: bool = True, add_bos: bool = False):
    """A PreTrainedTokenizerFast; EOS = <|im_end|>, BOS = <|im_start|>. `chat`: with a ChatML chat
    template (else none, as a plain model's); `add_bos`: BOS in front of every encoding that asks
    for special tokens (as Llama's tokenizers do; SmolLM2's, which the tiny pairs mimic, do not)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_tokenizer_json(variant))
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", tok.token_to_id("<|im_start|>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE if chat else None,
    )


def tiny_model(
    family: str,
    vocab_size: int,
    seed: int,
    hidden_size: int = 32,
    num_layers: int = 2,
    initializer_range: float = 0.3,
    **extra,
):
    """A seeded random-weight causal LM of the given family ("llama" or "opt"), float32;
    `extra`: further config fields, which take precedence over the ones set here."""
    from transformers import LlamaConfig, OPTConfig, OPTForCausalLM

    shared = dict(  # the shape and special tokens every family's config names the same way
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    families = {
        "llama": (
            LlamaConfig,
            LlamaForCausalLM,
            dict(
                intermediate_size=2 * hidden_size,
                num_key_value_heads=2,
                initializer_range=initializer_range,
                tie_word_embeddings=False,
            ),
        ),
        "opt": (
            OPTConfig,
            OPTForCausalLM,
            dict(ffn_dim=2 * hidden_size, word_embed_proj_dim=hidden_size, init_std=initializer_range),
        ),
    }
    if family not in families:
        raise KeyError(f"unknown tiny model family {family!r}; valid: {', '.join(families)}")
    config_type, cls, own = families[family]
    config = config_type(**(shared | own | extra))
    torch.manual_seed(seed)
    return cls(config).eval()


# ---------------------------------------------------------------- float64 models for exactness tests

# transformers' default initialisation (std 0.02) and 512 positions; OPT keeps its own special
# token ids (the padding id's embedding row starts at zero) and gets an untied head like Llama's
FLOAT64_CONFIG = {
    "llama": dict(max_position_embeddings=512, pad_token_id=None),
    "opt": dict(max_position_embeddings=512, bos_token_id=2, eos_token_id=2, pad_token_id=1, tie_word_embeddings=False),
}


def _float64_model(family: str, seed: int, vocab: int, sharpness: float, layers: int):
    """A float64 model of `family` over `vocab` tokens, its output head scaled by `sharpness`."""
    model = tiny_model(family, vocab, seed, num_layers=layers, initializer_range=0.02, **FLOAT64_CONFIG[family])
    model = model.double().eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpness)
    return model


def tiny_llama(seed: int, vocab: int = 6, sharpness: float = 1.0, layers: int = 2) -> LlamaForCausalLM:
    return _float64_model("llama", seed, vocab, sharpness, layers)


def tiny_opt(seed: int, vocab: int = 6, sharpness: float = 1.0, layers: int = 2):
    return _float64_model("opt", seed, vocab, sharpness, layers)


BUILDERS = {"llama": tiny_llama, "opt": tiny_opt}


class BiasedLlama(LlamaForCausalLM):
    """A Llama whose logits get a fixed bias: -inf removes tokens from the support, a large
    value makes the distribution (numerically) one-hot. Adversarial drafts/targets."""

    def set_bias(self, bias: torch.Tensor) -> "BiasedLlama":
        self.register_buffer("logit_bias", bias.to(torch.float64), persistent=False)
        return self

    def forward(self, input_ids=None, cache=None, logits_to_keep=0, **kwargs):
        out = super().forward(input_ids=input_ids, cache=cache, logits_to_keep=logits_to_keep, **kwargs)
        out.logits = out.logits + self.logit_bias.to(out.logits.dtype)
        return out


def biased_llama(seed: int, bias: torch.Tensor, sharpness: float = 1.0) -> BiasedLlama:
    """`tiny_llama(seed)` over `bias.numel()` tokens, its logits biased by `bias`."""
    base = tiny_llama(seed, vocab=bias.numel(), sharpness=sharpness)
    model = BiasedLlama(base.config).double().eval()
    model.load_state_dict(base.state_dict())
    return model.set_bias(bias)


def tiny_head(
    target,
    seed: int,
    sharpness: float = 1.0,
    layers: int = 1,
    head_token_ids=None,
    fused: bool = False,
    own_output: bool = False,
    final: bool = False,
):
    """A random feature head over `target` (its embedding and LM-head rows), float64 like the target;
    `sharpness` scales the fusion so that the head's q is far from the target's. `fused`,
    `own_output`, `final`: the fused-depths design (`models.head`)."""
    from .head import build_head

    head = build_head(target, layers, head_token_ids, seed=seed, fused=fused, own_output=own_output, final=final)
    head = head.double().eval()
    with torch.no_grad():
        head.model.fc.weight.mul_(sharpness)
        if own_output:  # its own rows, away from the target's so that q differs from p
            head.lm_head.weight.add_(torch.randn_like(head.lm_head.weight) * sharpness)
    return head


def float64_pair(kind: str, vocab: int, sharpness: float, device="cpu"):
    """A float64 (target, draft) of a kind in `check_cases.FLOAT64_PAIRS` on `device`: "llama" or
    "opt" (the draft is the same architecture at another seed) or "llama+head" (a random feature
    head over the target)."""
    build = tiny_opt if kind == "opt" else tiny_llama
    target = build(0, vocab, sharpness=sharpness).to(device)
    if kind == "llama+head":
        return target, tiny_head(target, 1, sharpness=sharpness).to(device)
    return target, build(1, vocab, sharpness=sharpness).to(device)
