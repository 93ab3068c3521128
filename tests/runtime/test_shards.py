"""Sharded tables: routing, the mixture split, shard configs and the config's refusals (the Ray
runs with shards are in test_ray.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from llm_replay.config import ConfigError
from llm_replay.config.files import PRESETS_DIR
from llm_replay.runtime.shards import shard_config, shard_key, shard_of, split_draws
from tests.conftest import tiny_config

UNIFORM = PRESETS_DIR / "uniform.yaml"


def test_items_go_round_robin_and_keys_stay_distinct() -> None:
    assert [shard_of(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    keys = np.arange(5, dtype=np.int64)
    moved = np.concatenate([shard_key(keys, k, 3) for k in range(3)])
    assert len(np.unique(moved)) == 15
    np.testing.assert_array_equal(moved % 3, np.repeat([0, 1, 2], 5))
    np.testing.assert_array_equal(moved[5:10] // 3, keys)


def test_the_split_is_multinomial_in_proportion_to_shard_sizes() -> None:
    rng = np.random.default_rng(0)
    sizes = [100, 300, 0, 600]
    draws = np.array([split_draws(64, sizes, rng) for _ in range(2000)])
    assert (draws.sum(axis=1) == 64).all() and (draws[:, 2] == 0).all()
    totals = draws.sum(axis=0)[[0, 1, 3]]
    expected = 64 * 2000 * np.array([0.1, 0.3, 0.6])
    assert stats.chisquare(totals, expected).pvalue > 1e-3
    with pytest.raises(ValueError, match="sizes"):
        split_draws(4, [0, 0], rng)


def test_a_shard_holds_its_share_of_the_capacity_and_its_own_seed(tmp_path: Path) -> None:
    config = tiny_config(
        UNIFORM, tmp_path, "runtime=ray", "workers.table_shards=3", "replay.capacity=1000"
    )
    parts = [shard_config(config, k) for k in range(3)]
    assert [p["replay"]["capacity"] for p in parts] == [334, 334, 334]
    assert len({p["train"]["seed"] for p in parts}) == 3
    assert parts[0]["train"]["seed"] == config.train.seed


@pytest.mark.parametrize(
    ("sets", "message", "preset"),
    [
        (["runtime=threaded", "workers.table_shards=2"], "runtime=ray", "uniform.yaml"),
        (["runtime=sync", "workers.table_fsync=always"], "runtime=sync", "uniform.yaml"),
        (["runtime=ray", "workers.table_shards=0"], "table_shards = 0", "uniform.yaml"),
        (["runtime=ray", "workers.table_fsync=x"], "table_fsync = 'x'", "uniform.yaml"),
        (["runtime=ray", "workers.table_shards=2"], "consumes", "on_policy.yaml"),
        (["runtime=ray", "workers.table_fsync=never"], "rounds", "rlep.yaml"),
    ],
)
def test_shards_are_refused_where_they_cannot_run(
    tmp_path: Path, sets: list[str], message: str, preset: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        tiny_config(PRESETS_DIR / preset, tmp_path, *sets)


def test_shards_are_accepted_for_the_ratio_filled_methods(tmp_path: Path) -> None:
    for preset in ("uniform.yaml", "positive.yaml"):
        config = tiny_config(
            PRESETS_DIR / preset, tmp_path, "runtime=ray", "workers.table_shards=2"
        )
        assert config.workers.sharded
