"""Shared builders for tests: seeded random rollouts of LLM-like shape, tiny run configs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_replay.config import Config, load_config
from llm_replay.data.batch import RolloutBatch

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "generation.prompts_per_step=4",
    "generation.group_size=4",
    "train.batch_size=16",
    "train.micro_batch_size=8",
    "eval.size=16",
    "eval.pass_size=4",
    "eval.pass_k=[1,2]",
    "eval.every=2",
    "task.train_size=400",
    "task.eval_size=16",
    "log.tensorboard=false",
]
TINY_KNOBS: dict[str, Any] = {"capacity": 64, "phase1_iterations": 2, "min_correct": 1}
"""Method knobs shrunk for tiny runs, applied to the methods that have them."""


def tiny_sets(path: Path | None, *extra: str) -> list[str]:
    """`--set` overrides that shrink any preset to a run of seconds. A preset that sizes its step
    by `train.steps_per_round` keeps doing so, of the tiny round."""
    tiny = TINY
    asks = any(s.startswith("train.steps_per_round=") for s in extra)
    if asks or (path is not None and load_config(path).train.steps_per_round is not None):
        tiny = [s for s in TINY if not s.startswith("train.batch_size=")]
    probe = load_config(path, [*tiny, *extra])
    own = {f.name for f in dataclasses.fields(probe.replay.settings)}
    knobs = [f"replay.{k}={v}" for k, v in TINY_KNOBS.items() if k in own]
    return [*tiny, *knobs, *extra]


def tiny_config(path: Path | None, run_dir: Path, *extra: str) -> Config:
    return load_config(path, tiny_sets(path, f"log.run_dir={run_dir}", *extra))


def make_batch(
    rng: np.random.Generator,
    n: int,
    *,
    version: int = 0,
    first_group: int = 0,
    group_size: int = 4,
    prompt: tuple[int, int] = (2, 12),
    completion: tuple[int, int] = (1, 24),
    correct_rate: float = 0.5,
    shared_prompts: bool = True,
) -> RolloutBatch:
    """n rollouts in groups of `group_size`; rollouts of a group share their prompt."""
    groups = first_group + np.arange(n) // group_size
    prompts: dict[int, np.ndarray] = {}
    prompt_ids, completions, logprobs = [], [], []
    for g in groups.tolist():
        if g not in prompts or not shared_prompts:
            prompts[g] = rng.integers(0, 500, rng.integers(prompt[0], prompt[1] + 1))
        prompt_ids.append(prompts[g])
        length = int(rng.integers(completion[0], completion[1] + 1))
        completions.append(rng.integers(0, 500, length))
        logprobs.append(-rng.exponential(1.0, length).astype(np.float32))
    correct = (rng.random(n) < correct_rate).astype(np.int8)
    return RolloutBatch.from_ragged(
        prompt_ids=prompt_ids,
        completion_ids=completions,
        behaviour_logprobs=logprobs,
        rewards=correct.astype(float),
        advantages=rng.normal(size=n),
        group_ids=groups,
        policy_versions=np.full(n, version),
        correct=correct,
        tasks="test",
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def wait_until(condition: Callable[[], bool], *, deadline: float = 60.0) -> None:
    """Poll `condition` until it holds; the deadline only turns a hang into a failure."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"condition never held within {deadline} s")
        time.sleep(0.001)
