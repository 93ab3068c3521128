"""pass@k by hand, the compute meter's μ and FLOPs, and log truncation on resume."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_replay.evaluation import pass_at_k
from llm_replay.metrics import ComputeMeter, MetricsLogger, read_log, truncate_log
from llm_replay.metrics.compute import cost_on_basis


def test_pass_at_k_hand_values() -> None:
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(2 / 8)
    # 1 - C(6,4)/C(8,4) = 1 - 15/70
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - 15 / 70)
    assert pass_at_k(8, 5, 4) == 1.0  # fewer than k wrong answers
    with pytest.raises(ValueError, match="k = 9 exceeds"):
        pass_at_k(8, 1, 9)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def test_meter_mu_flops_and_cost() -> None:
    meter = ComputeMeter(parameters=1000)
    for role, seconds in {"generation": 3.0, "scoring": 1.0, "training": 8.0}.items():
        meter.add_seconds(role, seconds)
    meter.add(rollouts_generated=100, rollouts_trained=200, tokens_generated=500, prompt_tokens=300)
    meter.add(tokens_trained=1000, forward_only_tokens=100)
    # generation: 4 s / 100 rollouts; training: 8 s / 200 rollouts → μ = 0.04 / 0.04 = 1
    assert meter.mu == pytest.approx(1.0)
    assert meter.flops["generation"] == 2 * 1000 * 800
    assert meter.flops["training"] == 6 * 1000 * 1000 + 2 * 1000 * 100
    meter.add(completion_tokens_trained=400)
    assert meter.cost(mu=5.0) == 500 * 5 + 400
    assert cost_on_basis("rollouts", meter.metrics()) == 100
    assert cost_on_basis("measured", meter.metrics()) == 12.0
    with pytest.raises(ValueError, match="basis = 'flops'"):
        cost_on_basis("flops", meter.metrics())
    assert meter.metrics()["compute/seconds"] == 12.0
    clone = ComputeMeter()
    clone.load_state_dict(meter.state_dict())
    assert clone.metrics() == meter.metrics()
    with pytest.raises(ValueError, match="role = 'eval'"), meter.time("eval"):
        pass
    with pytest.raises(ValueError, match="count 'nope'"):
        meter.add(nope=1)
    assert ComputeMeter().mu is None


def test_generation_steps_are_counted_and_charged_on_no_basis() -> None:
    meter = ComputeMeter()
    meter.add(tokens_generated=100, completion_tokens_trained=50, rollouts_generated=10)
    before = {b: cost_on_basis(b, meter.metrics()) for b in ("mu_5", "rollouts", "measured")}
    meter.add(generation_steps=7)
    assert meter.metrics()["compute/generation_steps"] == 7.0
    assert {b: cost_on_basis(b, meter.metrics()) for b in before} == before
    state = meter.state_dict()
    del state["counts"]["generation_steps"]  # a checkpoint written before the counter existed
    clone = ComputeMeter()
    clone.load_state_dict(state)
    assert clone.counts["generation_steps"] == 0


def test_meter_times_roles_with_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([10.0, 12.5, 20.0, 20.25])
    monkeypatch.setattr(
        "llm_replay.metrics.compute.time", SimpleNamespace(perf_counter=lambda: next(readings))
    )
    meter = ComputeMeter()
    with meter.time("training"):
        pass
    with pytest.raises(RuntimeError), meter.time("generation"):  # a failed section still counts
        raise RuntimeError("boom")
    assert meter.seconds == {**meter.seconds, "training": 2.5, "generation": 0.25}
    assert meter.total_seconds == 2.75


def test_logger_truncates_after_checkpoint(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path)
    for i in range(5):
        logger.log({"iteration": i, "x": float(i), "bad": math.nan})
    logger.close()
    truncate_log(tmp_path, 2)
    records = read_log(tmp_path)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert records[0]["bad"] is None  # NaN written as null: valid JSON
