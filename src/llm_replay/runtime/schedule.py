"""When a run stops and when it evaluates: one public schedule for every front end.

The budget (`train.iterations`, and `train.compute_budget` on `train.budget_basis` or
`train.compute_seconds` measured) and the evaluation points (every `eval.every` iterations, and
each time the compute spent crosses a multiple of `eval.every_compute`) are read here and nowhere
else. `RunRecords.log_iteration` asks it after each train record: between iterations in our
runtimes, after each optimizer step in the TRL front end's trainer callback. So a budget or
evaluation rule added here holds under every runtime and under TRL alike, with no front end
reaching into another's private state.
"""

from __future__ import annotations

from llm_replay.config import Config
from llm_replay.metrics import ComputeMeter
from llm_replay.metrics.compute import cost_on_basis


class RunSchedule:
    """A run's budget and evaluation points, asked with the run's meter and iteration."""

    def __init__(self, config: Config) -> None:
        self.train, self.eval = config.train, config.eval

    def spent(self, meter: ComputeMeter) -> float:
        """Compute spent so far on `train.budget_basis` (the axis of budgets and eval points)."""
        return cost_on_basis(self.train.budget_basis, meter.metrics())

    def done(self, iteration: int, meter: ComputeMeter) -> bool:
        t = self.train
        if iteration >= t.iterations:
            return True
        if t.compute_seconds is not None and meter.total_seconds >= t.compute_seconds:
            return True
        return t.compute_budget is not None and self.spent(meter) >= t.compute_budget

    def progress(self, iteration: int, meter: ComputeMeter) -> float:
        """How far through its budget the run is, in [0, 1]: the furthest of the iteration,
        compute and measured-seconds budgets (what a replay schedule or controller reads)."""
        t = self.train
        fractions = [iteration / t.iterations]
        if t.compute_seconds is not None:
            fractions.append(meter.total_seconds / t.compute_seconds)
        if t.compute_budget is not None:
            fractions.append(self.spent(meter) / t.compute_budget)
        return min(1.0, max(fractions))

    def crossed(self, spent_before: float, meter: ComputeMeter) -> bool:
        """True when compute spent since `spent_before` crossed a multiple of
        `eval.every_compute`."""
        step = self.eval.every_compute
        return step is not None and int(self.spent(meter) // step) > int(spent_before // step)

    def eval_due(
        self,
        iteration: int,
        spent_before: float,
        meter: ComputeMeter,
        *,
        evaluated_at: int | None = None,
    ) -> bool:
        """After an iteration (or, where several records make one, a part of it) that began
        with `spent_before` spent: evaluate now? `evaluated_at`, the iteration last evaluated:
        an iteration's `eval.every` point is then due once (TRL logs a record per optimizer
        step, several a round)."""
        every = iteration % self.eval.every == 0 and iteration != evaluated_at
        return every or self.done(iteration, meter) or self.crossed(spent_before, meter)
