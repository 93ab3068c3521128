"""Balanced replay and the retirement of mastered prompts: hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import METHODS, MethodConfigError, MethodContext, ReplayPipeline
from llm_replay.methods.options.balance import BalanceConfig, masses, positive_scale
from llm_replay.methods.options.retire import RetireConfig


def rows(
    groups: list[int],
    advantages: list[float],
    prompts: list[int] | None = None,
    correct: list[bool] | None = None,
):
    n = len(groups)
    prompts = prompts or groups
    correct = correct or [a > 0 for a in advantages]
    return RolloutBatch.from_ragged(
        prompt_ids=[[p] for p in prompts],
        completion_ids=[[1]] * n,
        behaviour_logprobs=[[-1.0]] * n,
        rewards=[float(c) for c in correct],
        advantages=advantages,
        group_ids=groups,
        policy_versions=[0] * n,
        correct=correct,
    )


def test_positive_scale_by_hand() -> None:
    assert masses(np.array([0.5, -0.25, 1.0, np.nan, -0.75])) == (1.5, 1.0)
    # fresh share s = 1/2; replayed P = 3, N = 1: c = 0.5·1 / (0.5·3) = 1/3
    assert positive_scale((2.0, 2.0), (3.0, 1.0), 0.0) == pytest.approx(1 / 3)
    # fresh share 3/4; replayed P = 1, N = 1: c = 0.75 / 0.25 = 3 → capped at 1
    assert positive_scale((3.0, 1.0), (1.0, 1.0), 0.0) == 1.0
    assert positive_scale((2.0, 2.0), (3.0, 0.0), 0.2) == 0.2  # all successes: the floor
    assert positive_scale((0.0, 0.0), (3.0, 1.0), 0.0) == 1.0  # fresh round without signal


def test_balance_rescales_only_the_replayed_positives() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=4, group_size=2)
    options = {"balance": BalanceConfig(enabled=True)}
    p = ReplayPipeline.build("uniform", METHODS["uniform"].Config(), context, options)
    option = p.options[0]
    option.prepare(rows([7, 7, 8, 8], [1.0, -1.0, 0.5, -0.5]))  # s = 1/2
    # two fresh rows of group 7 and three replayed rows: P_r = 2 + 1, N_r = 1 → c = 1/3
    sample = Sample.from_batch(
        rows([7, 7, 1, 2, 3], [1.0, -1.0, 2.0, 1.0, -1.0]), current_version=0
    )
    adjusted = option.adjust(sample)
    np.testing.assert_allclose(adjusted.advantages, [1.0, -1.0, 2 / 3, 1 / 3, -1.0])
    assert p.metrics()["balance/scale"] == pytest.approx(1 / 3)
    assert p.metrics()["balance/positive_share"] == pytest.approx(0.75)
    only_fresh = Sample.from_batch(rows([7, 8], [1.0, -0.5]), current_version=0)
    assert option.adjust(only_fresh) is only_fresh


def test_balance_reaches_the_batches_a_pipeline_yields() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=4, group_size=2)
    settings = METHODS["uniform"].Config(replay_ratio=2.0, capacity=64)
    p = ReplayPipeline.build("uniform", settings, context, {"balance": BalanceConfig(enabled=True)})
    list(p.batches(rows([0, 0, 1, 1], [3.0, 3.0, 3.0, -0.1])))  # stored: mostly positive mass
    for sample in p.batches(rows([2, 2, 3, 3], [1.0, -1.0, 1.0, -1.0])):
        replayed = ~np.isin(sample.group_ids, [2, 3])
        p_r, n_r = masses(sample.advantages[replayed])
        if p_r > 0 and n_r > 0:
            assert p_r == pytest.approx(n_r)  # balanced to the fresh round's share of 1/2


def test_balance_floor_is_checked() -> None:
    with pytest.raises(MethodConfigError, match="floor"):
        BalanceConfig(enabled=True, floor=1.5).check()


def test_a_prompt_solved_twice_in_a_row_leaves_the_table_and_comes_back_when_failed(
    tmp_path: Path,
) -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=4, group_size=2)
    settings = METHODS["uniform"].Config(replay_ratio=1.0, capacity=64)
    options = {"retire": RetireConfig(enabled=True, rounds=2)}
    p = ReplayPipeline.build("uniform", settings, context, options)
    table = p.method.table

    def round_(first: int, solved: bool) -> None:
        # prompt 5 (solved or not) and prompt 6 (half right), two rollouts each
        adv, flags = ([0.0, 0.0], [True, True]) if solved else ([1.0, -1.0], [True, False])
        groups, prompts = [first, first, first + 1, first + 1], [5, 5, 6, 6]
        list(p.batches(rows(groups, [*adv, 1.0, -1.0], prompts, [*flags, True, False])))

    round_(0, solved=True)
    assert len(table.keys_for_prompt(np.array([5]))) == 2 and p.metrics()["retire/prompts"] == 0
    round_(2, solved=True)  # second solved round in a row: retired, the stored ones removed
    assert p.metrics()["retire/prompts"] == 1 and p.metrics()["retire/removed"] == 2
    round_(4, solved=True)  # what the previous round stored of it goes too
    assert p.metrics()["retire/removed"] == 4
    assert len(table.keys_for_prompt(np.array([6]))) == 6  # the unsolved prompt stays
    p.save(tmp_path)
    q = ReplayPipeline.build("uniform", settings, context, options)
    q.load(tmp_path)
    assert q.metrics()["retire/prompts"] == 1 and q.metrics()["retire/removed"] == 4
    round_(6, solved=False)
    assert p.metrics()["retire/prompts"] == 0


def test_retire_is_refused_where_nothing_is_replayed_and_knobs_are_checked() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=4)
    with pytest.raises(ValueError, match="option 'retire': not with method 'on_policy'"):
        ReplayPipeline.build(
            "on_policy", METHODS["on_policy"].Config(), context, {"retire": RetireConfig(True)}
        )
    with pytest.raises(MethodConfigError, match="pass_rate"):
        RetireConfig(enabled=True, pass_rate=0.0).check()
    with pytest.raises(MethodConfigError, match="rounds"):
        RetireConfig(enabled=True, rounds=0).check()
