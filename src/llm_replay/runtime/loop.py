"""The run driver every front end shares: budgets, evaluation cadence, logging, checkpoints, summary.

Two layers, each a small set of abstract hooks:

- `RunRecords`: what every front end's run records, whoever drives the iterations. A front end
  supplies `steps`, `evaluate`, `reward_failures` (and optionally `extra_summary`, `close`);
  the driver gives it `log_iteration` (a train record, then an evaluation where the public
  schedule says one is due, `runtime/schedule.py`), `record_evaluation` and `summary`. The TRL
  front end is one: TRL's trainer drives the optimizer steps, and a trainer callback calls
  `log_iteration` after each.
- `RunLoop`: our own runtimes (`SyncTrainer`, `ThreadedTrainer`, `RayTrainer`), which supply one
  training iteration and checkpoint save/load as well; `RunLoop.run` drives them until the
  iteration or compute budget, and writes `summary.json`.

Keeping this in one place is what makes every front end's logs and summaries comparable.

Ctrl-C (SIGINT, on the main thread) is deferred: the first one lets the iteration and its
evaluation finish, saves a checkpoint at that boundary and stops (KeyboardInterrupt after the
save); a second one aborts at once, saving only if the loop is at a boundary it has not saved.
An evaluation that was due but not done when a checkpoint was taken is recorded in it
(`eval_pending`) and run first on resume, so a resumed run logs exactly what an uninterrupted one
does wherever the interrupt landed. Any failure to read a checkpoint on resume is a
`CheckpointError` naming what was wrong, raised before anything in the run directory changes.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.config import Config
from llm_replay.metrics import ComputeMeter, MetricsLogger, truncate_log
from llm_replay.runtime.layout import CHECKPOINT_DIR, CONFIG_FILE, METRICS_FILE, SUMMARY_FILE
from llm_replay.runtime.schedule import RunSchedule

log = logging.getLogger(__name__)


def summarise_steps(*sources: list[dict[str, float]]) -> dict[str, float]:
    """One iteration's record from per-step (and per-work-item) metrics: the mean of each key,
    the max of `..._max` keys, and how many gradient steps the last source holds."""
    record: dict[str, float] = {}
    for source in sources:
        for key in sorted({k for s in source for k in s}):
            values = [s[key] for s in source if key in s]
            record[key] = max(values) if key.endswith("_max") else sum(values) / len(values)
    record["train/steps_this_iteration"] = float(len(sources[-1]) if sources else 0)
    return record


class RunRecords(ABC):
    """The records of a run, for any front end (module docstring): subclasses set the attributes
    below (through `_init_loop`) and implement the hooks."""

    config: Config
    run_dir: Path
    meter: ComputeMeter
    iteration: int
    evals: list[dict[str, Any]]
    wall_start: float

    def _init_loop(self, config: Config, run_dir: Path | None) -> None:
        self.config = config
        self.run_dir = Path(run_dir) if run_dir is not None else config.run_dir
        self.iteration = 0
        self.evals = []
        self.wall_start = time.perf_counter()
        self.schedule = RunSchedule(config)
        self.eval_pending = False  # an evaluation was due at `iteration` and has not been logged
        self.at_boundary = True  # the current iteration's train record is logged
        self._stop_requested = False
        self._saved_at = -1  # the iteration of the last checkpoint this process wrote

    # ------------------------------------------------------------------ hooks
    @property
    @abstractmethod
    def steps(self) -> int:
        """Gradient steps taken (the learner's policy version)."""

    @abstractmethod
    def evaluate(self) -> dict[str, Any]:
        """The current weights' held-out metrics (`eval/...`)."""

    @abstractmethod
    def reward_failures(self) -> dict[str, int]:
        """Reward calls that failed or timed out, by kind, for the summary."""

    def load_checkpoint(self) -> None:
        """Restore the run from its checkpoint (a front end that resumes overrides it)."""
        raise CheckpointError(f"{self.run_dir}: this front end does not resume runs")

    def extra_summary(self) -> dict[str, Any]:
        """Runtime-specific fields for summary.json (the async runtimes add their accounting)."""
        return {}

    def close(self) -> None:  # noqa: B027 (a front end may hold nothing)
        """Release what the runtime holds (reward threads, workers, actors); called once at the end."""

    # ------------------------------------------------------------------ the records
    def log_iteration(
        self,
        record: dict[str, Any],
        spent_before: float,
        logger: MetricsLogger,
        *,
        evaluated_at: int | None = None,
    ) -> dict[str, Any]:
        """Log the train record of the iteration now at `self.iteration` (begun with
        `spent_before` of the budget's compute spent), then evaluate where the schedule says one
        is due (`evaluated_at`: the iteration last evaluated, for a front end that logs several
        records an iteration). Returns the record with the evaluation's fields."""
        self.at_boundary = False
        record = {
            "kind": "train",
            "iteration": self.iteration,
            "steps": self.steps,
            **record,
            **self.meter.metrics(),
        }
        logger.log(record)
        self.at_boundary = True
        due = self.schedule.eval_due(
            self.iteration, spent_before, self.meter, evaluated_at=evaluated_at
        )
        if due:
            record.update(self.record_evaluation(logger))
        return record

    def record_evaluation(self, logger: MetricsLogger) -> dict[str, Any]:
        """Evaluate the current weights, log the record and keep it for the summary."""
        self.eval_pending = True
        metrics = self.evaluate()
        record: dict[str, Any] = {
            "kind": "eval",
            "iteration": self.iteration,
            "steps": self.steps,
            **self.meter.metrics(),
            **metrics,
        }
        self.evals.append({"iteration": self.iteration, **record})
        logger.log(record)
        self.eval_pending = False
        return record

    def _prepare(self, resume: bool) -> None:
        if resume:  # a run directory with no checkpoint is refused before anything is written
            try:
                self.load_checkpoint()
            except CheckpointError:
                raise
            except Exception as error:  # a field missing or of the wrong type, a missing file
                raise CheckpointError(
                    f"{self.run_dir / CHECKPOINT_DIR}: cannot resume from it "
                    f"({type(error).__name__}: {error})"
                ) from None
        elif (self.run_dir / METRICS_FILE).exists():
            (self.run_dir / METRICS_FILE).unlink()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / CONFIG_FILE).write_text(
            yaml.safe_dump(self.config.to_dict(), sort_keys=False)
        )

    def summary(self) -> dict[str, Any]:
        first, last = self.evals[0], self.evals[-1]
        accuracies = [e["eval/accuracy"] for e in self.evals]
        return {
            "name": self.config.name,
            "runtime": self.config.runtime,
            "method": self.config.replay.method,
            "loss": self.config.algorithm.loss,
            "base_accuracy": first["eval/accuracy"],
            "final_accuracy": last["eval/accuracy"],
            "best_accuracy": max(accuracies),
            "final_eval": {k: v for k, v in last.items() if k.startswith("eval/")},
            "iterations": self.iteration,
            "steps": self.steps,
            "compute_seconds": {"total": self.meter.total_seconds, **self.meter.seconds},
            "mu": self.meter.mu,
            "flops": self.meter.flops,
            "counts": dict(self.meter.counts),
            "reward_failures": self.reward_failures(),
            "wall_seconds": time.perf_counter() - self.wall_start,
            "evals": [
                {
                    "iteration": e["iteration"],
                    "steps": e["steps"],
                    "compute_seconds": e["compute/seconds"],
                    "accuracy": e["eval/accuracy"],
                }
                for e in self.evals
            ],
            **self.extra_summary(),
        }


class RunLoop(RunRecords):
    """Our own runtimes' driver (module docstring): a runtime supplies one training iteration
    and checkpoint save/load besides the records' hooks; `run` drives them."""

    @abstractmethod
    def train_iteration(self) -> dict[str, Any]:
        """One round: generate (or take) fresh rollouts, train on the method's batches; the
        iteration's train record (without the loop's own fields)."""

    @abstractmethod
    def save_checkpoint(self) -> Path:
        """Write the run's state atomically; the checkpoint's directory."""

    @abstractmethod
    def load_checkpoint(self) -> None:
        """Restore the run from its checkpoint."""

    def run(
        self,
        *,
        resume: bool = False,
        on_iteration: Callable[[Any, dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Train until the iteration or compute budget; write summary.json; return it."""
        try:
            self._prepare(resume)
        except BaseException:  # a broken checkpoint, say: release workers and actors all the same
            self.close()
            raise
        logger = MetricsLogger(self.run_dir, tensorboard=self.config.log.tensorboard)
        ckpt = self.config.log.checkpoint_every
        self.at_boundary = True
        self._saved_at = -1
        try:
            with self._deferred_interrupt():
                if not self.evals or self.eval_pending:
                    self.record_evaluation(logger)
                self._stop_if_requested()
                while not self.schedule.done(self.iteration, self.meter):
                    self.at_boundary = False
                    spent_before = self.schedule.spent(self.meter)
                    record = self.log_iteration(self.train_iteration(), spent_before, logger)
                    if ckpt and self.iteration % ckpt == 0:
                        self._checkpoint()
                    if on_iteration is not None:
                        on_iteration(self, record)
                    self._stop_if_requested()
                if self.evals[-1]["iteration"] != self.iteration:
                    self.record_evaluation(logger)
                self._checkpoint()
                summary = self.summary()
        except KeyboardInterrupt:
            if self.at_boundary and self._saved_at != self.iteration and not self._stop_requested:
                self._checkpoint()  # an interrupt that did not come through our handler
            if self._saved_at == self.iteration:
                log.warning(
                    "interrupted after iteration %d; checkpoint saved, resume with --resume",
                    self.iteration,
                )
            else:
                log.warning("aborted; resume with --resume continues from the last checkpoint")
            raise
        finally:
            logger.close()
            self.close()
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
        return summary

    def _restore_loop(self, state: dict[str, Any]) -> None:
        """The loop's own fields from a checkpoint's state (checked with `LOOP_STATE`)."""
        self.iteration = int(state["iteration"])
        self.meter.load_state_dict(state["meter"])
        self.evals = list(state["evals"])
        self.eval_pending = bool(state.get("eval_pending", False))
        truncate_log(self.run_dir, self.iteration)
        log.info("resumed %s at iteration %d", self.run_dir, self.iteration)

    def _loop_state(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "meter": self.meter.state_dict(),
            "evals": self.evals,
            "eval_pending": self.eval_pending,
        }

    def _checkpoint(self) -> None:
        self.save_checkpoint()
        self._saved_at = self.iteration

    def _stop_if_requested(self) -> None:
        """At an iteration boundary: if Ctrl-C was pressed, checkpoint here and stop."""
        if self._stop_requested:
            if self._saved_at != self.iteration:
                self._checkpoint()
            raise KeyboardInterrupt

    @contextmanager
    def _deferred_interrupt(self) -> Iterator[None]:
        """First SIGINT: finish the iteration, then stop at its boundary. Second: abort now."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            log.warning(
                "Ctrl-C: stopping after this iteration and saving a checkpoint "
                "(press Ctrl-C again to abort now)"
            )

        previous = signal.signal(signal.SIGINT, request_stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
