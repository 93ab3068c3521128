from __future__ import annotations

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.methods.compose import Mixture, round_half_up, split_counts
from llm_replay.methods.prioritized import FreshAnchored
from llm_replay.methods.rlep import RLEPBlend
from llm_replay.methods.success_pool import SuccessPool
from tests.conftest import make_batch


def test_split_counts_and_rounding() -> None:
    assert split_counts(10, [0.5, 0.5]) == [5, 5]
    assert split_counts(7, [2, 1]) == [5, 2]
    assert sum(split_counts(101, [0.3, 0.3, 0.4])) == 101
    assert round_half_up(2.5) == 3 and round_half_up(1.5) == 2
    with pytest.raises(ValueError, match="fractions"):
        split_counts(4, [0, 0])


def test_mixture_draws_in_proportion(rng: np.random.Generator) -> None:
    a, b = ReplayTable(100, name="a"), ReplayTable(100, name="b")
    a.insert(make_batch(rng, 40))
    b.insert(make_batch(rng, 40, first_group=100, completion=(30, 40)))
    sample = Mixture([(a, 0.75), (b, 0.25)]).sample(16)
    assert len(sample) == 16
    assert (sample.sources == 0).sum() == 12 and (sample.sources == 1).sum() == 4
    assert sample.input_ids.shape[1] == (sample.prompt_lengths + sample.completion_lengths).max()


def test_fresh_anchored_keeps_all_fresh_and_adds_half(rng: np.random.Generator) -> None:
    replay = ReplayTable.prioritized(1000, max_age=10)
    composer = FreshAnchored(replay, ratio=0.5)
    first = composer.compose(make_batch(rng, 16))
    assert len(first) == 16 and (first.sources == 0).all(), "empty table: fresh only"
    for step in range(1, 5):
        replay.set_policy_version(step)
        fresh = make_batch(rng, 14, version=step, first_group=100 * step)
        sample = composer.compose(fresh)
        assert (sample.sources == 0).sum() == 14
        assert (sample.sources == 1).sum() == 7
        assert sample.to_batch().select(np.arange(14)).rollouts() == fresh.rollouts()
        replayed = sample.keys[sample.sources == 1]
        fresh_keys = sample.keys[sample.sources == 0]
        assert not set(replayed.tolist()) & set(fresh_keys.tolist())
        assert (sample.ages[sample.sources == 1] >= 1).all()
    assert replay.size == 16 + 4 * 14


def test_rlep_pool_and_blend(rng: np.random.Generator) -> None:
    pool = SuccessPool(1000, min_correct=2, seed=0)
    batch = make_batch(rng, 32, group_size=8, correct_rate=0.25)
    per_group = np.bincount(batch.group_ids, weights=batch.correct == 1).astype(int)
    stored = pool.add(batch)
    assert stored == int(per_group[per_group >= 2].sum())
    assert pool.num_prompts == int((per_group >= 2).sum())
    blend = RLEPBlend(pool, replay_per_group=2)
    out = blend.compose(batch)
    eligible = int((per_group >= 2).sum())
    assert len(out) == 32 + 2 * eligible
    assert int(blend.last_sources.sum()) == 2 * eligible
    for g in np.unique(out.group_ids):
        adv = out.advantages[out.group_ids == g]
        assert abs(adv.mean()) < 1e-9, "standardised over G + M"
    replayed = out.select(np.flatnonzero(blend.last_sources == 1))
    assert (replayed.correct == 1).all()


def test_pool_survives_checkpoint(tmp_path, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    pool = SuccessPool(100, min_correct=1)
    batch = make_batch(rng, 16, group_size=4, correct_rate=1.0)
    pool.add(batch)
    restored = SuccessPool.load(pool.save(tmp_path / "pool"), min_correct=1)
    assert restored.num_prompts == pool.num_prompts == 4
    prompt = batch.prompt_ids[: batch.prompt_lengths[0]]
    got = restored.draw(prompt, 2)
    assert got is not None and len(got) == 2


def test_pool_draws_repeat_after_restoring_rng_state(tmp_path, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    pool = SuccessPool(100, min_correct=1, seed=5)
    batch = make_batch(rng, 16, group_size=8, correct_rate=1.0)
    pool.add(batch)
    prompt = batch.prompt_ids[: batch.prompt_lengths[0]]
    pool.draw(prompt, 2)
    restored = SuccessPool.load(pool.save(tmp_path / "pool"), min_correct=1, seed=99)
    restored.set_rng_state(pool.rng_state())
    for _ in range(3):
        a, b = pool.draw(prompt, 2), restored.draw(prompt, 2)
        assert a is not None and b is not None
        assert np.array_equal(a.completion_ids, b.completion_ids)


def test_a_pipeline_names_every_table_its_parts_keep_rollouts_in() -> None:
    from llm_replay.methods import METHODS, MethodContext, ReplayPipeline
    from llm_replay.methods.options.zero_variance import ZeroVarianceConfig

    context = MethodContext(batch_size=8, rollouts_per_step=8, group_size=4)
    rlep = ReplayPipeline.build("rlep", METHODS["rlep"].Config(), context)
    assert rlep.method.stored_tables() == [rlep.method.pool.table]  # main table never built
    pipeline = ReplayPipeline.build(
        "prioritized",
        METHODS["prioritized"].Config(),
        context,
        {"zero_variance": ZeroVarianceConfig(enabled=True)},
    )
    table = pipeline.method.table
    tables = [t for part in pipeline.parts() for t in part.stored_tables()]
    assert tables == [table, pipeline.options[0].store]
