"""The `stale_rewards` option: evict, re-score (all or nothing) and discount against hand-computed
values, and its config checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.config import ConfigError
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import MethodContext, ReplayPipeline, method_class
from llm_replay.methods.options.stale_rewards import StaleRewardsConfig
from llm_replay.methods.registry import OPTIONS
from tests.conftest import make_batch, tiny_config

GROUP = 4


def pipeline(policy: str, **knobs: object) -> ReplayPipeline:
    context = MethodContext(batch_size=8, rollouts_per_step=16, group_size=GROUP)
    settings = method_class("uniform").Config(capacity=64, replay_ratio=1.0)  # type: ignore[call-arg]
    option = StaleRewardsConfig(enabled=True, policy=policy, **knobs)  # type: ignore[arg-type]
    return ReplayPipeline.build("uniform", settings, context, {"stale_rewards": option})


def round_of(rng: np.random.Generator, version: int, first_group: int) -> RolloutBatch:
    batch = make_batch(rng, 16, first_group=first_group, group_size=GROUP)
    return dataclasses.replace(batch, reward_versions=np.full(16, version))


def stored_versions(p: ReplayPipeline) -> list[int]:
    st = p.method.table.storage
    return st.reward_version[st.live_in_order()].tolist()


def test_evict_removes_exactly_the_rows_an_older_model_scored() -> None:
    rng = np.random.default_rng(0)
    p = pipeline("evict")
    list(p.batches(round_of(rng, 0, 0)))
    list(p.batches(round_of(rng, 0, 4)))
    assert stored_versions(p) == [0] * 32
    list(p.batches(round_of(rng, 1, 8)))  # a retrained model scored this round
    assert stored_versions(p) == [1] * 16
    assert p.metrics()["stale_rewards/evicted"] == 32.0


class FakeModel:
    """A reward model at version 3 that gives row i of what it is asked (i + 1) / 10."""

    version = 3
    success_threshold = 0.25

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked: list[int] = []

    def rescore(self, batch: RolloutBatch) -> np.ndarray:
        self.asked.append(len(batch))
        if self.fail:
            raise RuntimeError("reward model server went away")
        return (np.arange(len(batch)) + 1) / 10


def test_rescore_takes_whole_oldest_groups_within_the_budget() -> None:
    rng = np.random.default_rng(1)
    p = pipeline("rescore", budget=6)
    fake = FakeModel()
    p.method.context.services.stored_rewards = fake
    list(p.batches(round_of(rng, 0, 0)))  # groups 0-3, version 0
    table = p.method.table
    before = table.get_batch(table.storage.keys_of(table.storage.live_in_order()))[0]
    list(p.batches(round_of(rng, 3, 4)))  # the current model is version 3
    assert fake.asked == [4]  # budget 6 holds one group of 4, the oldest (group 0)
    after = table.get_batch(table.storage.keys_of(table.storage.live_in_order()))[0]
    np.testing.assert_allclose(after.rewards[:4], [0.1, 0.2, 0.3, 0.4])
    r = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(after.advantages[:4], (r - 0.25) / (r.std() + 1e-6))
    assert after.correct[:4].tolist() == [0, 0, 1, 1]
    assert after.reward_versions[:16].tolist() == [3] * 4 + [0] * 12
    np.testing.assert_array_equal(after.rewards[4:16], before.rewards[4:16])  # the rest as was
    assert p.metrics()["stale_rewards/rescored"] == 4.0
    assert p.metrics()["stale_rewards/stale"] == 16.0  # counted before this round's re-scoring


def test_a_model_that_fails_midway_leaves_the_table_as_it_was() -> None:
    rng = np.random.default_rng(2)
    p = pipeline("rescore", budget=64)
    p.method.context.services.stored_rewards = FakeModel(fail=True)
    list(p.batches(round_of(rng, 0, 0)))
    table = p.method.table
    state_before = table.state()[1]
    p.options[0].prepare(round_of(rng, 3, 4))
    for name, array in table.state()[1].items():
        np.testing.assert_array_equal(array, state_before[name], err_msg=name)
    assert p.metrics()["stale_rewards/rescore_failures"] == 1.0


def test_rescore_without_a_reward_model_says_so() -> None:
    rng = np.random.default_rng(3)
    p = pipeline("rescore")
    list(p.batches(round_of(rng, 0, 0)))
    with pytest.raises(RuntimeError, match="lends no reward model"):
        list(p.batches(round_of(rng, 1, 4)))


def test_discount_halves_an_advantage_per_version_of_age() -> None:
    rng = np.random.default_rng(4)
    p = pipeline("discount", half_life=1.0)
    option = p.options[0]
    option.prepare(round_of(rng, 2, 0))
    batch = make_batch(rng, 3, group_size=3)
    batch = dataclasses.replace(
        batch, advantages=np.array([1.0, -2.0, 4.0]), reward_versions=np.array([0, 1, 2])
    )
    sample = option.adjust(Sample.from_batch(batch, current_version=0))
    np.testing.assert_allclose(sample.advantages, [0.25, -1.0, 4.0])
    assert option.metrics()["stale_rewards/discount"] == pytest.approx((0.25 + 0.5 + 1) / 3)


def test_the_option_checks_its_knobs_and_needs_a_learned_reward(tmp_path: Path) -> None:
    assert "stale_rewards" in OPTIONS
    with pytest.raises(ConfigError, match=r"replay\.stale_rewards\.policy = 'drop'"):
        tiny_config(None, tmp_path, "replay.stale_rewards.policy=drop")
    with pytest.raises(ConfigError, match="never goes stale"):
        tiny_config(
            None,
            tmp_path,
            "replay.method=uniform",
            "replay.stale_rewards.enabled=true",
        )
    context = MethodContext(batch_size=8, rollouts_per_step=16)
    with pytest.raises(ValueError, match="trains on each rollout once"):
        ReplayPipeline.build(
            "on_policy",
            method_class("on_policy").Config(),
            context,
            {"stale_rewards": StaleRewardsConfig(enabled=True)},
        )
