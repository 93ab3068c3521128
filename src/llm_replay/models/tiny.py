"""The built-in tiny model: a ~1M-parameter Qwen2 with a character-level tokenizer.

It is an ordinary transformers model: `build_char_tokenizer` makes a tokenizer
(one token per character, `<pad>`, `<eos>`, `<unk>` and unused fillers up to the vocabulary size)
and `tiny_qwen2_config` a `Qwen2Config`; both save and load with `save_pretrained` /
`from_pretrained`, so the shipped checkpoint goes through exactly the path a user's model does.
`scripts/build_tiny_model.py` warm-starts it by supervised training on the built-in task.
"""

from __future__ import annotations

import string
from typing import Any

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"


def build_char_tokenizer(vocab_size: int = 128) -> Any:
    """One token per character; ids 0, 1, 2 are pad, eos, unk; unused specials fill the rest.

    It is a `Qwen2Tokenizer` (byte-level BPE) with a character vocabulary and no merges, so
    `AutoTokenizer.from_pretrained` on the saved model gives back exactly this tokenizer.
    """
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_char = bytes_to_unicode()  # type: ignore[no-untyped-call]
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for char in CHARS:
        vocab.setdefault(byte_char[ord(char)], len(vocab))
    if len(vocab) > vocab_size:
        raise ValueError(f"vocab_size = {vocab_size}: needs at least {len(vocab)}")
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=UNK, eos_token=EOS, pad_token=PAD)
    fillers = [f"<unused{i}>" for i in range(vocab_size - len(vocab))]
    tokenizer.add_special_tokens({"additional_special_tokens": fillers})
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_qwen2_config(vocab_size: int = 128, **overrides: Any) -> Any:
    """Qwen2: hidden 128, 4 layers, 4 heads, 2 KV heads, MLP 512, tied embeddings (~1.0M)."""
    from transformers import Qwen2Config

    settings: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "tie_word_embeddings": True,
        "rope_theta": 10_000.0,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 1,
    }
    settings.update(overrides)
    return Qwen2Config(**settings)


def tiny_reward_model(policy: Any = None, *, seed: int = 0, **overrides: Any) -> tuple[Any, Any]:
    """(classifier, tokenizer): a one-output `Qwen2ForSequenceClassification` of the tiny
    model's shape, its backbone copied from `policy` (a tiny causal LM) when given, as reward
    models are initialised from the policy they will judge; the head is seeded with `seed`."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    config = tiny_qwen2_config(**{"num_labels": 1, **overrides})
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(config)  # type: ignore[no-untyped-call]
    if policy is not None:
        backbone = {
            k[len("model.") :]: v for k, v in policy.state_dict().items() if k.startswith("model.")
        }
        model.model.load_state_dict(backbone)
    tokenizer = build_char_tokenizer(config.vocab_size)
    tokenizer.padding_side = "right"
    return model, tokenizer
