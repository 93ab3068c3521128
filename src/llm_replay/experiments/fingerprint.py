"""Content fingerprints of what a run trains on, for the archive's protocol check.

A run's resolved config names its model and task by setting (`builtin:tiny-chain-sum`,
`chain_sum` with its parameters), and the same name has meant different content: the built-in
chain_sum model was rebuilt on a new train/eval split on 2026-11-22. So an archived run now
carries in its protocol a SHA-256 of the model's files (weights, config, tokenizer), of the
task's problems (every train and eval prompt with its answer) and of any reward model, and a
restore refuses an archive whose fingerprint differs. Archives written before carry none and are
not checked on this point.

Not covered: problem metadata (reasoning-gym's may hold reprs that differ between processes),
a preference file, `reward_model.refresh_from` and `replay.init_from` tables.

Each is computed at most once per process for a given content (the model's files by name, size
and modification time; the task by its settings), and only where an archive writes or checks a
fingerprint: a report over a suite builds each task once, and a model of tens of GB takes a
while to hash (SHA-256 reads a few hundred MB a second per core).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

MODEL_FILES = (
    "*.safetensors",
    "pytorch_model*.bin",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)
"""The files of a saved model whose content decides what training starts from: weights, config,
generation defaults, tokenizer and chat template."""


def fingerprints(config: Any) -> dict[str, str]:
    """The content of what `config` trains on: `model`, `task`, and `reward_model` when one is
    set (a training reward or a preference judge)."""
    from llm_replay.models.loading import resolve_model_path

    out = {
        "model": model_fingerprint(resolve_model_path(config.model.path)),
        "task": task_fingerprint(config),
    }
    if config.reward_model.path is not None:
        path = resolve_model_path(config.reward_model.path, "reward_model.path")
        out["reward_model"] = model_fingerprint(path)
    return out


def model_fingerprint(path: Path) -> str:
    """`sha256:HEX` over the model directory's weight, config and tokenizer files, by name."""
    files = sorted({f for pattern in MODEL_FILES for f in Path(path).glob(pattern) if f.is_file()})
    stats = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _hash_files(Path(path).resolve(), stats)


@lru_cache(maxsize=32)
def _hash_files(directory: Path, stats: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stats:
        digest.update(name.encode() + b"\0")
        with open(directory / name, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return f"sha256:{digest.hexdigest()}"


def task_fingerprint(config: Any) -> str:
    """`sha256:HEX` over the configured task's train and eval problems (prompt and answer, in
    order). Building the task is what it costs (seconds for reasoning-gym's 20,000 problems)."""
    settings = json.dumps(  # the directory too: a dataset's path may be relative
        [os.getcwd(), dataclasses.asdict(config.task)], sort_keys=True, default=str
    )
    if settings not in _TASK_HASHES:
        from llm_replay.runtime.task_builder import build_task

        task = build_task(config, quiet=True)
        digest = hashlib.sha256()
        for split, problems in (("train", task.train), ("eval", task.eval)):
            digest.update(split.encode() + b"\0")
            for problem in problems:
                digest.update(problem.prompt.encode() + b"\0" + problem.answer.encode() + b"\0")
        _TASK_HASHES[settings] = f"sha256:{digest.hexdigest()}"
    return _TASK_HASHES[settings]


_TASK_HASHES: dict[str, str] = {}
