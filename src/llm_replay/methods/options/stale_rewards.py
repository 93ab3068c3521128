"""Stale rewards: what a replay method does with stored rollouts scored by an older reward model.

With a learned reward model that is retrained during the run (`reward_model.refresh_every`), a
stored reward belongs to a model that no longer exists: replaying it trains toward an old
objective, and a completion that found the old model's blind spot keeps being paid for it (the
reward-model staleness the replay papers name as the risk of reuse; iterative RLHF, e.g.
Xiong et al., arXiv 2312.11456, retrains the reward model on the current policy's samples). Each
rollout carries the version of the model that scored it (`RolloutBatch.reward_versions`); the
current version is the newest a fresh round carries. The policies:

- `keep`: replay stored rewards as they are (what every replay method does without this option).
- `evict`: at each round, remove every stored rollout scored by an older model.
- `rescore`: at each round, re-score up to `budget` stale rollouts (whole groups, oldest first)
  with the current model, recompute their group advantages over the group's rollouts still
  stored, set their success flags at the model's threshold and their version, in one call to the
  table (all or nothing: a model that fails midway leaves the table as it was, and the failure is
  counted). The forwards are charged to the run's compute by the front end that owns the model.
- `discount`: multiply a replayed rollout's advantage by 0.5^(age / `half_life`), its age being
  how many reward-model versions behind the current one it was scored.

Logged: `stale_rewards/stale` (stored rollouts scored by an older model at the last round),
`/evicted`, `/rescored`, `/rescore_failures` (totals) and `/discount` (the last batch's mean
factor).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.buffer import Sample
from llm_replay.checks import integer
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfigError,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
    knob,
)
from llm_replay.methods.registry import register_option

log = logging.getLogger(__name__)

POLICIES = ("keep", "evict", "rescore", "discount")
COUNTERS = ("evicted", "rescored", "rescore_failures")


@dataclass
class StaleRewardsConfig(OptionConfig):
    policy: str = knob("keep", "keep | evict | rescore | discount (module docstring)")
    budget: int = knob(256, "rescore: stale rollouts re-scored per round at most (whole groups)")
    half_life: float = knob(1.0, "discount: reward-model versions over which an advantage halves")

    def check(self) -> None:
        if self.policy not in POLICIES:
            raise MethodConfigError(f"policy = {self.policy!r}: choose one of {POLICIES}")
        integer("budget", self.budget, minimum=1, error=MethodConfigError)
        if not (math.isfinite(self.half_life) and self.half_life > 0):
            raise MethodConfigError(f"half_life = {self.half_life!r}: must be finite and > 0")


@register_option
class StaleRewards(MethodOption[StaleRewardsConfig]):
    name = "stale_rewards"
    description = "Keep, evict, re-score or discount stored rollouts an older reward model scored."
    paper = "iterative RLHF, arXiv 2312.11456; reward staleness under replay, arXiv 2604.08706"
    Config = StaleRewardsConfig
    adjusts_samples = True

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.current = 0
        self.stale = 0
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.discount: float | None = None

    @classmethod
    def needs_reward_model(cls, settings: OptionConfig) -> str | None:
        return "policy = 'rescore'" if getattr(settings, "policy", None) == "rescore" else None

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        if method.consumes_rollouts:
            return "it trains on each rollout once, so no stored reward is ever reused"
        return None

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        if len(fresh):
            self.current = max(self.current, int(fresh.reward_versions.max()))
        table = self.method.table
        stale = table.keys_scored_before(self.current)
        self.stale = len(stale)
        policy = self.settings.policy
        if policy == "evict" and len(stale):
            self.counts["evicted"] += table.remove(stale)
        elif policy == "rescore" and len(stale):
            self._rescore(stale)
        return fresh

    def _rescore(self, stale: np.ndarray) -> None:
        source = self.context.services.stored_rewards
        if source is None:
            raise RuntimeError(
                "stale_rewards.policy = 'rescore': this run lends no reward model to re-score "
                "with (task.reward = model in the sync runtime does)"
            )
        table = self.method.table
        batch, found = table.get_batch(stale)
        keys = stale[found]
        groups, first, sizes = np.unique(batch.group_ids, return_index=True, return_counts=True)
        oldest_first = np.argsort(first)  # the stale keys come in insertion order
        order, sizes = groups[oldest_first], sizes[oldest_first]
        take = max(1, int(np.searchsorted(np.cumsum(sizes), self.settings.budget, side="right")))
        rows = np.flatnonzero(np.isin(batch.group_ids, order[:take]))
        chosen = batch.select(rows)
        try:
            rewards = np.asarray(source.rescore(chosen), dtype=np.float64)
            if rewards.shape != (len(rows),) or not np.isfinite(rewards).all():
                raise ValueError(f"{rewards.shape} rewards for {len(rows)} rollouts")
        except Exception as error:  # the table stays as it was
            self.counts["rescore_failures"] += 1
            log.warning("stale_rewards: re-scoring %d rollouts failed: %s", len(rows), error)
            return
        advantages = group_advantages(rewards, chosen.group_ids, self.context.advantage)
        correct = (rewards >= source.success_threshold).astype(np.int64)
        versions = np.full(len(rows), source.version, dtype=np.int64)
        table.set_scores(keys[rows], rewards, advantages, correct, reward_versions=versions)
        self.counts["rescored"] += len(rows)

    def adjust(self, sample: Sample) -> Sample:
        if self.settings.policy != "discount":
            return sample
        age = np.maximum(self.current - sample.reward_versions, 0)
        factor = 0.5 ** (age / self.settings.half_life)
        self.discount = float(factor.mean()) if len(factor) else None
        if (factor == 1.0).all():
            return sample
        return dataclasses.replace(sample, advantages=sample.advantages * factor)

    def metrics(self) -> dict[str, float]:
        out = {"stale_rewards/stale": float(self.stale)}
        out.update({f"stale_rewards/{k}": float(v) for k, v in self.counts.items()})
        if self.discount is not None:
            out["stale_rewards/discount"] = self.discount
        return out

    def state(self) -> dict[str, Any]:
        return {"current": self.current, "stale": self.stale, **self.counts}

    def load_state(self, state: dict[str, Any]) -> None:
        self.current, self.stale = int(state["current"]), int(state["stale"])
        self.counts = {k: int(state[k]) for k in COUNTERS}
