"""Training checkpoints: model, optimizer, replay state, RNGs and loop counters — no pickle.

Layout (written atomically with a DONE marker, like table checkpoints)::

    model.safetensors      weights (tied tensors handled by safetensors' save_model)
    optimizer.safetensors  per-parameter optimizer tensors, keyed "<param index>.<name>"
    optimizer.json         param_groups and the non-tensor per-parameter state
    rng.safetensors        the generator's torch RNG state
    state.json             loop counters, compute meter, evaluation history, strategy state
    replay/                the strategy's table(s) and pool
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from llm_replay.buffer.checkpoint import DONE, CheckpointError, atomic_directory


def save_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    save_file(tensors, str(directory / "optimizer.safetensors"))
    (directory / "optimizer.json").write_text(
        json.dumps({"param_groups": state["param_groups"], "scalars": scalars})
    )


def load_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    meta = json.loads((directory / "optimizer.json").read_text())
    tensors = load_file(str(directory / "optimizer.safetensors"))
    per_param: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = value
    for index, values in meta["scalars"].items():
        per_param.setdefault(int(index), {}).update(values)
    groups = meta["param_groups"]
    for group in groups:
        if "betas" in group:
            group["betas"] = tuple(group["betas"])
    optimizer.load_state_dict({"state": per_param, "param_groups": groups})


def save_learner_files(
    directory: Path, *, model: Any, optimizer: torch.optim.Optimizer, rng: torch.Generator
) -> None:
    """The learner's part of a checkpoint (weights, optimizer, sampling RNG) into `directory`."""
    save_model(model, str(directory / "model.safetensors"))
    save_optimizer(optimizer, directory)
    save_file({"generator": rng.get_state()}, str(directory / "rng.safetensors"))


def save_training_checkpoint(
    target: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: torch.Generator,
    state: dict[str, Any],
    save_replay: Any,
) -> Path:
    """Write everything needed to resume; `save_replay(directory)` writes the strategy's part."""
    with atomic_directory(target) as tmp:
        save_learner_files(tmp, model=model, optimizer=optimizer, rng=rng)
        (tmp / "replay").mkdir()
        save_replay(tmp / "replay")
        (tmp / "state.json").write_text(json.dumps(state, indent=1, sort_keys=True))
    return target


def load_training_checkpoint(
    source: Path, *, model: Any, optimizer: torch.optim.Optimizer, rng: torch.Generator
) -> dict[str, Any]:
    """Restore model, optimizer and RNG in place; returns the loop state (replay is in source/replay)."""
    if not (source / DONE).is_file():
        raise CheckpointError(f"{source}: no complete checkpoint there (missing {DONE})")
    try:
        missing, unexpected = load_model(model, str(source / "model.safetensors"), strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise CheckpointError(
                f"{source}: weights do not match the model ({missing}, {unexpected})"
            )
        load_optimizer(optimizer, source)
        rng.set_state(load_file(str(source / "rng.safetensors"))["generator"])
        state: dict[str, Any] = json.loads((source / "state.json").read_text())
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{source}: unreadable checkpoint ({error})") from None
    return state
