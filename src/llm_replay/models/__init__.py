"""Models: the built-in tiny Qwen2 and loading users' models from local paths."""

from llm_replay.models.loading import (
    ModelLoadError,
    encode_prompts,
    load_policy,
    resolve_model_path,
)
from llm_replay.models.tiny import build_char_tokenizer, tiny_qwen2_config, tiny_reward_model

__all__ = [
    "ModelLoadError",
    "build_char_tokenizer",
    "encode_prompts",
    "load_policy",
    "resolve_model_path",
    "tiny_qwen2_config",
    "tiny_reward_model",
]
