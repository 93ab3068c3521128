"""Annotators: the verifier's judgement, a reward model as judge, and a call that fails, hangs or
answers nonsense: counted, paid for, and nothing returned to store."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from llm_replay.preference.annotators import (
    Annotator,
    RewardModelJudge,
    SafeAnnotator,
    VerifierAnnotator,
)
from llm_replay.tasks.base import Problem
from llm_replay.tasks.builtin import builtin_task
from llm_replay.tasks.reward_model import RewardModel
from tests.tasks.test_reward_model import save_reward_model


@pytest.fixture(scope="module")
def task():  # type: ignore[no-untyped-def]
    return builtin_task("chain_sum", train_size=8, eval_size=4)


def test_the_verifier_prefers_right_over_wrong_and_ties_the_rest(task) -> None:  # type: ignore[no-untyped-def]
    problems = list(task.train[:4])
    right = [p.answer for p in problems]
    wrong = [p.answer + "9" for p in problems]
    first = [right[0], wrong[1], right[2], wrong[3]]
    second = [wrong[0], right[1], right[2], wrong[3]]
    strengths = VerifierAnnotator(task).judge([""] * 4, problems, first, second)
    assert strengths.tolist() == [1.0, -1.0, 0.0, 0.0]


def test_a_reward_model_judges_by_its_scores_with_a_tie_band(tmp_path: Path) -> None:
    model = RewardModel(str(save_reward_model(tmp_path / "rm")))
    prompts, first, second = ["1+1="] * 3, ["2", "3", "2"], ["3", "2", "2"]
    gaps = model.score(prompts, first) - model.score(prompts, second)
    judge = RewardModelJudge(model)
    judged = judge.judge(prompts, [None] * 3, first, second)  # type: ignore[list-item]
    assert judged[:2].tolist() == pytest.approx(gaps[:2].tolist(), abs=1e-6)
    assert judge.judge(prompts, [None] * 3, first, second)[2] == 0  # type: ignore[list-item]
    # the judge scores the pairs in another batch than `gaps` was, so its gaps differ in the last
    # bits on some kernels: the margin sits clearly above the largest gap, not on it
    wide = RewardModelJudge(model, min_margin=float(np.abs(gaps).max()) * 1.01 + 1e-6)
    assert not wide.judge(prompts, [None] * 3, first, second).any()  # type: ignore[list-item]
    assert judge.version == model.version == 0


class Broken(Annotator):
    name = "verifier"

    def __init__(self, how: str) -> None:
        self.how = how
        self.release = threading.Event()

    def judge(
        self,
        prompts: Sequence[str],
        problems: Sequence[Problem],
        first: Sequence[str],
        second: Sequence[str],
    ) -> np.ndarray:
        if self.how == "raise":
            raise ConnectionError("the annotation service is down")
        if self.how == "hang":
            self.release.wait(30)
        if self.how == "nan":
            return np.full(len(first), np.nan)
        return np.ones(len(first) + 1)


@pytest.mark.parametrize("how", ["raise", "hang", "nan", "shape"])
def test_a_failed_call_is_counted_and_paid_for_and_yields_nothing(how: str) -> None:
    judge = Broken(how)
    safe = SafeAnnotator(judge, timeout_s=0.2, cost=2.0)
    try:
        assert safe.judge(["p"] * 3, [None] * 3, ["a"] * 3, ["b"] * 3) is None  # type: ignore[list-item]
    finally:
        judge.release.set()
    assert safe.counts.failures == 1 and safe.counts.requested == 3 and safe.counts.cost == 6.0
    assert safe.counts.pairs == 0
    safe.close()


def test_mismatched_inputs_are_refused_before_anything_is_paid() -> None:
    safe = SafeAnnotator(Broken("raise"), timeout_s=1.0, cost=1.0)
    with pytest.raises(ValueError, match="one of each per pair"):
        safe.judge(["p"], [None, None], ["a"], ["b"])  # type: ignore[list-item]
    assert safe.counts.requested == 0
    with pytest.raises(ValueError, match="timeout_s"):
        SafeAnnotator(Broken("raise"), timeout_s=0, cost=1.0)
