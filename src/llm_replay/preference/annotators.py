"""Annotators: who says which completion of a pair is better, and what asking costs.

An annotator judges pairs of completions of the same prompt and returns a preference strength per
pair: > 0 the first is better, < 0 the second, 0 a tie (no pair is made). In RLHF the annotator
is a person or an AI judge, and its calls, not generation, are the scarce resource a replay of
annotated pairs saves; every call is counted (`AnnotationCounts`, reported as
`compute/annotations` beside the μ bases).

- `VerifierAnnotator`: the task's verifier standing in for a person: right beats wrong.
- `RewardModelJudge`: a learned reward model as a pairwise judge (the higher score wins, a gap of
  at most `min_margin` is a tie); its version is the reward model's, so a refreshed judge makes the
  stored pairs' judgements stale, as it does a stored reward.
- The third source, a file of given pairs, is not a judge of new completions: `preference.files`
  loads it.

`SafeAnnotator` runs a judge's call under a time limit: a call that raises or runs out of time is
counted as a failure and yields no pairs, so nothing reaches the table from it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

from llm_replay.tasks.base import Problem, Task
from llm_replay.tasks.reward_model import RewardModel

log = logging.getLogger(__name__)


class Annotator(ABC):
    """Judges pairs of completions of one prompt each."""

    name: str  # an entry of ANNOTATORS

    @property
    def version(self) -> int:
        """The judge's version (0 for one that never changes)."""
        return 0

    @property
    def tokens_scored(self) -> int:
        """Tokens a learned judge has forwarded (charged to the meter as reward-model work)."""
        return 0

    @abstractmethod
    def judge(
        self,
        prompts: Sequence[str],
        problems: Sequence[Problem],
        first: Sequence[str],
        second: Sequence[str],
    ) -> np.ndarray:
        """Preference strengths [P] float64: > 0 first better, < 0 second better, 0 a tie."""


class VerifierAnnotator(Annotator):
    """Right beats wrong, by the task's own check; two right or two wrong completions tie."""

    name = "verifier"

    def __init__(self, task: Task) -> None:
        self.task = task

    def judge(
        self,
        prompts: Sequence[str],
        problems: Sequence[Problem],
        first: Sequence[str],
        second: Sequence[str],
    ) -> np.ndarray:
        threshold = self.task.correct_threshold

        def right(texts: Sequence[str]) -> np.ndarray:
            return np.array(
                [self.task.score(t, p) >= threshold for t, p in zip(texts, problems, strict=True)],
                dtype=np.float64,
            )

        strengths: np.ndarray = right(first) - right(second)
        return strengths


class RewardModelJudge(Annotator):
    """A learned reward model compares the two completions; a gap of at most `min_margin` ties."""

    name = "reward_model"

    def __init__(self, model: RewardModel, *, min_margin: float = 0.0) -> None:
        self.model = model
        self.min_margin = float(min_margin)

    @property
    def version(self) -> int:
        return self.model.version

    @property
    def tokens_scored(self) -> int:
        return self.model.tokens_scored

    def judge(
        self,
        prompts: Sequence[str],
        problems: Sequence[Problem],
        first: Sequence[str],
        second: Sequence[str],
    ) -> np.ndarray:
        scores = self.model.score(list(prompts) * 2, list(first) + list(second))
        gap: np.ndarray = scores[: len(first)] - scores[len(first) :]
        same = np.array([a == b for a, b in zip(first, second, strict=True)], dtype=bool)
        gap[same | (np.abs(gap) <= self.min_margin)] = 0.0  # batch position moves a score by ~1e-8
        return gap


@dataclass
class AnnotationCounts:
    """Pairs asked about, pairs made (not ties), calls that failed, and what was spent."""

    requested: int = 0
    pairs: int = 0
    ties: int = 0
    identical: int = 0
    failures: int = 0
    cost: float = 0.0


class SafeAnnotator:
    """An annotator's calls under a time limit, counted; a failed call yields nothing."""

    def __init__(self, annotator: Annotator, *, timeout_s: float, cost: float) -> None:
        if not timeout_s > 0:
            raise ValueError(f"preference.timeout_s = {timeout_s!r}: must be > 0")
        self.annotator = annotator
        self.timeout_s = float(timeout_s)
        self.cost = float(cost)
        self.counts = AnnotationCounts()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="annotator")

    @property
    def name(self) -> str:
        return self.annotator.name

    @property
    def version(self) -> int:
        return self.annotator.version

    @property
    def tokens_scored(self) -> int:
        return self.annotator.tokens_scored

    def judge(
        self,
        prompts: Sequence[str],
        problems: Sequence[Problem],
        first: Sequence[str],
        second: Sequence[str],
    ) -> np.ndarray | None:
        """Strengths [P], or None when the call failed or ran out of time (counted). Every pair
        asked about is paid for, answered or not."""
        n = len(first)
        if not (len(prompts) == len(problems) == n == len(second)):
            raise ValueError(
                f"judge: {len(prompts)} prompts, {len(problems)} problems, {n} first and "
                f"{len(second)} second completions; need one of each per pair"
            )
        self.counts.requested += n
        self.counts.cost += self.cost * n
        future = self._pool.submit(self.annotator.judge, prompts, problems, first, second)
        try:
            strengths = np.asarray(future.result(timeout=self.timeout_s), dtype=np.float64)
        except FutureTimeout:
            self.counts.failures += 1
            log.warning("annotator %s: no answer in %.1f s; no pairs", self.name, self.timeout_s)
            self._replace_pool()
            return None
        except Exception as error:  # a judge's own bug or outage: counted, nothing stored
            self.counts.failures += 1
            log.warning("annotator %s failed (%s); no pairs", self.name, error)
            return None
        if strengths.shape != (n,) or not np.isfinite(strengths).all():
            self.counts.failures += 1
            log.warning("annotator %s: expected %d finite strengths; no pairs", self.name, n)
            return None
        return strengths

    def _replace_pool(self) -> None:
        """A hung call keeps its thread; later calls get a fresh one."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="annotator")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
