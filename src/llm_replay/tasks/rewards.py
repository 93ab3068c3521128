"""Scoring that survives the reward function: time limits, failure reward, counts, logs.

A reward function that raises or hangs on one sample must not kill a run. Each call runs on a
worker thread with a deadline; an exception or a missed deadline yields `failure_reward`, is
counted and logged (the first few in full, then every hundredth). Python cannot kill a thread:
a hung call keeps its thread, so the pool is replaced and the run goes on with fresh threads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

from llm_replay.tasks.base import Problem, Task

log = logging.getLogger(__name__)


@dataclass
class RewardCounts:
    calls: int = 0
    errors: int = 0
    timeouts: int = 0

    @property
    def failures(self) -> int:
        return self.errors + self.timeouts


class SafeScorer:
    """Calls `task.score` with a per-call time limit; failures become `failure_reward`.

    `binary`: the reward is 1.0 where the task's score reaches its `correct_threshold`, else 0.0
    (the verifiable exact-match reward), for tasks whose score gives partial credit that RL would
    otherwise climb without getting answers right. A verifier never changes: its `version` is 0
    and it forwards no reward-model tokens (`ModelScorer` has the same seam over a learned
    reward model)."""

    version = 0
    model_tokens = 0

    def __init__(
        self,
        task: Task,
        *,
        timeout_s: float = 5.0,
        failure_reward: float = 0.0,
        workers: int = 4,
        binary: bool = False,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s = {timeout_s!r}: must be > 0")
        self.task = task
        self.binary = bool(binary)
        self.timeout_s = float(timeout_s)
        self.failure_reward = float(failure_reward)
        self.workers = int(workers)
        self.counts = RewardCounts()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="reward")

    def score(
        self,
        completions: Sequence[str],
        problems: Sequence[Problem],
        prompt_texts: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Rewards [N] float64 for completions paired with their problems (a verifier reads the
        problem's answer; `prompt_texts` is for a reward model)."""
        if len(completions) != len(problems):
            raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
        futures = [
            self._pool.submit(self.task.score, c, p)
            for c, p in zip(completions, problems, strict=True)
        ]
        rewards = np.empty(len(futures), dtype=np.float64)
        deadline_hit = False
        for i, future in enumerate(futures):
            self.counts.calls += 1
            try:
                value = float(future.result(timeout=self.timeout_s))
                if not np.isfinite(value):
                    raise ValueError(f"reward {value!r} is not finite")
                rewards[i] = value
            except FutureTimeout:
                self.counts.timeouts += 1
                deadline_hit = True
                self._report(i, completions[i], f"no result in {self.timeout_s:g}s")
                rewards[i] = self.failure_reward
            except Exception as error:
                self.counts.errors += 1
                self._report(i, completions[i], f"{type(error).__name__}: {error}")
                rewards[i] = self.failure_reward
        if deadline_hit:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="reward")
        if self.binary:
            return (rewards >= self.task.correct_threshold).astype(np.float64)
        return rewards

    def _report(self, index: int, completion: str, why: str) -> None:
        n = self.counts.failures
        if n <= 5 or n % 100 == 0:
            log.warning("reward failed (%d so far) on completion %r: %s", n, completion[:80], why)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
