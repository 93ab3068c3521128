"""Loading policies: the shipped tiny model or a user's model from a local path.

Everything goes through `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained`
with `local_files_only=True`: nothing is downloaded at run time. `builtin:NAME` names a model
shipped inside the package (`llm_replay/assets/NAME`). Instruct models get their chat template
applied to each prompt when `chat_template` is on (or `auto` and the tokenizer has one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_replay.near_miss import did_you_mean

ASSETS = Path(__file__).resolve().parent.parent / "assets"
BUILTIN = "builtin:"


class ModelLoadError(ValueError):
    """The model path does not exist or does not hold a loadable model."""


def resolve_model_path(path: str, field: str = "model.path") -> Path:
    """`builtin:NAME` → the shipped asset; anything else must be an existing local directory.
    Errors name `field`, the setting the path came from."""
    if path.startswith(BUILTIN):
        name = path[len(BUILTIN) :]
        resolved = ASSETS / name
        if not resolved.is_dir():
            shipped = (
                sorted(p.name for p in ASSETS.iterdir() if p.is_dir()) if ASSETS.is_dir() else []
            )
            raise ModelLoadError(
                f"{field} = {path!r}: no built-in model {name!r} (have {shipped})"
                + did_you_mean(name, shipped, prefix=BUILTIN)
            )
        return resolved
    resolved = Path(path).expanduser()
    if not resolved.is_dir():
        raise ModelLoadError(f"{field} = {path!r}: no such directory")
    if not (resolved / "config.json").is_file():
        raise ModelLoadError(f"{field} = {path!r}: no config.json there (not a saved model)")
    return resolved


def load_errors() -> tuple[type[BaseException], ...]:
    """What `from_pretrained` raises for a directory that is there but does not load: a missing
    or unreadable file, a bad config, and weights cut short or corrupt (`SafetensorError`)."""
    from safetensors import SafetensorError

    return (OSError, ValueError, KeyError, SafetensorError)


def cannot_load(field: str, path: str, error: BaseException) -> ModelLoadError:
    """One line naming the setting: `model.path = '…': cannot load (why)`."""
    return ModelLoadError(f"{field} = {path!r}: cannot load ({' '.join(str(error).split())})")


def resolve_dtype(dtype: str, device: str) -> str:
    """`auto` means bfloat16 on CUDA and float32 on the CPU; any other name passes through."""
    if dtype == "auto":
        return "bfloat16" if device.startswith("cuda") else "float32"
    return dtype


def load_policy(path: str, *, device: str = "cpu", dtype: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) from a local directory, on `device`, weights in `dtype` (see
    `resolve_dtype` for `auto`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = resolve_model_path(path)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    dtype = resolve_dtype(dtype, device)
    if dtype not in torch_dtype:
        raise ModelLoadError(f"model.dtype = {dtype!r}: choose one of {sorted(torch_dtype)}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            directory, local_files_only=True, dtype=torch_dtype[dtype]
        )
    except load_errors() as error:
        raise cannot_load("model.path", path, error) from None
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"model.path = {path!r}: the tokenizer has no eos token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device)  # type: ignore[arg-type]
    return model, tokenizer


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], chat_template: str = "auto"
) -> list[list[int]]:
    """Token ids per prompt; with the chat template as a user turn when it applies."""
    use_template = chat_template == "on" or (
        chat_template == "auto" and getattr(tokenizer, "chat_template", None)
    )
    if use_template:
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
    return [list(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
