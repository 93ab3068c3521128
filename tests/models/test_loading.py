"""Loading: the shipped model and users' models through the ordinary from_pretrained path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from llm_replay.models import (
    ModelLoadError,
    build_char_tokenizer,
    encode_prompts,
    load_policy,
    tiny_qwen2_config,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random Qwen2 + tokenizer with a chat template, saved the usual way."""
    path = tmp_path_factory.mktemp("model")
    config = tiny_qwen2_config(hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def test_builtin_model_loads_and_tokenizes_characters() -> None:
    model, tokenizer = load_policy("builtin:tiny-chain-sum")
    assert 0.9e6 < sum(p.numel() for p in model.parameters()) < 1.1e6
    ids = encode_prompts(tokenizer, ["98+93-77="])[0]
    assert len(ids) == 9 and tokenizer.decode(ids) == "98+93-77="
    build = json.loads((Path(model.name_or_path) / "build.json").read_text())
    assert 0.10 <= build["greedy_accuracy_eval500"] <= 0.50


def test_user_model_from_local_path_with_chat_template(saved_model: Path) -> None:
    model, tokenizer = load_policy(str(saved_model))
    assert model.config.hidden_size == 32
    templated = encode_prompts(tokenizer, ["1+1="], "auto")[0]
    assert tokenizer.decode(templated) == "<|user|>1+1=\n<|assistant|>"
    plain = encode_prompts(tokenizer, ["1+1="], "off")[0]
    assert tokenizer.decode(plain) == "1+1="


def test_missing_or_invalid_paths_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_policy(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_policy(str(tmp_path))
    with pytest.raises(ModelLoadError, match="no built-in model 'huge'"):
        load_policy("builtin:huge")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="cannot load"):
        load_policy(str(tmp_path))
