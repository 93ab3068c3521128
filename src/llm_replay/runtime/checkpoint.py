"""Training checkpoints: model, optimizer, replay state, RNGs and loop counters — no pickle.

Layout (written atomically and sealed with a verified DONE file list, like table checkpoints;
see `llm_replay.buffer.checkpoint` for what survives a crash at each step)::

    model.safetensors      weights (tied tensors handled by safetensors' save_model)
    optimizer.safetensors  per-parameter optimizer tensors, keyed "<param index>.<name>"
    optimizer.json         param_groups and the non-tensor per-parameter state
    rng.safetensors        the generator's torch RNG state
    signals.json           the method's run signals, where they live with the learner (async)
    state.json             loop counters, compute meter, evaluation history
    replay/                the replay method's table(s), pool and state (and, asynchronous
                           runs, the shared table or intake queue in replay/table)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from llm_replay.buffer.checkpoint import (
    CheckpointError,
    atomic_directory,
    resolve_checkpoint,
    verify_checkpoint,
)
from llm_replay.methods.signals import RunSignals
from llm_replay.runtime.layout import REPLAY_DIR, SIGNALS_FILE, STATE_FILE


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
    directory: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: torch.Generator,
    signals: RunSignals | None = None,
) -> None:
    """The learner's part of a checkpoint (weights, optimizer, sampling RNG, and the method's
    signals where they live with the learner, as in the asynchronous runtimes) into `directory`."""
    save_model(model, str(directory / "model.safetensors"))
    save_optimizer(optimizer, directory)
    save_file({"generator": rng.get_state()}, str(directory / "rng.safetensors"))
    if signals is not None:
        (directory / SIGNALS_FILE).write_text(json.dumps(signals.state()))


def write_checkpoint(
    target: Path,
    *,
    save_learner: Callable[[Path], None],
    save_replay: Callable[[Path], dict[str, Any] | None],
    state: dict[str, Any],
) -> Path:
    """Write everything needed to resume, atomically: the learner's files (`save_learner(dir)`:
    local files, or a learner actor writing them), the replay part (`save_replay(dir / "replay")`,
    which may return state to record beside it, taken at the same instant) and `state.json`."""
    with atomic_directory(target) as tmp:
        save_learner(tmp)
        (tmp / REPLAY_DIR).mkdir()
        extra = save_replay(tmp / REPLAY_DIR)
        state = {**state, **(extra or {})}
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True))
    return target


def open_checkpoint(target: Path) -> tuple[Path, dict[str, Any]]:
    """The complete checkpoint to resume from (`target`, or what a crashed save left beside it),
    verified against its DONE list, and its `state.json`."""
    source = resolve_checkpoint(Path(target))
    verify_checkpoint(source)
    try:
        state = json.loads((source / STATE_FILE).read_bytes())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{source / 'state.json'}: unreadable ({error})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{source / 'state.json'}: must be a JSON object")
    return source, state


LOOP_STATE: dict[str, type | tuple[type, ...]] = {
    "iteration": int,
    "learner_version": int,
    "meter": dict,
    "evals": list,
}
"""Fields every runtime's state.json holds, with their JSON types."""
ASYNC_STATE: dict[str, type | tuple[type, ...]] = {
    "work_plan": dict,
    "clock": dict,
    "reward_counts": dict,
}
"""Fields an asynchronous run's state.json adds (threaded and Ray alike)."""


def check_state(
    source: Path, state: dict[str, Any], schema: dict[str, type | tuple[type, ...]]
) -> None:
    """CheckpointError naming the first field of `state.json` that is missing or mistyped."""
    where = source / STATE_FILE
    for key, kind in schema.items():
        value = state.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, kind):
            raise CheckpointError(f"{where}: {key!r} is missing or not {_names(kind)}")
        if isinstance(value, int) and value < 0:
            raise CheckpointError(f"{where}: {key!r} = {value} must be >= 0")
    for index, entry in enumerate(state.get("evals", [])):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("iteration"), int)
            and isinstance(entry.get("eval/accuracy"), int | float)
        ):
            raise CheckpointError(f"{where}: evals[{index}] is not an evaluation record")


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def load_training_checkpoint(
    target: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: torch.Generator,
    signals: RunSignals | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Restore model, optimizer, RNG (and signals) in place; returns the checkpoint actually
    read (see `open_checkpoint`) and its loop state (the replay state is in
    `<that path>/replay`)."""
    source, state = open_checkpoint(target)
    check_state(source, state, LOOP_STATE)
    load_learner_files(source, model=model, optimizer=optimizer, rng=rng, signals=signals)
    return source, state


def load_learner_files(
    source: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: torch.Generator,
    signals: RunSignals | None = None,
) -> None:
    """The learner's part of a checkpoint `open_checkpoint` already resolved and verified (the
    mirror of `save_learner_files`; signals are optional, absent from older checkpoints); any
    unusable file is a CheckpointError naming it."""
    loads: list[tuple[str, Callable[[], Any]]] = []
    if signals is not None and (source / SIGNALS_FILE).is_file():
        loads.append(
            (
                SIGNALS_FILE,
                lambda: signals.load_state(json.loads((source / SIGNALS_FILE).read_text())),
            )
        )
    for name, load in (
        *loads,
        ("model.safetensors", lambda: _load_model(model, source)),
        ("optimizer.safetensors", lambda: load_optimizer(optimizer, source)),
        (
            "rng.safetensors",
            lambda: rng.set_state(load_file(str(source / "rng.safetensors"))["generator"]),
        ),
    ):
        try:
            load()
        except CheckpointError:
            raise
        except Exception as error:  # truncated, foreign or mismatched content
            raise CheckpointError(
                f"{source / name}: unusable ({type(error).__name__}: {error})"
            ) from None


def _load_model(model: Any, source: Path) -> None:
    missing, unexpected = load_model(model, str(source / "model.safetensors"), strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise CheckpointError(
            f"{source / 'model.safetensors'}: weights do not match the model "
            f"(missing {missing}, unexpected {unexpected})"
        )


def load_checkpoint_weights(target: Path, model: Any) -> Path:
    """Only the weights of a training checkpoint (`llm-replay eval --checkpoint`); returns the
    checkpoint read."""
    source, _ = open_checkpoint(target)
    try:
        _load_model(model, source)
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(
            f"{source / 'model.safetensors'}: unusable ({type(error).__name__}: {error})"
        ) from None
    return source
