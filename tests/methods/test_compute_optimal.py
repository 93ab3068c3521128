"""`replay.method: compute_optimal` with ρ measured online: the staleness meter, the quadratic rule, the
fallback."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from llm_replay.buffer import Sample
from llm_replay.methods import MethodContext
from llm_replay.methods.compute_optimal import (
    ComputeOptimalConfig,
    ComputeOptimalReplay,
    StalenessMeter,
    optimal_ratio,
)
from tests.conftest import make_batch


def aged_sample(age: float, length: int, n: int = 8) -> Sample:
    batch = make_batch(np.random.default_rng(0), n, completion=(length, length))
    sample = Sample.from_batch(batch, current_version=0)
    return dataclasses.replace(sample, ages=np.full(n, int(age), dtype=np.int64))


def test_staleness_meter_recovers_the_kl_slope() -> None:
    meter = StalenessMeter(decay=1.0, min_steps=3)
    for age in (1, 2, 3):
        assert meter.rho_per_step is None or age > 3
        meter.observe(age, 0.01 * age, 4.0)  # KL per token grows 0.01 per step of age
    assert meter.rho_per_step == pytest.approx(2 * 4.0 * 0.01)
    meter.observe(0.0, 5.0, 4.0)  # a fresh batch says nothing about staleness
    assert meter.steps == 3


def test_optimal_ratio_solves_the_rule_with_steps_per_round() -> None:
    # ρ_step = 0.1, R/B = 1, x = 8, μ = 5: 0.1·y² + y/8 − 5 = 0
    y = optimal_ratio(5.0, 0.1, 1.0, 8.0)
    assert 0.1 * y**2 + y / 8 - 5 == pytest.approx(0.0, abs=1e-9)
    assert y == pytest.approx((-0.125 + math.sqrt(0.125**2 + 2.0)) / 0.2)
    # and ρ = ρ_step · y · R/B makes it the paper's y = μ / (ρ + 1/x)
    assert y == pytest.approx(5.0 / (0.1 * y + 0.125))
    assert optimal_ratio(5.0, 0.0, 1.0, 8.0) == 40.0


def observe(method: ComputeOptimalReplay, sample: Sample, metrics: dict[str, float]) -> None:
    """What the pipeline does after a step: the signals record it, then the method sees it."""
    method.context.signals.record_step(sample, metrics)
    method.observe_step(sample, metrics)


def test_auto_uses_the_prior_until_it_has_measured_then_follows_the_run() -> None:
    context = MethodContext(batch_size=16, rollouts_per_step=16)
    auto = ComputeOptimalReplay(ComputeOptimalConfig(rho=1.0, horizon=8, max_ratio=8), context)
    assert auto.choose_ratio(5.0) == pytest.approx(5.0 / 1.125)  # the prior
    for age in range(1, 7):  # barely stale: KL grows 0.001 per step, 3-token completions
        observe(auto, aged_sample(age, 3), {"loss/kl_behaviour": 0.001 * age})
    per_step = 2 * 3 * 0.001
    assert auto.metrics()["replay/auto_rho_per_step"] == pytest.approx(per_step, rel=1e-6)
    y = auto.choose_ratio(5.0)
    assert y == pytest.approx(min(8.0, optimal_ratio(5.0, per_step, 1.0, 8.0)))
    assert y == 8.0 and auto.metrics()["replay/auto_rho"] == pytest.approx(per_step * y)
    for age in range(1, 200):  # now very stale: the estimate follows and y falls
        observe(auto, aged_sample(age, 3), {"loss/kl_behaviour": 0.2 * age})
    assert 1.0 <= auto.choose_ratio(5.0) < 2.0
    fixed = ComputeOptimalReplay(ComputeOptimalConfig(rho=1.0, rho_online=False), context)
    for age in range(1, 7):
        observe(fixed, aged_sample(age, 3), {"loss/kl_behaviour": 0.001 * age})
    assert fixed.choose_ratio(5.0) == pytest.approx(5.0 / 1.125)
