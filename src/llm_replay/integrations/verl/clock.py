"""Ages in optimizer steps under verl, as everywhere else in llm-replay; a verl step's tally.

verl's policy version is its `global_steps`: one weight sync a step. A step runs
`parameter_sync_step` actor updates, each `ppo_epochs × rows / (ppo_mini_batch_size × n)`
optimizer steps, so a row one verl version old can be several optimizer steps old (four in the
example at replay ratio 2). llm-replay's own loop, TRL and the threaded and Ray runtimes count
optimizer steps (`Learner.version`), and a method's `max_age`, the staleness `compute_optimal`
fits and the table's age metrics mean optimizer steps. Counting weight syncs under verl alone
would make the same `max_age` mean a different horizon there, so the sampler keeps this clock:
it counts the optimizer steps verl's actor takes and records, each time a verl version is
published, how many had been taken; a trajectory's `min_global_steps` becomes the optimizer
steps its weights had seen. The rejected alternative, converting only `max_age`, would leave the
age metrics and the staleness fit in another unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class UpdateClock:
    """Optimizer steps taken, and how many had been taken when each verl version was published."""

    updates: int = 0
    published: dict[int, int] = field(default_factory=lambda: {0: 0})

    def advance(self, optimizer_steps: int) -> None:
        if optimizer_steps < 0:
            raise ValueError(f"optimizer_steps = {optimizer_steps}: must be >= 0")
        self.updates += optimizer_steps

    def publish(self, version: int) -> None:
        """verl's weights of `version` (its `global_steps` after that many steps) are out."""
        self.published.setdefault(version, self.updates)

    def at(self, version: int) -> int:
        """The optimizer steps the weights of verl `version` had seen (the latest version
        published at or before it; a version from before the clock started reads 0)."""
        if version in self.published:
            return self.published[version]
        earlier = [v for v in self.published if v <= version]
        return self.published[max(earlier)] if earlier else 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "published": {str(k): v for k, v in self.published.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])
        self.published = {int(k): int(v) for k, v in state["published"].items()}


@dataclass
class StepTally:
    """One verl step as the sampler sees it: its number, the updates (`sample` calls) still to
    come, and what it composed, counted over all of them (verl averages a step's updates'
    metrics, so a count is reported once, on the step's last update)."""

    number: int = 0
    calls_left: int = 0
    first_fresh_group: int = -1
    composed: bool = False
    fresh: int = 0
    refilled: int = 0
    trained: int = 0
    replayed: int = 0
