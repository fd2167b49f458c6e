"""Tiny random-weight pairs for tests: an offline BPE tokenizer and 2-layer Llama / OPT models.

Everything is built in memory in well under a second, with no network: the tokenizer is a
byte-level BPE trained on a few embedded sentences (cached per variant), and the models are
random-weight configs whose `vocab_size` is that tokenizer's size. A larger
`initializer_range` than the default makes the random next-token distributions peaked and
different between seeds, which is what tests of acceptance rules want.
"""

from __future__ import annotations

import functools

import torch

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


def tiny_tokenizer(variant: str = "default"):
    """A PreTrainedTokenizerFast with a ChatML chat template; EOS = <|im_end|>."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(variant)),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
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
    """A seeded random-weight causal LM of the given family ("llama" or "opt")."""
    from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

    if family == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            initializer_range=initializer_range,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            tie_word_embeddings=False,
            **extra,
        )
        cls = LlamaForCausalLM
    elif family == "opt":
        config = OPTConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            ffn_dim=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=4,
            word_embed_proj_dim=hidden_size,
            max_position_embeddings=1024,
            init_std=initializer_range,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            **extra,
        )
        cls = OPTForCausalLM
    else:
        raise KeyError(f"unknown tiny model family {family!r}; valid: llama, opt")
    torch.manual_seed(seed)
    return cls(config).eval()
