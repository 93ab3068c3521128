"""ExGRPO: replay the most confident correct trajectory of medium-difficulty questions.

After arXiv 2510.02245 (Zhan et al., "ExGRPO: Learning to Reason from Experience"):

- *Experience management.* Every fresh group updates its question's latest correctness rate (the
  share of its rollouts that are correct). The correct rollouts of partly solved groups are
  stored, keyed by question; a question whose latest group is all correct is retired (its
  trajectories leave the table and new ones are not stored).
- *Experience selection.* Questions are bucketed by their latest rate: low (0, 0.25], medium
  (0.25, 0.75], high (0.75, 1) (a rate of 0 counts as low). A bucket is drawn with probability
  ∝ exp(−(c − μ)² / 2σ²) at its centre c (μ = 0.5, σ = 1 as in the paper), then a question
  uniformly inside it, without replacement within a batch. Of the question's stored
  trajectories the one with the lowest mean surprisal −mean log π_behav(y_t) is replayed.
- *Mixed-policy optimisation.* Each round trains one batch: every fresh rollout plus
  round(ρ/(1−ρ) · fresh) replayed trajectories (ρ = 0.5: half the batch), drawn before the round's
  own successes are stored. Use `algorithm.loss: exgrpo` for the paper's policy shaping
  f(r) = r/(r + β) on the replayed rows (`Sample.sources == 1`).

Two deliberate departures, both because they need a forward pass we do not pay for: the paper
ranks a question's trajectories by their entropy under the *current* policy; we rank them by
their surprisal under the policy that generated them (its expectation is that policy's entropy
along the trajectory, and it needs no extra pass). And a replayed trajectory keeps the advantage
it was given in its own group, where the paper re-forms a group with K − 1 new rollouts of the
question; our front ends generate the prompts they choose, not the method.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.buffer import Sample
from llm_replay.buffer.prompt_index import batch_prompt_keys
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfig,
    MethodConfigError,
    MethodContext,
    ReplayMethod,
    knob,
    positive,
)
from llm_replay.methods.compose import round_half_up, with_source
from llm_replay.methods.registry import register
from llm_replay.methods.table_spec import TableSpec

BUCKET_EDGES = (0.25, 0.75)  # low (0, 0.25], medium (0.25, 0.75], high (0.75, 1)
BUCKET_CENTRES = (0.125, 0.5, 0.875)


def bucket_of(rate: float) -> int:
    """0 low, 1 medium, 2 high (a rate of 0 is low; an all-correct question is retired)."""
    return int(np.searchsorted(BUCKET_EDGES, rate, side="left"))


def bucket_weights(centre: float, sigma: float) -> npt.NDArray[np.float64]:
    """ExGRPO's Gaussian preference over the three buckets' centre rates."""
    c = np.asarray(BUCKET_CENTRES)
    return np.exp(-((c - centre) ** 2) / (2.0 * sigma**2))


def mean_surprisal(batch: RolloutBatch) -> npt.NDArray[np.float64]:
    """−mean_t log π_behav(y_t) of every rollout (0 for an empty completion)."""
    lengths = batch.completion_lengths.astype(np.int64)
    sums = np.add.reduceat(
        np.concatenate([batch.behaviour_logprobs.astype(np.float64), [0.0]]),
        np.concatenate([[0], np.cumsum(lengths)[:-1]]),
    )
    sums = np.where(lengths > 0, sums, 0.0)
    return -sums / np.maximum(lengths, 1)


@dataclass
class ExGRPOConfig(MethodConfig):
    capacity: int = knob(4096, "correct trajectories kept; the oldest leave first")
    experience_ratio: float = knob(0.5, "ρ: share of each batch that is replayed trajectories")
    centre: float = knob(0.5, "μ: the correctness rate the bucket weights favour")
    sigma: float = knob(1.0, "σ of the Gaussian bucket weight (the paper's 1 is nearly flat)")
    retire_solved: bool = knob(True, "stop replaying a question once a fresh group solves it all")

    def check(self) -> None:
        positive("capacity", self.capacity)
        positive("sigma", self.sigma)
        if not (math.isfinite(self.experience_ratio) and 0 <= self.experience_ratio < 1):
            raise MethodConfigError(
                f"experience_ratio = {self.experience_ratio!r}: must be in [0, 1)"
            )
        if not (math.isfinite(self.centre) and 0 <= self.centre <= 1):
            raise MethodConfigError(f"centre = {self.centre!r}: must be in [0, 1]")

    @property
    def samples_per_insert(self) -> float:
        return 1.0 / (1.0 - self.experience_ratio)


@register
class ExGRPO(ReplayMethod[ExGRPOConfig]):
    name = "exgrpo"
    description = "Lowest-surprisal success of medium-difficulty questions beside fresh groups."
    paper = "ExGRPO: learning to reason from experience, arXiv 2510.02245"
    Config = ExGRPOConfig
    trains_fresh_groups = True

    def __init__(self, settings: MethodConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.rates: dict[bytes, float] = {}
        self.retired: set[bytes] = set()
        self._surprisal: dict[int, float] = {}  # of each stored trajectory, by key
        self._rng = np.random.default_rng(context.seed + 2)
        self._weights = bucket_weights(self.exgrpo.centre, self.exgrpo.sigma)
        self.replayed_last = 0
        self.stored_last = 0

    @property
    def exgrpo(self) -> ExGRPOConfig:
        return self.settings

    @classmethod
    def table_spec(cls, settings: ExGRPOConfig, context: MethodContext) -> TableSpec:
        return TableSpec("uniform", settings.capacity, {"seed": context.seed, "name": "exgrpo"})

    # ------------------------------------------------------------------ one round
    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        fresh = RolloutBatch.coerce(fresh)
        ratio = self.exgrpo.experience_ratio
        want = round_half_up(ratio / (1.0 - ratio) * len(fresh))
        replayed = self.draw(want) if want else None
        self.observe(fresh)
        parts = [Sample.from_batch(fresh, current_version=self.table.policy_version)]
        if replayed is not None and len(replayed):
            parts.append(with_source(replayed, 1))
        self.replayed_last = 0 if replayed is None else len(replayed)
        yield Sample.concat(parts)

    def observe(self, fresh: RolloutBatch) -> None:
        """Update each question's latest rate; store correct rollouts of partly solved groups."""
        questions = batch_prompt_keys(fresh)
        surprisal = mean_surprisal(fresh)
        keep: list[int] = []
        for group in np.unique(fresh.group_ids).tolist():
            members = np.flatnonzero(fresh.group_ids == group)
            correct = fresh.correct[members] == 1
            question = questions[int(members[0])]
            rate = float(correct.mean())
            self.rates[question] = rate
            if rate >= 1.0 and self.exgrpo.retire_solved:
                self.retired.add(question)
                dropped = self.table.keys_for_prompt(question)
                if len(dropped):
                    self.table.remove(dropped)
            elif 0.0 < rate < 1.0 and question not in self.retired:
                keep.extend(members[correct].tolist())
        self.stored_last = len(keep)
        if len(self._surprisal) > 2 * self.table.max_rollouts:
            self._prune()
        if not keep:
            return
        rows = np.asarray(keep)
        keys = self.table.insert(fresh.select(rows))
        self._surprisal.update(zip(keys.tolist(), surprisal[rows].tolist(), strict=True))

    def draw(self, n: int) -> Sample | None:
        """Up to `n` trajectories of distinct questions, chosen as the module docstring says."""
        chosen = [
            min((self._surprisal[k], k) for k in self.table.keys_for_prompt(q).tolist())[1]
            for q in self._pick_questions(n)
        ]
        if not chosen:
            return None
        sample, _ = self.table.take(np.asarray(chosen, dtype=np.int64))
        return sample

    def _prune(self) -> None:
        """Forget the surprisal of trajectories the table has evicted (FIFO at capacity)."""
        keys = np.fromiter(self._surprisal, dtype=np.int64)
        for key in keys[~self.table.contains(keys)].tolist():
            del self._surprisal[key]

    def _pick_questions(self, n: int) -> list[bytes]:
        buckets: list[list[bytes]] = [[], [], []]
        for question in self.table.prompts():
            buckets[bucket_of(self.rates.get(question, 0.0))].append(question)
        for members in buckets:
            self._rng.shuffle(members)
        picked: list[bytes] = []
        while len(picked) < n:
            weights = self._weights * np.asarray([len(b) > 0 for b in buckets])
            if weights.sum() <= 0:
                break
            bucket = int(self._rng.choice(3, p=weights / weights.sum()))
            picked.append(buckets[bucket].pop())
        return picked

    def preload(self, rollouts: RolloutBatch) -> None:
        """Another run's rollouts update question rates and store successes, as a round would."""
        self.observe(RolloutBatch.coerce(rollouts))

    # ------------------------------------------------------------------ bookkeeping
    def metrics(self) -> dict[str, float]:
        counts = [0, 0, 0]
        for question in self.table.prompts():
            counts[bucket_of(self.rates.get(question, 0.0))] += 1
        return {
            **super().metrics(),
            "exgrpo/questions_low": float(counts[0]),
            "exgrpo/questions_medium": float(counts[1]),
            "exgrpo/questions_high": float(counts[2]),
            "exgrpo/retired": float(len(self.retired)),
            "exgrpo/replayed_in_batch": float(self.replayed_last),
            "exgrpo/stored_last": float(self.stored_last),
        }

    def state(self) -> dict[str, Any]:
        return {
            "rates": {q.hex(): r for q, r in self.rates.items()},
            "retired": sorted(q.hex() for q in self.retired),
            "rng": dict(self._rng.bit_generator.state),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.rates = {bytes.fromhex(q): float(r) for q, r in state["rates"].items()}
        self.retired = {bytes.fromhex(q) for q in state["retired"]}
        self._rng.bit_generator.state = state["rng"]

    def load(self, directory: Path) -> None:
        super().load(directory)
        keys = self.table.storage.keys_of(self.table.storage.live_in_order())
        stored, _ = self.table.get_batch(keys)
        self._surprisal = dict(zip(keys.tolist(), mean_surprisal(stored).tolist(), strict=True))
