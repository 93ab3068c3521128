"""`replay.tasks`: the per-task table parts applied to whatever table a method keeps, through the
config, every host's spec, a sync run on a mixture, the anneal's replay scale and a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_replay.buffer import (
    PositiveRetention,
    Prioritized,
    ReplayTable,
    TaskBalanced,
    TaskCapacity,
    Uniform,
)
from llm_replay.buffer.task_parts import TaskParts
from llm_replay.config import ConfigError, load_config
from llm_replay.runtime import SyncTrainer
from llm_replay.runtime.components import build_replay, table_spec
from tests.conftest import tiny_config

BOTH = ["replay.tasks.balance=true", "replay.tasks.capacity=true"]


def test_the_parts_wrap_the_presets_sampler_and_remover() -> None:
    both = TaskParts(balance=True, capacity=True)
    table = ReplayTable.positive_biased(64, delta=0.25, tasks=both)
    assert isinstance(table.sampler, TaskBalanced)
    assert isinstance(table.remover, TaskCapacity)
    assert isinstance(table.remover.inner, PositiveRetention)
    assert table.remover.inner.delta == 0.25
    plain = ReplayTable.uniform(64, tasks=TaskParts(capacity=True))
    assert isinstance(plain.sampler, Uniform) and plain.remover.inner is None
    assert type(ReplayTable.uniform(64, tasks=TaskParts()).sampler) is Uniform


@pytest.mark.parametrize(
    "build",
    [
        lambda p: ReplayTable.prioritized(64, tasks=p),
        lambda p: ReplayTable.uniform(64, replacement=False, tasks=p),
        lambda p: ReplayTable.queue(64, tasks=p),
    ],
)
def test_balance_over_a_sampler_it_would_replace_is_refused(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"replay\.tasks\.balance = true"):
        build(TaskParts(balance=True))


def test_capacity_wraps_a_prioritized_table() -> None:
    table = ReplayTable.prioritized(64, tasks=TaskParts(capacity=True))
    assert isinstance(table.sampler, Prioritized) and isinstance(table.remover, TaskCapacity)


def test_the_config_gives_every_host_the_same_wrapped_spec() -> None:
    config = load_config("mixture", ["replay.method=positive", *BOTH])
    assert config.replay.to_dict()["tasks"] == {"balance": True, "capacity": True}
    spec = table_spec(config)
    assert spec.tasks == TaskParts(balance=True, capacity=True)
    host = build_replay(config)
    assert host.pipeline.method.spec == spec
    assert isinstance(host.pipeline.method.table.sampler, TaskBalanced)
    off = load_config("mixture", ["replay.method=positive"])
    assert table_spec(off).tasks is None and "tasks" not in off.replay.to_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["replay.tasks.balance=true"], r"replay\.tasks: not with method 'on_policy'"),
        (
            ["replay.method=prioritized", "replay.tasks.balance=true"],
            r"replay\.tasks\.balance = true: .*Prioritized",
        ),
        (["replay.method=positive", "replay.tasks.balanse=true"], r"replay\.tasks\.balance"),
        (["replay.method=positive", "replay.tasks=yes"], r"replay\.tasks = 'yes'"),
        (["replay.method=positive", "replay.tasks.capacity=2"], r"replay\.tasks\.capacity"),
    ],
)
def test_bad_task_parts_are_refused_at_load_by_name(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("mixture", overrides)


def test_auto_on_a_mixture_balances_and_caps_and_its_anneal_reaches_the_retention(
    tmp_path: Path,
) -> None:
    """The anneal moves δ of the PositiveRetention inside TaskCapacity; the table holds every
    member, none above its share; a checkpoint restores the parts."""
    config = tiny_config(
        "auto",
        tmp_path / "run",
        "task.kind=mixture",
        "task.dataset=chain_sum",
        "task.members={chain_sum: {weight: 3}, gcd: {weight: 1}}",
        "generation.max_new_tokens=8",
        "train.iterations=4",
        "replay.anneal.start=0.25",
        "replay.anneal.end=0.5",
        *BOTH,
    )
    trainer = SyncTrainer(config)
    trainer.run()
    method = trainer.replay.pipeline.method
    table = method.table
    assert isinstance(table.sampler, TaskBalanced)
    remover = table.remover
    assert isinstance(remover, TaskCapacity) and isinstance(remover.inner, PositiveRetention)
    assert remover.inner.delta == pytest.approx(0.0)  # annealed to on-policy by the end
    stats = table.stats()
    assert set(stats.tasks) == {"chain_sum", "gcd"}
    for name, reading in stats.tasks.items():
        assert reading.size <= table.max_rollouts // 2, name
    restored = ReplayTable.load(table.save(tmp_path / "table"))
    assert isinstance(restored.sampler, TaskBalanced)
    assert isinstance(restored.remover, TaskCapacity)
    assert isinstance(restored.remover.inner, PositiveRetention)
