"""`replay.init_from`: a run starts from another run's table, ages continuing from its versions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import ReplayTable
from llm_replay.config import ConfigError, load_config
from llm_replay.methods import MethodContext, ReplayPipeline, method_class
from llm_replay.methods.pipeline import PRELOADED_GROUPS
from llm_replay.runtime.sync import SyncTrainer
from tests.conftest import make_batch, tiny_config

CONTEXT = MethodContext(batch_size=16, rollouts_per_step=16, group_size=4)


def source_table(tmp_path: Path) -> Path:
    table = ReplayTable(64)
    rng = np.random.default_rng(0)
    for version in range(4):
        table.set_policy_version(version)
        batch = make_batch(rng, 8, version=version, first_group=10 * version, correct_rate=0.5)
        table.insert(dataclasses.replace(batch, reward_versions=np.full(8, version // 2)))
    table.set_policy_version(5)
    return table.save(tmp_path / "source")


def pipeline(method: str, **knobs: object) -> ReplayPipeline:
    settings = method_class(method).Config(**knobs)  # type: ignore[arg-type]
    return ReplayPipeline.build(method, settings, CONTEXT)


def test_uniform_starts_with_the_source_rows_and_their_ages(tmp_path: Path) -> None:
    p = pipeline("uniform", capacity=64, replay_ratio=2.0)
    assert p.preload(ReplayTable.read(source_table(tmp_path))) == 32
    table = p.method.table
    assert table.size == 32 and table.policy_version == 5
    ages = sorted(set((5 - table.storage.policy_version[table.storage.live_slots()]).tolist()))
    assert ages == [2, 3, 4, 5]
    assert (table.storage.group_id[table.storage.live_slots()] >= PRELOADED_GROUPS).all()
    scored_by = np.unique(table.storage.reward_version[table.storage.live_slots()], return_counts=1)
    assert [v.tolist() for v in scored_by] == [[0, 1], [16, 16]]  # reward versions kept
    fresh = make_batch(np.random.default_rng(1), 16, version=0)  # the new run's version 0
    samples = list(p.batches(fresh))
    assert len(samples) == 2 and all(s.ages.max() <= 5 for s in samples)
    assert table.storage.policy_version[table.storage.live_slots()].max() == 5  # 0 + offset
    p.set_policy_version(1)
    assert table.policy_version == 6 and p.metrics()["replay/preloaded"] == 32
    # the offset survives a checkpoint
    p.save(tmp_path / "ckpt")
    q = pipeline("uniform", capacity=64, replay_ratio=2.0)
    q.load(tmp_path / "ckpt")
    assert q.version_offset == 5 and q.method.table.policy_version == 6


def test_exgrpo_reads_the_source_as_a_round_and_on_policy_refuses(tmp_path: Path) -> None:
    p = pipeline("exgrpo")
    p.preload(ReplayTable.read(source_table(tmp_path)))
    assert p.method.rates and p.method.table.size > 0
    with pytest.raises(ValueError, match="init_from: not with method 'on_policy'"):
        pipeline("on_policy").preload(ReplayTable.read(tmp_path / "source"))


def test_config_checks_name_the_field(tmp_path: Path) -> None:
    source = source_table(tmp_path)
    with pytest.raises(ConfigError, match=r"replay\.init_from = .*: not a table directory"):
        load_config("uniform", [f"replay.init_from={tmp_path / 'no'}"])
    with pytest.raises(ConfigError, match=r"replay\.init_from: not with method .on_policy."):
        load_config("on_policy", [f"replay.init_from={source}"])
    with pytest.raises(ConfigError, match="runtime=threaded feeds method 'uniform'"):
        load_config("async_uniform", [f"replay.init_from={source}"])


def test_a_sync_run_trains_on_the_previous_runs_table(tmp_path: Path) -> None:
    first = tiny_config("uniform", tmp_path / "a", "train.iterations=3")
    trainer = SyncTrainer(first)
    trainer.run()
    trainer.save_checkpoint()
    table_dir = tmp_path / "a" / "checkpoint" / "replay" / "table"
    assert ReplayTable.read(table_dir).size > 0
    second = tiny_config(
        "uniform",
        tmp_path / "b",
        "train.iterations=2",
        f"replay.init_from={table_dir}",
    )
    SyncTrainer(second).run()
    records = [
        json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    ]
    first_train = next(r for r in records if r["kind"] == "train")
    assert first_train["replay/preloaded"] > 0
    assert first_train["train/age_mean"] > 0  # the first batches already hold old rollouts


def test_a_table_stored_without_behaviour_log_probs_is_refused_where_they_are_read(
    tmp_path: Path,
) -> None:
    """TRL stores zeros for the behaviour where nothing reads it (AsymRE without KL-Cov); such a
    table read by a loss with a ratio would look like a policy certain of every token."""
    table = ReplayTable(64)
    batch = make_batch(np.random.default_rng(0), 32, version=0)
    zeros = np.zeros_like(batch.behaviour_logprobs)
    table.insert(dataclasses.replace(batch, behaviour_logprobs=zeros))
    saved = table.save(tmp_path / "zeros")
    init = f"replay.init_from={saved}"
    with pytest.raises(ValueError, match=r"replay\.init_from = .*every stored behaviour log-prob"):
        SyncTrainer(tiny_config("uniform", tmp_path / "ratio", "train.iterations=1", init))
    # AsymRE without KL-Cov never reads them: the same table is taken
    SyncTrainer(tiny_config("positive", tmp_path / "asymre", "train.iterations=1", init))
