"""What a method sees of the run it is in: μ, the policy version, the learner's statistics per
step and the fresh groups per round.

Every front end (the sync loop, the threaded and Ray learners, the TRL trainer) owns one
`RunSignals` and hands it to the method when it is built (`MethodContext.signals`); it feeds the
signals through this public interface, never by patching the method:

- `set_mu(value)`: the compute meter's measured μ, each time it changes (under Ray the driver
  sends it with every learner call, since the meter lives there);
- `record_step(sample, metrics)`: after every gradient step, the learner's metrics for it;
- `record_round(fresh)`: each round of fresh rollouts the method is given (the pipeline does
  this in `batches`, so every front end that drives rounds feeds it alike);
- `set_policy_version(version)`;
- `set_progress(fraction)`: how far through its budget the run is (`RunSchedule.progress`), with
  μ before each round.

A method reads `mu`, `progress`, `policy_version`, `step` (the last step's statistics), `mean(key)` (their
exponentially weighted means, half-life `HALF_LIFE` steps), `first(key)` (the first value seen,
e.g. the starting entropy), `round` (the last round's statistics), the `steps` / `rounds`
counts, and `trained_tokens` (the completion tokens of every trained sample, summed, for a
method that weighs what training costs). The statistics are plain floats under short names
(`STEP_KEYS`, plus `age_mean`, `replayed_fraction`, `stale_fraction` and `completion_length`
from the trained sample), so a
method does not depend on the learner's metric names; a statistic the learner did not report
this step (entropy without an entropy bonus, the clip fraction of a loss that does not clip, the
behaviour KL under TRL) is absent. `log_ratio_m2` is M2PO's second moment of the log importance
ratio over every trained token; fresh rows add about nothing to it, so over the stale rows alone
it is about `log_ratio_m2 / stale_fraction`. `cov_fresh` and `cov_replayed` are Cov(log π, A)
over the fresh and the replayed rows' trained tokens (Clip-Cov, arXiv 2505.22617: entropy falls
with it). `replay_cosine` is the cosine between a step's replayed rows' gradient and its fresh
rows' (`algorithms/gradient_alignment.py`; only when an option reads it). `sampled_nll` (the
trained tokens' mean negative log-probability under the current policy) and a round's `entropy`
(the same under the behaviour policy) are one-sample estimates of the policy's entropy that cost nothing extra.

`metrics()` puts their weighted means in the run's log as `signals/...`, so what a method saw
can be plotted beside what it did.

On a mixture of tasks (rows tagged with more than one task) the signals also hold each task's
own (issue #56): per round, `round.task_pass_rates` (the share of the task's fresh rows that are
correct); per step, `step_tasks[task]` with the task's `share` of the trained rows, its
`replayed_fraction` and `age_mean`; and `task_mean(task, key)`, their weighted means (key
`pass_rate`, `share`, `replayed_fraction`, `age_mean`), logged as `signals/task/<task>/<key>`.
A single-task run has none of them.

Decisions: the signals hold summaries, not rollouts (the table holds those); their state is
saved with the method's so that a resumed run's method reads what the uninterrupted one would.
A round's pass rates are per group, with a stable per-prompt key (`buffer.prompt_index.prompt_key`,
the key of a table's per-prompt index), so a method can follow prompts that recur across rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from llm_replay.buffer import Sample
from llm_replay.buffer.prompt_index import prompt_key
from llm_replay.data.batch import RolloutBatch

HALF_LIFE = 10.0
STEP_KEYS = {  # short name: the learner's metric
    "kl_behaviour": "loss/kl_behaviour",
    "ratio_mean": "loss/ratio",
    "ratio_max": "loss/ratio_max",
    "clip_fraction": "loss/clip_fraction",
    "log_ratio_m2": "loss/log_ratio_m2",
    "entropy": "loss/entropy",
    "sampled_nll": "loss/sampled_nll",
    "grad_norm": "loss/grad_norm",
    "head_grad_norm": "loss/head_grad_norm",
    "gated": "loss/gated",
    "loss": "loss/policy",
    "cov_fresh": "loss/cov_fresh",
    "cov_replayed": "loss/cov_replayed",
    "replay_cosine": "loss/replay_cosine",
}

LOGGED = (
    "kl_behaviour",
    "entropy",
    "sampled_nll",
    "clip_fraction",
    "log_ratio_m2",
    "stale_fraction",
    "grad_norm",
    "head_grad_norm",
    "cov_fresh",
    "cov_replayed",
)


@dataclass
class RoundStats:
    """One round of fresh rollouts, summarised: per group (in group order), its prompt key, pass
    rate and reward spread; and for the round, the mean reward, the share of groups whose
    rewards are all equal (no signal under group baselines) and the sampled tokens' mean
    negative log-probability under the behaviour policy (an unbiased estimate of its entropy)."""

    group_ids: list[int] = field(default_factory=list)
    prompt_keys: list[bytes] = field(default_factory=list)
    pass_rates: list[float] = field(default_factory=list)
    reward_mean: float = math.nan
    zero_variance_share: float = math.nan
    entropy: float = math.nan
    rollouts: int = 0
    task_pass_rates: dict[str, float] = field(default_factory=dict)  # a mixture's, per task

    @classmethod
    def of(cls, fresh: RolloutBatch) -> RoundStats:
        if len(fresh) == 0:
            return cls()
        groups, inverse = np.unique(fresh.group_ids, return_inverse=True)
        passed = np.where(fresh.correct >= 0, fresh.correct > 0, fresh.rewards > 0).astype(float)
        count = np.bincount(inverse, minlength=len(groups)).astype(float)
        pass_rates = np.bincount(inverse, weights=passed, minlength=len(groups)) / count
        first_row = np.zeros(len(groups), dtype=np.int64)
        first_row[inverse[::-1]] = np.arange(len(fresh))[::-1]
        starts = np.concatenate([[0], np.cumsum(fresh.prompt_lengths, dtype=np.int64)])
        tokens = fresh.behaviour_logprobs
        return cls(
            group_ids=[int(g) for g in groups],
            prompt_keys=[
                prompt_key(fresh.prompt_ids[starts[i] : starts[i + 1]]) for i in first_row
            ],
            pass_rates=[float(p) for p in pass_rates],
            reward_mean=float(fresh.rewards.mean()),
            zero_variance_share=float(fresh.uninformative_groups()[1].mean()),
            entropy=float(-tokens.mean()) if tokens.size else math.nan,
            rollouts=len(fresh),
            task_pass_rates=_per_task(fresh.task_codes, fresh.task_names, passed),
        )


def _task_rows(codes: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Each tagged task's rows (a boolean mask); empty unless rows of two or more tasks are
    present (a single-task run has no per-task signals)."""
    codes = np.asarray(codes)
    present = np.unique(codes)
    if len(present) < 2:
        return {}
    return {names[int(c)]: codes == c for c in present.tolist() if names[int(c)]}


def _per_task(codes: np.ndarray, names: tuple[str, ...], values: np.ndarray) -> dict[str, float]:
    """Each tagged task's mean of `values` over its rows (`_task_rows`)."""
    return {name: float(values[rows].mean()) for name, rows in _task_rows(codes, names).items()}


class RunSignals:
    """The run's signals for one method (see the module docstring)."""

    def __init__(self, half_life: float = HALF_LIFE) -> None:
        self.decay = 0.5 ** (1.0 / half_life)
        self.mu: float | None = None
        self.progress: float | None = None
        self.policy_version = 0
        self.steps = 0
        self.rounds = 0
        self.step: dict[str, float] = {}
        self.round = RoundStats()
        self.step_tasks: dict[str, dict[str, float]] = {}  # a mixture's, per task (docstring)
        self.trained_tokens = 0.0  # completion tokens of every trained sample, summed
        self._sums: dict[str, list[float]] = {}  # key: [weighted sum, weight]
        self._first: dict[str, float] = {}

    # ------------------------------------------------------------------ fed by the front end
    def set_mu(self, mu: float | None) -> None:
        self.mu = None if mu is None or not math.isfinite(mu) else float(mu)

    def set_policy_version(self, version: int) -> None:
        self.policy_version = int(version)

    def set_progress(self, fraction: float | None) -> None:
        """How far through its budget the run is, in [0, 1] (`RunSchedule.progress`); None where
        the front end does not know its budget."""
        if fraction is None or not math.isfinite(fraction):
            self.progress = None
        else:
            self.progress = min(1.0, max(0.0, float(fraction)))

    def record_step(self, sample: Sample, metrics: Mapping[str, float]) -> None:
        step = {
            short: float(metrics[name])
            for short, name in STEP_KEYS.items()
            if name in metrics and math.isfinite(float(metrics[name]))
        }
        if len(sample):
            step["age_mean"] = float(sample.ages.mean())
            step["replayed_fraction"] = float((sample.times_sampled > 1).mean())
            step["stale_fraction"] = float((sample.ages > 0).mean())
            step["completion_length"] = float(sample.completion_lengths.mean())
            self.trained_tokens += float(sample.completion_lengths.sum())
        for key, value in step.items():
            self._add(key, value)
        self.step = step
        self.step_tasks = _step_tasks(sample) if len(sample) else {}
        for task, stats in self.step_tasks.items():
            for key, value in stats.items():
                self._add(f"task/{task}/{key}", value)
        self.steps += 1

    def _add(self, key: str, value: float) -> None:
        total = self._sums.setdefault(key, [0.0, 0.0])
        total[0] = self.decay * total[0] + value
        total[1] = self.decay * total[1] + 1.0
        self._first.setdefault(key, value)

    def record_round(self, fresh: RolloutBatch) -> None:
        self.round = RoundStats.of(fresh)
        self.rounds += 1
        for task, rate in self.round.task_pass_rates.items():
            self._add(f"task/{task}/pass_rate", rate)
        for key, value in (
            ("round_reward_mean", self.round.reward_mean),
            ("round_entropy", self.round.entropy),
            ("round_zero_variance_share", self.round.zero_variance_share),
        ):
            if math.isfinite(value):
                self._first.setdefault(key, value)

    # ------------------------------------------------------------------ read by the method
    def mean(self, key: str) -> float | None:
        """The exponentially weighted mean of a step statistic, or None before it was seen."""
        total = self._sums.get(key)
        return None if total is None or total[1] == 0 else total[0] / total[1]

    def task_mean(self, task: str, key: str) -> float | None:
        """A task's weighted mean of `pass_rate` (per round), `share`, `replayed_fraction` or
        `age_mean` (per step), or None before the task was seen (or in a single-task run)."""
        return self.mean(f"task/{task}/{key}")

    def tasks(self) -> list[str]:
        """The tasks the signals have seen, in the order they first appeared."""
        seen = (k.split("/")[1] for k in self._sums if k.startswith("task/"))
        return list(dict.fromkeys(seen))

    def first(self, key: str) -> float | None:
        """The first value seen of a step statistic or of `round_<stat>` (the run's start)."""
        return self._first.get(key)

    def metrics(self) -> dict[str, float]:
        """What the signals hold, for the run's log (`signals/...`): the counts, the weighted
        means of the learner's statistics, and the last round's summary."""
        out = {"signals/steps": float(self.steps), "signals/rounds": float(self.rounds)}
        if self.progress is not None:
            out["signals/progress"] = self.progress
        for key in LOGGED:
            value = self.mean(key)
            if value is not None:
                out[f"signals/{key}"] = value
        for key, total in self._sums.items():
            if key.startswith("task/") and total[1] > 0:
                out[f"signals/{key}"] = total[0] / total[1]
        if self.rounds:
            for key in ("zero_variance_share", "entropy", "reward_mean"):
                value = getattr(self.round, key)
                if math.isfinite(value):
                    out[f"signals/round_{key}"] = value
        return out

    # ------------------------------------------------------------------ persistence
    def state(self) -> dict[str, Any]:
        return {
            "mu": self.mu,
            "progress": self.progress,
            "policy_version": self.policy_version,
            "steps": self.steps,
            "rounds": self.rounds,
            "trained_tokens": self.trained_tokens,
            "step": dict(self.step),
            "step_tasks": {k: dict(v) for k, v in self.step_tasks.items()},
            "round": {
                **{k: _json(v) for k, v in asdict(self.round).items()},
                "prompt_keys": [q.hex() for q in self.round.prompt_keys],
            },
            "sums": {k: list(v) for k, v in self._sums.items()},
            "first": dict(self._first),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.mu = None if state["mu"] is None else float(state["mu"])
        self.set_progress(state.get("progress"))
        self.policy_version = int(state["policy_version"])
        self.steps, self.rounds = int(state["steps"]), int(state["rounds"])
        self.trained_tokens = float(state.get("trained_tokens", 0.0))  # absent before #38
        self.step = {str(k): float(v) for k, v in state["step"].items()}
        self.step_tasks = {  # absent before #56
            str(t): {str(k): float(v) for k, v in stats.items()}
            for t, stats in state.get("step_tasks", {}).items()
        }
        saved: dict[str, Any] = {k: math.nan if v is None else v for k, v in state["round"].items()}
        saved["prompt_keys"] = [bytes.fromhex(q) for q in saved["prompt_keys"]]
        self.round = RoundStats(**saved)
        self._sums = {str(k): [float(x) for x in v] for k, v in state["sums"].items()}
        self._first = {str(k): float(v) for k, v in state["first"].items()}


def _step_tasks(sample: Sample) -> dict[str, dict[str, float]]:
    """Per tagged task of a trained sample (`_task_rows`): its share of the rows, replayed
    fraction and mean age."""
    return {
        name: {
            "share": float(rows.mean()),
            "replayed_fraction": float((sample.times_sampled[rows] > 1).mean()),
            "age_mean": float(sample.ages[rows].mean()),
        }
        for name, rows in _task_rows(sample.task_codes, sample.task_names).items()
    }


def _json(value: Any) -> Any:
    """NaN as null: saved state is strict JSON."""
    return None if isinstance(value, float) and math.isnan(value) else value
