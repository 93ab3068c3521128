"""Inserts numbered batches into a durable table until killed; prints each number once its
insert has returned. Used by test_durable's kill test: `python durable_worker.py DIR POLICY`."""

from __future__ import annotations

import sys

import numpy as np

from llm_replay.buffer import ReplayTable
from llm_replay.data.batch import RolloutBatch


def numbered_batch(i: int) -> RolloutBatch:
    rng = np.random.default_rng(i)
    n = 4
    return RolloutBatch.from_ragged(
        prompt_ids=[rng.integers(0, 100, 3) for _ in range(n)],
        completion_ids=[rng.integers(0, 100, 5) for _ in range(n)],
        behaviour_logprobs=[-rng.random(5) for _ in range(n)],
        rewards=np.full(n, float(i)),
        group_ids=np.full(n, i),
        policy_versions=np.zeros(n, dtype=np.int64),
    )


def main() -> None:
    directory, policy = sys.argv[1], sys.argv[2]
    table = ReplayTable.open(directory, max_rollouts=100_000, fsync=policy, fsync_every=4)
    i = table.counters.insert_calls
    while True:
        table.insert(numbered_batch(i))
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    main()
