"""The callback that accounts for each optimizer step of `ReplayGRPOTrainer`: training seconds,
the method's `after_step` with the learner statistics TRL reports (under our names), and the
method's metrics in TRL's logs."""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

from llm_replay.frontend.metric_map import MetricMap
from llm_replay.learner import CovarianceSums

# the last optimizer step's learner statistics in TRL's metrics (lists), under our names; TRL
# reports no behaviour KL or ratio moments, so those are absent from the signals under TRL
TRL_STEP_METRICS = MetricMap(
    {"entropy": "loss/entropy", "clip_ratio/region_mean": "loss/clip_fraction"}
)
# what the method's signals get under TRL (`methods.signals.STEP_KEYS`' short names): TRL's two,
# and the covariances the trainer computes itself
TRL_REPORTS = frozenset({"entropy", "clip_fraction", "cov_fresh", "cov_replayed"})


class StepTimer(TrainerCallback):
    """Charges each optimizer step's wall time, less the generation inside it, to training, and
    adds the method's metrics to TRL's logged metrics on every step."""

    def __init__(self, trainer: Any) -> None:  # a ReplayGRPOTrainer
        self.trainer = trainer
        self.started = 0.0
        self.generation_before = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()
        self.generation_before = self.trainer._generation_seconds
        self.trainer._covariance = CovarianceSums()
        self.trainer._treated = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        t = self.trainer
        generation = t._generation_seconds - self.generation_before
        t.meter.add_seconds("training", max(0.0, time.perf_counter() - self.started - generation))
        t.meter.add(gradient_steps=1)
        if t.last_sample is not None:
            step = {**TRL_STEP_METRICS.read(t._metrics["train"]), **t._covariance.metrics()}
            t.host.after_step(t.last_sample, step)
        for key, value in t.replay_metrics().items():
            t._metrics["train"][key] = [value]  # a running total: log the latest, not a mean
