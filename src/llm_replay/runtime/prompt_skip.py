"""Do not generate what will teach nothing: skip prompts whose recent groups were uninformative.

After GRESO (arXiv 2506.02177): under group baselines a group whose rewards are all equal (all
right or all wrong) has zero advantage, so generating it is paid for and teaches nothing, and
42–54% of the groups our methods generate are such groups (docs/RESULTS.md). Whether a prompt's
group is uninformative is strongly consistent from one epoch to the next, so a prompt whose last
`after` groups were all uninformative is skipped before generation; a skipped prompt is re-tested
with probability min(1, `retest` × (1 + its skips since it was last tried)), which grows with time
since the last try, so a prompt that becomes learnable comes back. This needs prompts that recur:
a fixed train set trained for epochs (`task.train_size`).

The loop asks `choose` which of the next prompts of its seeded order to generate and draws more
until a round is full; a skipped prompt is consumed for that epoch. The meter counts only what is
generated. The re-tests are a random sample of the prompts the rule would skip, so the share of
them that came back informative (`skip/retest_informative`) estimates how often a skip was wrong.
State is JSON (per train prompt: uninformative streak and skips since last tried).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.config.prompts import PromptSkipConfig
from llm_replay.data.batch import RolloutBatch

I64 = npt.NDArray[np.int64]


def uninformative_groups(batch: RolloutBatch, group_ids: I64) -> npt.NDArray[np.bool_]:
    """For each of `group_ids`: were all its rollouts' rewards equal in `batch`?"""
    groups, flat = batch.uninformative_groups()
    return flat[np.searchsorted(groups, group_ids)]


class PromptSkipper:
    """Which train prompts to generate (see the module docstring)."""

    def __init__(self, settings: PromptSkipConfig, num_prompts: int, seed: int) -> None:
        self.settings = settings
        self.streak = np.zeros(num_prompts, dtype=np.int64)  # uninformative groups in a row
        self.skips = np.zeros(num_prompts, dtype=np.int64)  # skipped since last tried
        self.retesting = np.zeros(num_prompts, dtype=bool)
        self._rng = np.random.default_rng([seed, 31])
        self.counts = {"considered": 0, "skipped": 0, "retests": 0, "retest_informative": 0}

    def choose(self, candidates: I64) -> npt.NDArray[np.bool_]:
        """Which of `candidates` (train prompt indices) to generate now."""
        s = self.settings
        flagged = self.streak[candidates] >= s.after
        chance = np.minimum(1.0, s.retest * (1 + self.skips[candidates]))
        retest = flagged & (self._rng.random(len(candidates)) < chance)
        keep: npt.NDArray[np.bool_] = ~flagged | retest
        self.skips[candidates[~keep]] += 1
        self.retesting[candidates[retest]] = True
        self.counts["considered"] += len(candidates)
        self.counts["skipped"] += int((~keep).sum())
        return keep

    def observe(self, prompts: I64, uninformative: npt.NDArray[np.bool_]) -> None:
        """The groups generated for `prompts` were (un)informative."""
        retested = self.retesting[prompts]
        self.counts["retests"] += int(retested.sum())
        self.counts["retest_informative"] += int((retested & ~uninformative).sum())
        self.retesting[prompts] = False
        self.skips[prompts] = 0
        self.streak[prompts] = np.where(uninformative, self.streak[prompts] + 1, 0)

    def metrics(self) -> dict[str, float]:
        c = self.counts
        out = {f"skip/{k}": float(v) for k, v in c.items()}
        out["skip/rate"] = c["skipped"] / max(1, c["considered"])
        if c["retests"]:
            out["skip/retest_informative_share"] = c["retest_informative"] / c["retests"]
        return out

    def state(self) -> dict[str, Any]:
        return {
            "streak": self.streak.tolist(),
            "skips": self.skips.tolist(),
            "retesting": np.flatnonzero(self.retesting).tolist(),
            "rng": dict(self._rng.bit_generator.state),
            "counts": dict(self.counts),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        streak = np.asarray(state["streak"], dtype=np.int64)
        if streak.shape != self.streak.shape:
            raise ValueError(
                f"prompt skip state: {len(streak)} prompts saved, the task has {len(self.streak)}"
            )
        self.streak = streak
        self.skips = np.asarray(state["skips"], dtype=np.int64)
        self.retesting[:] = False
        self.retesting[np.asarray(state["retesting"], dtype=np.int64)] = True
        self._rng.bit_generator.state = state["rng"]
        self.counts = {k: int(v) for k, v in state["counts"].items()}
