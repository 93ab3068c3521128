"""Synthetic rollout batches the benchmarks share: every rollout with the same prompt and
completion lengths, random token ids and log-probs, groups of 8."""

from __future__ import annotations

import numpy as np

from llm_replay.data.batch import RolloutBatch


def fixed_batch(
    rng: np.random.Generator, n: int, prompt: int, completion: int, first_group: int = 0
) -> RolloutBatch:
    return RolloutBatch.from_flat(
        prompt_ids=rng.integers(0, 50_000, n * prompt, dtype=np.int32),
        prompt_lengths=np.full(n, prompt, dtype=np.int32),
        completion_ids=rng.integers(0, 50_000, n * completion, dtype=np.int32),
        completion_lengths=np.full(n, completion, dtype=np.int32),
        behaviour_logprobs=-rng.random(n * completion, dtype=np.float32),
        rewards=rng.random(n),
        advantages=rng.normal(size=n),
        group_ids=first_group + np.arange(n) // 8,
        policy_versions=np.zeros(n, dtype=np.int64),
    )


def warm_kernels() -> None:
    """Load (and the first time, JIT-compile) the table's compiled kernels, so the first timed
    insert or sample does not pay for it; a no-op cost with the numpy backend."""
    from llm_replay.buffer import ReplayTable

    table = ReplayTable(64)
    table.insert(fixed_batch(np.random.default_rng(0), 8, 4, 4))
    table.sample(4)
    table.close()
