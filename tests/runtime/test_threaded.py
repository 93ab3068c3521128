"""The threaded runtime: workers and learner at once, limiter band, shutdown, async resume."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from llm_replay.buffer import ReplayTable
from llm_replay.cli import main
from llm_replay.config.files import PRESETS_DIR
from llm_replay.metrics import read_log
from llm_replay.runtime import build_trainer
from llm_replay.runtime.rollouts import RolloutMaker
from llm_replay.runtime.threaded import ThreadedTrainer, WorkerError
from tests.conftest import tiny_config, tiny_sets
from tests.runtime.test_sync import (
    ANNEAL_ON_M2,
    AUTO_MEASURED_MU,
    assert_anneal_read_the_learners_m2,
    assert_auto_followed_the_measured_mu,
)

UNIFORM = PRESETS_DIR / "uniform.yaml"


def _generator_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("llm-replay-generator")]


def test_train_threaded_from_the_command_line(tmp_path: Path) -> None:
    sets = [
        *tiny_sets(UNIFORM),
        "train.iterations=4",
        "runtime=threaded",
        f"log.run_dir={tmp_path}",
    ]
    args = ["train", str(UNIFORM), "--quiet"]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == 4 and summary["steps"] == 4 * 2  # y·R/B = 2 steps
    train = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    last = train[-1]
    for key in (
        "async/generator_idle_fraction",
        "async/learner_idle_fraction",
        "async/rollouts_in_per_s",
        "async/samples_out_per_s",
        "async/table_share_of_learner",
        "compute/mu",
    ):
        assert key in last and np.isfinite(last[key])
    assert last["async/workers_alive"] == 2
    assert last["compute/rollouts_trained"] == 8 * 16
    assert last["compute/rollouts_generated"] >= last["buffer/inserts"] > 0
    assert (tmp_path / "checkpoint" / "DONE").is_file()
    assert not _generator_threads()


def test_samples_per_insert_stays_inside_the_limiters_band(tmp_path: Path) -> None:
    config = tiny_config(
        UNIFORM, tmp_path, "runtime=threaded", "train.iterations=12", "workers.count=3"
    )
    trainer = build_trainer(config)
    assert isinstance(trainer, ThreadedTrainer)
    limiter = trainer.table.rate_limiter
    observed: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch() -> None:  # reads the table from outside, as often as it can
        while not stop.is_set():
            stats = trainer.table.stats()
            observed.append((stats.inserts, stats.samples))
            stop.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        trainer.run()
    finally:
        stop.set()
        watcher.join()
    spi = limiter.samples_per_insert
    diffs = np.array([i * spi - s for i, s in observed if s > 0])
    assert len(diffs) > 20
    assert diffs.min() >= limiter.min_diff and diffs.max() <= limiter.max_diff
    stats = trainer.table.stats()
    assert stats.samples == 12 * 2 * 16
    ratio = stats.samples / stats.inserts
    slack = (limiter.max_diff - limiter.min_diff) / stats.inserts
    assert spi - slack <= ratio <= spi + slack
    assert stats.sampled_age_mean > 0  # asynchronous: batches mix policy versions


def test_interrupt_then_resume_loses_and_doubles_nothing(tmp_path: Path) -> None:
    extra = ["runtime=threaded", "replay.capacity=100000", "log.checkpoint_every=2"]
    config = tiny_config(UNIFORM, tmp_path, "train.iterations=7", *extra)

    def interrupt(trainer: Any, record: dict[str, Any]) -> None:
        if record["iteration"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_trainer(config).run(on_iteration=interrupt)
    assert not _generator_threads()
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 3

    resumed = build_trainer(config)
    summary = resumed.run(resume=True)
    assert summary["iterations"] == 7 and summary["steps"] == 14
    assert_checkpoint_loses_and_doubles_nothing(tmp_path / "checkpoint", config)
    log = [r for r in read_log(tmp_path) if r["kind"] == "train"]
    assert [r["iteration"] for r in log] == list(range(1, 8))


def assert_checkpoint_loses_and_doubles_nothing(checkpoint: Path, config: Any) -> None:
    """Every group of the run's prompt order so far is either stored whole in the checkpoint's
    table or listed among its outstanding work items — never both, never twice, never neither.
    (Needs a table large enough to keep every rollout.)"""
    state = json.loads((checkpoint / "state.json").read_text())
    root = checkpoint / "replay" / "table"
    shards = sorted(root.glob("shard-*"))  # a sharded Ray table: one table per shard
    tables = [ReplayTable.load(path) for path in shards] if shards else [ReplayTable.load(root)]
    group_size = config.generation.group_size
    per_item = config.generation.prompts_per_step
    stored: Counter[int] = Counter()
    for table in tables:
        stored.update(table.storage.group_id[table.storage.live_slots()].tolist())
    assert set(stored.values()) == {group_size}  # no group inserted twice, none cut short
    plan = state["work_plan"]
    outstanding = {item["first_group"] + k for item in plan["outstanding"] for k in range(per_item)}
    assert not set(stored) & outstanding
    assert set(stored) | outstanding == set(range(plan["prompts_drawn"]))
    inserts = sum(table.stats().inserts for table in tables)
    assert inserts == len(stored) * group_size
    assert state["meter"]["counts"]["rollouts_generated"] == inserts


def test_a_failing_worker_stops_the_run_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = RolloutMaker.make
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(self: RolloutMaker, *args: Any, **kwargs: Any) -> Any:
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 12:
            raise RuntimeError("reward server unreachable")
        return make(self, *args, **kwargs)

    monkeypatch.setattr(RolloutMaker, "make", flaky)
    config = tiny_config(
        UNIFORM, tmp_path, "runtime=threaded", "train.iterations=50", "log.checkpoint_every=1"
    )
    with pytest.raises(WorkerError, match="reward server unreachable"):
        build_trainer(config).run()
    assert not _generator_threads()
    assert (tmp_path / "checkpoint" / "DONE").is_file()
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert 1 <= state["iteration"] < 50


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_threaded_runtime_on_cuda_in_bfloat16(tmp_path: Path) -> None:
    config = tiny_config(
        UNIFORM, tmp_path, "runtime=threaded", "train.iterations=3", "model.device=cuda"
    )
    trainer = build_trainer(config)
    assert isinstance(trainer, ThreadedTrainer)
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    summary = trainer.run()
    assert summary["steps"] == 6 and summary["mu"] > 0


@pytest.mark.parametrize("preset", ["on_policy", "positive", "async_uniform"])
def test_every_async_preset_runs_threaded(preset: str, tmp_path: Path) -> None:
    config = tiny_config(PRESETS_DIR / f"{preset}.yaml", tmp_path, "runtime=threaded")
    config.train.iterations = 3
    trainer = build_trainer(config)
    summary = trainer.run()
    assert summary["runtime"] == "threaded" and summary["iterations"] == 3
    stats = summary["async"]
    assert stats["buffer/samples"] == summary["steps"] * config.train.batch_size
    if preset == "on_policy":  # the queue: each rollout trained on once, in arrival order
        assert stats["buffer/evicted_max_times_sampled"] == stats["buffer/samples"]
        assert summary["steps"] == 3


def test_eval_reads_a_threaded_checkpoint(tmp_path: Path) -> None:
    config = tiny_config(UNIFORM, tmp_path / "run", "runtime=threaded", "train.iterations=2")
    summary = build_trainer(config).run()
    args = ["eval", str(UNIFORM), "--checkpoint", str(tmp_path / "run"), "--json"]
    args += [str(tmp_path / "eval.json")]
    for item in tiny_sets(UNIFORM):
        args += ["--set", item]
    assert main(args) == 0
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert metrics["eval/accuracy"] == pytest.approx(summary["final_accuracy"])


def test_auto_with_measured_mu_replays_threaded(tmp_path: Path) -> None:
    config = tiny_config(
        "compute_optimal",
        tmp_path,
        "train.iterations=3",
        "runtime=threaded",
        *AUTO_MEASURED_MU,
    )
    build_trainer(config).run()
    assert_auto_followed_the_measured_mu(tmp_path)


def test_the_replay_controller_reads_a_learner_statistic_threaded(tmp_path: Path) -> None:
    config = tiny_config(UNIFORM, tmp_path, "train.iterations=5", "runtime=threaded", *ANNEAL_ON_M2)
    build_trainer(config).run()
    assert_anneal_read_the_learners_m2(tmp_path)


MIXTURE = [
    "task.kind=mixture",
    "task.members={gcd: {weight: 3}, lcm: {weight: 1}}",
    "model.path=builtin:tiny-mixture",
    "generation.max_new_tokens=6",
]


@pytest.mark.parametrize("preset", ["uniform", "auto"])
def test_a_mixture_runs_threaded_with_balanced_capped_tables(preset: str, tmp_path: Path) -> None:
    """Workers tag their rollouts with the member; the table the run samples (the shared table
    of a "table" method, the host's own for a "rounds" one) balances and caps them; every
    evaluation reads each member."""
    from llm_replay.buffer import TaskBalanced, TaskCapacity

    config = tiny_config(
        preset,
        tmp_path,
        "runtime=threaded",
        "train.iterations=4",
        *MIXTURE,
        "replay.tasks.balance=true",
        "replay.tasks.capacity=true",
    )
    trainer = build_trainer(config)
    assert isinstance(trainer, ThreadedTrainer)
    trainer.run()
    table = trainer.table if preset == "uniform" else trainer.replay.pipeline.method.table
    assert isinstance(table.sampler, TaskBalanced) and isinstance(table.remover, TaskCapacity)
    stats = table.stats()
    assert set(stats.tasks) == {"gcd", "lcm"}
    assert all(t.size <= table.max_rollouts // 2 for t in stats.tasks.values())
    evals = [r for r in read_log(tmp_path) if r.get("kind") == "eval"]
    assert evals and all({"eval/gcd/accuracy", "eval/lcm/pass@2"} <= set(r) for r in evals)
