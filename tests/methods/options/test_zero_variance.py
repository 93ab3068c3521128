"""Zero-variance group replacement: what is filled, with what, how often, and where refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from llm_replay.config import ConfigError, load_config
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import MethodContext
from llm_replay.methods.options.zero_variance import ZeroVarianceConfig, ZeroVarianceReplacement
from tests.conftest import make_batch

G = 4


def round_of(rng: np.random.Generator, first_group: int, flat: list[bool], version: int = 0):  # type: ignore[no-untyped-def]
    """One round of groups of G; groups marked flat get the same reward for every rollout."""
    batch = make_batch(rng, G * len(flat), first_group=first_group, group_size=G, version=version)
    rewards = np.asarray(batch.rewards, dtype=np.float64).copy()
    for index, is_flat in enumerate(flat):
        rows = slice(index * G, (index + 1) * G)
        rewards[rows] = 0.0 if is_flat else np.array([1.0, 0.0, 1.0, 0.0])
    correct = (rewards > 0).astype(np.int8)
    advantages = np.where(rewards > 0, 1.0, -1.0) * ~np.repeat(flat, G)
    return dataclasses.replace(batch, rewards=rewards, correct=correct, advantages=advantages)


def option(capacity: int = 64, max_age: int | None = 32) -> ZeroVarianceReplacement:
    context = MethodContext(batch_size=16, rollouts_per_step=16, group_size=G)
    return ZeroVarianceReplacement(
        ZeroVarianceConfig(enabled=True, capacity=capacity, max_age=max_age), context
    )


def groups_of(batch: RolloutBatch) -> set[int]:
    return set(np.unique(batch.group_ids).tolist())


def test_flat_groups_are_replaced_by_whole_stored_informative_groups(
    rng: np.random.Generator,
) -> None:
    zv = option()
    first = round_of(rng, 0, [False, False, True, True])
    out = zv.prepare(first)  # nothing stored yet: the round is unchanged
    assert zv.metrics()["zero_variance/slots_filled"] == 0 and len(out) == len(first)
    assert zv.metrics()["zero_variance/groups"] == 2

    zv.set_policy_version(3)
    second = round_of(rng, 4, [True, False, True, True], version=3)
    out = zv.prepare(second)
    assert len(out) == len(second)  # the batch keeps its size
    assert zv.metrics()["zero_variance/slots_filled"] == 2 * G  # both stored groups, once each
    assert groups_of(out) >= {0, 1, 5}  # the fillers are round 1's informative groups, whole
    for group in (0, 1):
        rows = np.flatnonzero(out.group_ids == group)
        assert len(rows) == G and np.all(out.policy_versions[rows] == 0)
        assert np.all(np.abs(out.advantages[rows]) == 1.0)  # advantages kept from generation
    assert zv.metrics()["zero_variance/filler_age_mean"] == 3.0
    # the store ran dry after two groups: one flat group of this round stays as it was
    flat_left = [g for g in (4, 6, 7) if g in groups_of(out)]
    assert len(flat_left) == 1


def test_a_stored_group_fills_once_and_a_round_never_fills_from_itself(
    rng: np.random.Generator,
) -> None:
    zv = option()
    zv.prepare(round_of(rng, 0, [False, True, True, True]))
    out = zv.prepare(round_of(rng, 4, [True, True, True, True]))
    assert zv.metrics()["zero_variance/slots_filled"] == G
    out = zv.prepare(round_of(rng, 8, [True, True, True, True]))
    assert zv.metrics()["zero_variance/slots_filled"] == 0
    assert groups_of(out) == {8, 9, 10, 11}


def test_fillers_older_than_max_age_are_dropped(rng: np.random.Generator) -> None:
    zv = option(max_age=2)
    zv.prepare(round_of(rng, 0, [False, False, False, False]))
    assert zv.metrics()["zero_variance/store_size"] == 16
    zv.set_policy_version(5)
    zv.prepare(round_of(rng, 4, [True, True, True, True], version=5))
    assert zv.metrics()["zero_variance/slots_filled"] == 0


def test_state_survives_save_and_load(rng: np.random.Generator, tmp_path: Path) -> None:
    zv = option()
    zv.prepare(round_of(rng, 0, [False, False, True, True]))
    zv.save(tmp_path)
    restored = option()
    restored.load(tmp_path)
    assert restored.store.size == zv.store.size == 8
    restored.prepare(round_of(rng, 4, [True, True, True, True]))
    assert restored.metrics()["zero_variance/slots_filled"] == 8


def test_methods_without_fresh_groups_refuse_it_at_load_time() -> None:
    with pytest.raises(ConfigError, match=r"replay\.zero_variance\.enabled = true: not with"):
        load_config(None, ["replay.method=uniform", "replay.zero_variance.enabled=true"])
    with pytest.raises(ConfigError, match=r"replay\.zero_variance\.capacity = 0"):
        load_config(None, ["replay.zero_variance.capacity=0"])
    config = load_config("zero_variance")
    assert [name for name, _ in config.replay.enabled_options()] == ["zero_variance"]


def test_the_option_names_its_store_among_the_tables_that_reach_batches(
    rng: np.random.Generator,
) -> None:
    zv = option()
    zv.prepare(round_of(rng, 0, [False, True]))
    (store,) = zv.stored_tables()
    assert store is zv.store and store.size == G  # the informative group, kept for replacement
