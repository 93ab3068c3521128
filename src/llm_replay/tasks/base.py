"""The task seam: problems with reference answers, a train/eval split, and a reward function.

A `Task` owns its data and its scoring rule; the training loop only sees `Problem`s and calls
`score`. Rewards are floats; a rollout counts as *correct* when its reward reaches
`correct_threshold` (1.0 for the built-in tasks), which is what success pools and positive-biased
replay key on. Train and eval splits never share a prompt: the adapters split the problem space
by a hash of the prompt (`tasks.split`) or, given a separate eval file, filter train against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

TASK_TAG = "task"
"""The `Problem.metadata` key naming the task a problem came from (a mixture's member): rollouts
carry it in their task column, evaluation reports accuracy per value."""


@dataclass(frozen=True)
class Problem:
    """One prompt instance: the text the model sees and what a correct answer is."""

    prompt: str
    answer: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


def task_tag(problem: Problem | None) -> str:
    """The problem's task tag, or '' when it has none (a single task's problems, or a scorer's
    stand-in that carries no problem)."""
    metadata = getattr(problem, "metadata", None) or {}
    return str(metadata.get(TASK_TAG, ""))


@runtime_checkable
class Task(Protocol):
    """What the training loop needs from a task."""

    name: str
    correct_threshold: float

    @property
    def train(self) -> Sequence[Problem]: ...

    @property
    def eval(self) -> Sequence[Problem]: ...

    def score(self, completion: str, problem: Problem) -> float:
        """Reward of `completion` (decoded text, special tokens removed) for `problem`."""
        ...


class TaskError(ValueError):
    """A task could not be built: bad parameters, an unreadable file or a malformed row."""


def disjoint_train(
    train: Sequence[Problem], eval_problems: Sequence[Problem]
) -> tuple[Problem, ...]:
    """`train` without any problem whose prompt occurs in `eval_problems`, duplicates dropped."""
    seen = {p.prompt for p in eval_problems}
    kept = []
    for problem in train:
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            kept.append(problem)
    return tuple(kept)


@dataclass(frozen=True)
class SplitReport:
    """How a split was filled: rows requested and kept, unique prompts, generator draws used."""

    split: str
    requested: int
    rows: int
    unique: int
    draws: int

    @property
    def repeats(self) -> bool:
        return self.unique < self.rows

    def warning(self) -> str | None:
        """A sentence for the run log when the split is short or mostly repeats, else None."""
        if self.rows < self.requested:
            return (
                f"{self.split} split: {self.rows} of {self.requested} requested problems "
                f"after {self.draws} draws ({self.unique} unique)"
            )
        if self.unique * 2 < self.rows:
            return (
                f"{self.split} split: {self.rows} problems but only {self.unique} unique prompts: "
                "the generator's problem space is small, so problems repeat in its proportions"
            )
        return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SplitTask:
    """Shared storage of a task's two splits; subclasses fill `_train` / `_eval` and `score`."""

    name: str
    correct_threshold: float
    _train: tuple[Problem, ...]
    _eval: tuple[Problem, ...]
    split_reports: tuple[SplitReport, ...] = ()

    @property
    def train(self) -> Sequence[Problem]:
        return self._train

    @property
    def eval(self) -> Sequence[Problem]:
        return self._eval
