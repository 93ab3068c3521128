"""A method's table spec: what its table is, built once by whoever hosts the table."""

from __future__ import annotations

import pytest

from llm_replay.buffer import MinSize
from llm_replay.methods import METHODS, MethodContext, ReplayMethod
from llm_replay.methods.table_spec import TableSpec
from llm_replay.runtime.feeds import build_async_table
from tests.conftest import tiny_config

CONTEXT = MethodContext(batch_size=16, rollouts_per_step=32, group_size=8, seed=3)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_builds_its_table_from_its_spec_lazily(name: str) -> None:
    cls = METHODS[name]
    settings = cls.Config()
    spec = cls.table_spec(settings, CONTEXT)
    assert isinstance(spec, TableSpec)
    method = cls(settings, CONTEXT)
    assert method._table is None  # nothing built until someone uses it
    table = method.table
    assert method.table is table and table.max_rollouts == spec.max_rollouts
    fresh = spec.build()
    assert fresh is not table and fresh.state()[0]["eviction"] == table.state()[0]["eviction"]
    assert type(fresh.sampler) is type(table.sampler)
    assert fresh.sampler.config() == table.sampler.config()


def test_the_plain_table_preset_takes_a_sampler_by_name() -> None:
    spec = TableSpec("table", 64, {"sampler": ("recency", {"half_life": 2.0}), "seed": 1})
    table = spec.build()
    assert table.sampler.name == "recency" and table.sampler.config() == {"half_life": 2.0}
    assert table.remover is None
    kept = TableSpec("table", 64, {"remover": ("positive_biased", {"delta": 0.25})}).build()
    assert kept.sampler.name == "uniform" and kept.remover is not None
    assert kept.remover.config() == {"delta": 0.25}


def test_positive_biased_replay_is_a_uniform_sampler_over_a_remover() -> None:
    spec = METHODS["positive"].table_spec(METHODS["positive"].Config(delta=0.3), CONTEXT)
    table = spec.build()
    assert table.sampler.name == "uniform"
    assert table.remover is not None and table.remover.config() == {"delta": 0.3}


def test_a_limiter_given_by_the_host_replaces_the_presets() -> None:
    spec = METHODS["uniform"].table_spec(METHODS["uniform"].Config(), CONTEXT)
    assert spec.build(MinSize(5)).rate_limiter.min_size_to_sample == 5


def test_the_workers_table_is_built_from_the_config_without_building_a_method(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a method was built")

    monkeypatch.setattr(ReplayMethod, "__init__", refuse)
    config = tiny_config("positive", tmp_path, "runtime=threaded")
    table = build_async_table(config)
    assert table.max_rollouts == config.replay.settings.capacity
    assert table.rate_limiter.samples_per_insert == config.replay.samples_per_insert
