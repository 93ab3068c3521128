"""The run's schedule, by hand: budgets on each basis and evaluation points."""

from __future__ import annotations

from llm_replay.config import load_config
from llm_replay.metrics import ComputeMeter
from llm_replay.runtime.schedule import RunSchedule


def schedule(*sets: str) -> RunSchedule:
    return RunSchedule(load_config(None, list(sets)))


def meter(generated: int, trained: int) -> ComputeMeter:
    m = ComputeMeter()
    m.add(tokens_generated=generated, completion_tokens_trained=trained)
    return m


def test_a_mu_budget_is_spent_on_counts_and_stops_the_run() -> None:
    s = schedule("train.iterations=1000", "train.budget_basis=mu_5", "train.compute_budget=600")
    assert s.spent(meter(100, 50)) == 550.0  # 100 tokens × 5 + 50 trained
    assert not s.done(3, meter(100, 50))
    assert s.done(3, meter(100, 100))  # 600 reached
    assert s.done(1000, meter(0, 0))  # the iteration cap holds on any basis


def test_evaluations_come_every_n_iterations_and_at_each_compute_multiple() -> None:
    s = schedule(
        "train.iterations=100",
        "train.budget_basis=mu_5",
        "eval.every=10",
        "eval.every_compute=1000",
    )
    now = meter(180, 150)  # 1050 spent
    assert s.crossed(999.0, now) and not s.crossed(1000.0, now)
    assert s.eval_due(7, 999.0, now)  # crossed 1000
    assert not s.eval_due(7, 1001.0, now)
    assert s.eval_due(20, 1001.0, now)  # every 10 iterations
    assert s.eval_due(100, 1001.0, now)  # the last iteration
