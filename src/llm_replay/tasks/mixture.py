"""A mixture of tasks (`task.kind: mixture`): one run, many members, each problem tagged.

Each member is a reasoning-gym task with its own train/eval split (`tasks.split`; every member
uses the mixture's seeds and eval share, and since a prompt's side is a hash of its text, a
prompt two members share lands on the same side in both, so the mixture's splits never share a
prompt either). The mixture's splits interleave the members':

- train: slot i of the `train_size` slots is drawn from the members by weight (seeded by
  `task.seed`), and takes that member's next train problem. The run's prompt order is a seeded
  permutation of the train split (`runtime.rollouts.prompt_indices`), so training prompts come
  from the members in the proportions of their weights, drawn, not dealt.
- eval: slots are dealt by smooth weighted round-robin, not drawn, so every prefix of the eval
  split (the evaluator reads the first `eval.size` problems) holds the members in proportions as
  close to their weights as a prefix of that length allows, and no member is left out by chance.

Every problem carries its member's name under `Problem.metadata[TASK_TAG]`; the sync runtime
copies it into each rollout's task column, evaluation reports `eval/<member>/accuracy` beside the
overall `eval/accuracy`, and `score` dispatches on it to the member's own verifier.

Rejected: one generator per member drawn from at generation time. The train split would then not
be a fixed list, and the prompt order, prompt skipping and reward refresh all index it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_replay.tasks.base import TASK_TAG, Problem, SplitReport, SplitTask, TaskError
from llm_replay.tasks.reasoning_gym import ReasoningGymTask


@dataclass(frozen=True)
class MemberSpec:
    """One member of a task mixture: its name (the rollouts' task tag), weight and generator."""

    name: str
    weight: float
    dataset: str
    params: dict[str, Any] = field(default_factory=dict)
    prompt_template: str = "{question}"
    strip_spaces: bool = False
    answer_tokens: int | None = None  # the longest answer + EOS, in tokens; None: unknown


_MIXTURE_STREAM = 0x6D6978  # "mix": the slot draws' own stream beside the members' seeds


def weighted_round_robin(weights: Sequence[float], size: int) -> np.ndarray:
    """`size` member indices dealt by smooth weighted round-robin: each prefix's counts stay
    within one of weight share × prefix length. Ties go to the earlier member."""
    share = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    credit = np.zeros(len(share))
    out = np.empty(size, dtype=np.int64)
    for slot in range(size):
        credit += share
        pick = int(np.argmax(credit))
        credit[pick] -= 1.0
        out[slot] = pick
    return out


def weighted_draws(weights: Sequence[float], size: int, seed: int) -> np.ndarray:
    """`size` member indices drawn independently with probability ∝ weight (seeded)."""
    share = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    rng = np.random.default_rng([seed, _MIXTURE_STREAM])
    return rng.choice(len(share), size=size, p=share).astype(np.int64)


class MixtureTask(SplitTask):
    """Several reasoning-gym tasks as one, their problems tagged by member name."""

    def __init__(
        self,
        members: Sequence[MemberSpec],
        *,
        train_size: int = 20_000,
        eval_size: int = 500,
        seed: int = 1,
        eval_seed: int = 2,
        eval_fraction: float = 0.1,
        correct_threshold: float = 1.0,
    ) -> None:
        if not members:
            raise TaskError("task.members = {}: a mixture needs at least one member")
        self.name = "mixture"
        self.correct_threshold = float(correct_threshold)
        self.members = tuple(members)
        weights = [m.weight for m in members]
        train_slots = weighted_draws(weights, train_size, seed)
        eval_slots = weighted_round_robin(weights, eval_size)
        self.tasks: dict[str, ReasoningGymTask] = {}
        reports: list[SplitReport] = []
        for index, member in enumerate(members):
            task = _build_member(
                member,
                train_size=max(1, int(np.sum(train_slots == index))),
                eval_size=max(1, int(np.sum(eval_slots == index))),
                seed=seed,
                eval_seed=eval_seed,
                eval_fraction=eval_fraction,
                correct_threshold=correct_threshold,
            )
            self.tasks[member.name] = task
            reports += [
                dataclasses.replace(r, split=f"{member.name} {r.split}") for r in task.split_reports
            ]
        self._train = self._interleave(train_slots, "train")
        self._eval = self._interleave(eval_slots, "eval")
        self.split_reports = tuple(reports)

    @property
    def weights(self) -> dict[str, float]:
        """Each member's share of the training draws (the weights, normalised)."""
        total = sum(m.weight for m in self.members)
        return {m.name: m.weight / total for m in self.members}

    def _interleave(self, slots: np.ndarray, split: str) -> tuple[Problem, ...]:
        """Slot i takes its member's next problem of `split` (cycling a member's split when the
        problem space left it short; its split report says so)."""
        taken = [0] * len(self.members)
        out = []
        for index in slots.tolist():
            member = self.members[index]
            problems = getattr(self.tasks[member.name], split)
            problem = problems[taken[index] % len(problems)]
            taken[index] += 1
            out.append(
                Problem(problem.prompt, problem.answer, {**problem.metadata, TASK_TAG: member.name})
            )
        return tuple(out)

    def score(self, completion: str, problem: Problem) -> float:
        """The member's own score of `completion`; a problem without a member tag is an error."""
        name = problem.metadata.get(TASK_TAG)
        if name not in self.tasks:
            raise TaskError(
                f"problem {problem.prompt!r}: task tag {name!r} is not a member of this mixture "
                f"({sorted(self.tasks)})"
            )
        return self.tasks[name].score(completion, problem)


_FIELD = re.compile(r"^(?:task\.)?(\w+) = ")


def _build_member(
    member: MemberSpec,
    *,
    train_size: int,
    eval_size: int,
    seed: int,
    eval_seed: int,
    eval_fraction: float,
    correct_threshold: float,
) -> ReasoningGymTask:
    """The member's reasoning-gym task; its errors name the member's field
    (`task.members.gcd.prompt_template = ...`)."""
    try:
        return ReasoningGymTask(
            member.dataset,
            params=member.params,
            prompt_template=member.prompt_template,
            strip_spaces=member.strip_spaces,
            train_size=train_size,
            eval_size=eval_size,
            seed=seed,
            eval_seed=eval_seed,
            eval_fraction=eval_fraction,
            correct_threshold=correct_threshold,
        )
    except TaskError as error:
        message = str(error)
        match = _FIELD.match(message)
        key = f"task.members.{member.name}"
        if match:
            raise TaskError(f"{key}.{message[match.start(1) :]}") from None
        raise TaskError(f"{key}: {message}") from None
