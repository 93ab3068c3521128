"""The run's signals a method reads: hand-computed round and step statistics, persistence, and
the declared asynchronous mode."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods import METHODS, MethodContext, RunSignals, TableReplay
from llm_replay.methods.pipeline import ReplayPipeline
from llm_replay.methods.signals import RoundStats, prompt_key


def round_of(pass_flags: list[list[int]], prompts: list[list[int]], first_group: int = 0):
    """Groups of rollouts with the given correctness, each group with its prompt's tokens; every
    completion is two tokens with log-probs -0.5 and -1.5."""
    rows = [(g, flag) for g, flags in enumerate(pass_flags) for flag in flags]
    return RolloutBatch.from_ragged(
        prompt_ids=[prompts[g] for g, _ in rows],
        completion_ids=[[1, 2] for _ in rows],
        behaviour_logprobs=[[-0.5, -1.5] for _ in rows],
        rewards=[float(flag) for _, flag in rows],
        advantages=[0.0 for _ in rows],
        group_ids=[first_group + g for g, _ in rows],
        policy_versions=[0 for _ in rows],
        correct=[bool(flag) for _, flag in rows],
    )


def test_round_stats_by_hand() -> None:
    fresh = round_of([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], [[5, 6], [7], [5, 6]])
    stats = RoundStats.of(fresh)
    assert stats.group_ids == [0, 1, 2]
    assert stats.pass_rates == [0.5, 1.0, 0.0]
    assert stats.zero_variance_share == pytest.approx(2 / 3)  # all right, all wrong
    assert stats.reward_mean == pytest.approx(6 / 12)
    assert stats.entropy == pytest.approx(1.0)  # mean of 0.5 and 1.5
    assert stats.prompt_keys[0] == stats.prompt_keys[2] != stats.prompt_keys[1]
    assert stats.prompt_keys[0] == prompt_key(np.array([5, 6]))  # stable across processes
    assert stats.rollouts == 12


def test_unknown_correctness_falls_back_to_a_positive_reward() -> None:
    fresh = RolloutBatch.from_ragged(
        prompt_ids=[[1], [1]],
        completion_ids=[[2], [3]],
        behaviour_logprobs=[[-1.0], [-1.0]],
        rewards=[0.7, 0.0],
        advantages=[0.0, 0.0],
        group_ids=[4, 4],
        policy_versions=[0, 0],
    )
    assert RoundStats.of(fresh).pass_rates == [0.5]


def sample_with(ages: list[int], times_sampled: list[int]) -> Sample:
    batch = round_of([[1] * len(ages)], [[3]])
    sample = Sample.from_batch(batch, current_version=max(ages), keys=np.arange(len(ages)))
    return dataclasses.replace(
        sample,
        ages=np.array(ages, dtype=np.int64),
        times_sampled=np.array(times_sampled, dtype=np.int32),
    )


def test_step_statistics_weighted_means_first_values_by_hand() -> None:
    signals = RunSignals(half_life=1.0)  # each older step weighs half as much
    sample = sample_with([0, 2, 2, 0], [1, 2, 3, 1])
    signals.record_step(sample, {"loss/kl_behaviour": 0.4, "loss/grad_norm": 2.0})
    signals.record_step(sample, {"loss/kl_behaviour": 0.1, "loss/entropy": 3.0})
    assert signals.steps == 2
    assert signals.step["kl_behaviour"] == 0.1 and "grad_norm" not in signals.step
    assert signals.mean("kl_behaviour") == pytest.approx((0.5 * 0.4 + 0.1) / 1.5)
    assert signals.mean("grad_norm") == pytest.approx(2.0)  # decays with its own weight
    assert signals.mean("entropy") == 3.0 and signals.mean("clip_fraction") is None
    assert signals.first("kl_behaviour") == 0.4
    assert signals.step["age_mean"] == 1.0 and signals.step["stale_fraction"] == 0.5
    assert signals.step["replayed_fraction"] == 0.5 and signals.step["completion_length"] == 2
    metrics = signals.metrics()
    assert metrics["signals/steps"] == 2 and "signals/round_entropy" not in metrics
    assert metrics["signals/kl_behaviour"] == pytest.approx((0.5 * 0.4 + 0.1) / 1.5)


def test_a_non_finite_mu_or_statistic_is_not_a_reading() -> None:
    signals = RunSignals()
    signals.set_mu(float("nan"))
    assert signals.mu is None
    signals.set_mu(5.25)
    assert signals.mu == 5.25
    signals.record_step(sample_with([0], [1]), {"loss/kl_behaviour": float("inf")})
    assert "kl_behaviour" not in signals.step


def test_signals_state_is_strict_json_and_round_trips() -> None:
    signals = RunSignals()
    signals.set_mu(3.0)
    signals.set_policy_version(7)
    signals.record_step(sample_with([1, 0], [2, 1]), {"loss/kl_behaviour": 0.2})
    before_round = json.dumps(signals.state(), allow_nan=False)  # NaN round fields as null
    signals.record_round(round_of([[1, 0]], [[9]]))
    state = json.loads(json.dumps(signals.state(), allow_nan=False))
    restored = RunSignals()
    restored.load_state(state)
    assert restored.state() == signals.state()
    assert restored.mean("kl_behaviour") == signals.mean("kl_behaviour")
    assert restored.round == signals.round
    empty = RunSignals()
    empty.load_state(json.loads(before_round))
    assert math.isnan(empty.round.entropy)


def test_the_pipeline_feeds_the_signals_the_method_was_built_with() -> None:
    context = MethodContext(batch_size=4, rollouts_per_step=8, group_size=4)
    pipeline = ReplayPipeline.build("uniform", METHODS["uniform"].Config(), context)
    assert pipeline.signals is context.signals is pipeline.method.context.signals
    fresh = round_of([[1, 0, 1, 1], [0, 0, 0, 0]], [[1], [2]])
    batches = pipeline.batches(fresh)
    assert pipeline.signals.rounds == 1 and pipeline.signals.round.pass_rates == [0.75, 0.0]
    sample = next(batches)
    pipeline.observe_step(sample, {"loss/kl_behaviour": 0.0})
    pipeline.set_policy_version(3)
    assert pipeline.signals.steps == 1 and pipeline.signals.policy_version == 3
    assert pipeline.metrics()["signals/round_zero_variance_share"] == 0.5


def test_auto_reads_mu_from_its_signals() -> None:
    context = MethodContext(batch_size=8, rollouts_per_step=8, group_size=4)
    settings = METHODS["compute_optimal"].Config(
        rho=0.0, rho_online=False, horizon=2.0, max_ratio=4.0
    )
    pipeline = ReplayPipeline.build("compute_optimal", settings, context)
    fresh = round_of([[1, 0, 1, 1], [0, 1, 0, 0]], [[1], [2]])
    assert len(list(pipeline.batches(fresh))) == 1  # no μ yet: y = 1
    context.signals.set_mu(1.5)  # y = clip(1.5 · 2, 1, 4) = 3
    assert len(list(pipeline.batches(round_of([[1, 0, 0, 1]] * 2, [[3], [4]], 2)))) == 3
    assert pipeline.method.ratio == 3.0


EIGHT = (
    "on_policy",
    "uniform",
    "positive",
    "compute_optimal",
    "rlep",
    "prioritized",
    "freshper",
    "exgrpo",
)


def test_the_asynchronous_mode_is_declared_and_checked() -> None:
    """The eight methods keep the modes they were inferred to have before it was declared."""
    declared = {name: cls.async_mode() for name, cls in METHODS.items()}
    assert {name: declared[name] for name in EIGHT} == {
        "on_policy": "table",
        "uniform": "table",
        "positive": "table",
        "compute_optimal": "rounds",
        "rlep": "rounds",
        "prioritized": "rounds",
        "freshper": "rounds",
        "exgrpo": "rounds",
    }
    with pytest.raises(TypeError, match="async_batches = 'table' skips batches"):

        class Overrides(TableReplay):
            def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
                yield from ()


def test_a_mixtures_signals_hold_each_tasks_pass_rate_share_and_age_by_hand() -> None:
    """Rows of two tasks: per-task pass rate per round, share / replayed / age per step, their
    weighted means, the log and the saved state; a single-task run has none."""
    fresh = round_of([[1, 1, 0, 0], [0, 0, 0, 1]], [[5], [6]]).with_tasks(
        ["easy"] * 4 + ["hard"] * 4
    )
    assert RoundStats.of(fresh).task_pass_rates == {"easy": 0.5, "hard": 0.25}
    signals = RunSignals(half_life=1.0)
    signals.record_round(fresh)
    sample = Sample.from_batch(fresh, current_version=2, keys=np.arange(8))
    sample = dataclasses.replace(
        sample,
        ages=np.array([0, 0, 0, 2, 1, 1, 1, 1], dtype=np.int64),
        times_sampled=np.array([1, 1, 1, 2, 3, 3, 1, 1], dtype=np.int32),
    )
    signals.record_step(sample, {})
    assert signals.step_tasks == {
        "easy": {"share": 0.5, "replayed_fraction": 0.25, "age_mean": 0.5},
        "hard": {"share": 0.5, "replayed_fraction": 0.5, "age_mean": 1.0},
    }
    signals.record_round(
        round_of([[1, 1], [1, 1]], [[5], [6]]).with_tasks(["easy"] * 2 + ["hard"] * 2)
    )
    assert signals.task_mean("hard", "pass_rate") == pytest.approx((0.5 * 0.25 + 1.0) / 1.5)
    assert signals.task_mean("easy", "age_mean") == 0.5 and signals.tasks() == ["easy", "hard"]
    metrics = signals.metrics()
    assert metrics["signals/task/hard/replayed_fraction"] == 0.5
    restored = RunSignals(half_life=1.0)
    restored.load_state(json.loads(json.dumps(signals.state(), allow_nan=False)))
    assert restored.state() == signals.state() and restored.round == signals.round
    single = RunSignals()
    single.record_round(round_of([[1, 0]], [[5]]).with_tasks("easy"))
    single.record_step(sample_with([0, 1], [1, 2]), {})
    assert single.round.task_pass_rates == {} and single.step_tasks == {}
    assert not any("/task/" in k for k in single.metrics()) and single.tasks() == []
