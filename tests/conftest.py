"""Shared builders for tests: seeded random rollouts of LLM-like shape."""

from __future__ import annotations

import numpy as np
import pytest

from llm_replay.rollout import RolloutBatch


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
