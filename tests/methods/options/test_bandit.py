"""`replay.bandit`: replay or on-policy each round, leaning to the arm whose compute buys more
fresh reward; hand-computed fits, both directions of the lean, resume, refusals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError, load_config
from llm_replay.methods import METHODS, MethodConfigError, MethodContext, ReplayPipeline
from llm_replay.methods.options.bandit import BanditConfig, arm_slopes, replay_probability
from tests.methods.options.test_anneal import fresh_round

MU = 5.0


def test_the_fit_recovers_each_arms_reward_per_compute_by_hand() -> None:
    arms = [1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0]
    cost = {1: 7.0, 0: 6.0}  # a replay round trains more
    spent = {1: 0.0, 0: 0.0}
    rewards, replay, on = [], [], []
    for arm in arms:
        rewards.append(0.2 + 0.003 * spent[1] + 0.001 * spent[0])
        replay.append(spent[1])
        on.append(spent[0])
        spent[arm] += cost[arm]
    fit = arm_slopes(rewards, replay, on)
    assert fit is not None
    b_replay, b_on, error = fit
    assert b_replay == pytest.approx(0.003) and b_on == pytest.approx(0.001)
    assert error == pytest.approx(0.0, abs=1e-9)


def test_an_undetermined_fit_is_none() -> None:
    assert arm_slopes([0.1, 0.2, 0.3], [0, 1, 2], [0, 0, 1]) is None  # under four rounds
    assert arm_slopes([0.1, 0.2, 0.3, 0.4], [0, 1, 2, 3], [0, 0, 0, 0]) is None  # one arm only


def test_the_replay_probability_by_hand() -> None:
    assert replay_probability((0.003, 0.001, 0.002), 0.0) == pytest.approx(0.8413447461)
    assert replay_probability((0.001, 0.003, 0.002), 0.0) == pytest.approx(1 - 0.8413447461)
    assert replay_probability((0.01, 0.001, 0.001), 0.1) == pytest.approx(0.9)
    assert replay_probability((0.001, 0.01, 0.001), 0.1) == pytest.approx(0.1)
    assert replay_probability(None, 0.1) == 0.5


def pipeline(**knobs: object) -> ReplayPipeline:
    context = MethodContext(batch_size=4, rollouts_per_step=8, group_size=4)
    settings = METHODS["uniform"].Config(replay_ratio=3.0)
    options = {"bandit": BanditConfig(enabled=True, **knobs)}  # type: ignore[arg-type]
    return ReplayPipeline.build("uniform", settings, context, options)


def play(p: ReplayPipeline, rounds: int, pays: str, history: list[float], start: int = 0) -> None:
    """`rounds` rounds whose fresh reward rises 0.01 for every earlier round of arm `pays`;
    each round's arm is appended to `history` (the arms before it, for a resumed pipeline)."""
    paying = 1.0 if pays == "replay" else 0.0
    for round_ in range(start, start + rounds):
        reward = 0.1 + 0.01 * sum(a == paying for a in history)
        samples = list(p.batches(fresh_round(round_, reward)))
        for sample in samples:
            p.observe_step(sample, {})
        arm = p.metrics()["bandit/arm"]
        history.append(arm)
        assert len(samples) == (6 if arm == 1.0 else 2)  # y = 3, or each fresh row once


@pytest.mark.parametrize(("pays", "lean"), [("replay", 0.9), ("on_policy", 0.1)])
def test_the_run_leans_to_the_arm_that_buys_reward(pays: str, lean: float) -> None:
    p = pipeline(window=20, warmup=6, p_min=0.1, mu=MU)
    arms: list[float] = []
    play(p, 40, pays, arms)
    assert p.metrics()["bandit/p_replay"] == pytest.approx(lean)
    late = np.mean(arms[-20:])
    assert (late > 0.7) if pays == "replay" else (late < 0.3)
    metrics = p.metrics()
    spent = metrics["bandit/compute_replay"] + metrics["bandit/compute_on_policy"]
    # every round charged but the last: μ × 16 generated tokens + 2 tokens × rows trained
    replay_rounds = sum(a == 1.0 for a in arms[:-1])
    on_rounds = len(arms) - 1 - replay_rounds
    assert spent == pytest.approx(
        replay_rounds * (MU * 16 + 2 * 24) + on_rounds * (MU * 16 + 2 * 8)
    )


def test_an_on_policy_round_trains_each_fresh_rollout_once() -> None:
    p = pipeline(warmup=6, seed=3)
    for round_ in range(12):
        fresh = fresh_round(round_, 0.1)
        samples = list(p.batches(fresh))
        for sample in samples:
            p.observe_step(sample, {})
        if p.metrics()["bandit/arm"] == 0.0:
            trained = [r for s in samples for r in s.to_batch().rollouts()]
            assert trained == fresh.rollouts()


def test_a_resumed_run_draws_what_an_uninterrupted_one_does(tmp_path: Path) -> None:
    whole, first = pipeline(warmup=4, window=10), pipeline(warmup=4, window=10)
    arms_whole: list[float] = []
    play(whole, 30, "replay", arms_whole)
    arms: list[float] = []
    play(first, 18, "replay", arms)
    first.save(tmp_path)
    second = pipeline(warmup=4, window=10)
    second.load(tmp_path)
    play(second, 12, "replay", arms, start=18)
    assert arms == arms_whole
    assert second.metrics()["bandit/p_replay"] == whole.metrics()["bandit/p_replay"]


def test_refusals_and_bad_knobs_are_named() -> None:
    with pytest.raises(ConfigError, match=r"not with method 'on_policy' \(it has no replay"):
        load_config("on_policy", ["replay.bandit.enabled=true"])
    with pytest.raises(ConfigError, match=r"anneal\.enabled = true and bandit\.enabled = true"):
        load_config("positive_anneal", ["replay.bandit.enabled=true"])
    for knobs, message in (
        ({"window": 3}, "window = 3"),
        ({"warmup": 50, "window": 20}, "warmup = 50"),
        ({"p_min": 0.7}, "p_min = 0.7"),
        ({"mu": -1.0}, "mu = -1.0"),
    ):
        with pytest.raises(MethodConfigError, match=message):
            BanditConfig(enabled=True, **knobs).check()  # type: ignore[arg-type]
    assert load_config("positive_bandit").replay.options["bandit"].enabled
    assert not math.isnan(load_config("positive_bandit").replay.options["bandit"].p_min)
