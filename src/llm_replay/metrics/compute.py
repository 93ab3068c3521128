"""Compute accounting: seconds and work per role, FLOPs, and μ — the x-axis of every curve.

Roles are `generation`, `scoring` and `training` (training includes drawing batches from the
table, so the buffer's overhead is paid where it is incurred). Evaluation is not compute spent on
training and is not counted. FLOPs use the usual dense-transformer estimate: 2·P per token for a
forward pass, 6·P per token for forward + backward (P = parameters; attention terms ignored, which
undercounts long contexts). μ is generation cost per rollout generated (generation + scoring)
divided by training cost per rollout trained on, as measured here.

`generation_steps` counts the generator's batched forward passes (a prefill, then one per
position decoded). No basis charges it: the μ bases charge generated tokens, which is what a
step costs when batches are full, while a batch of few rows (adaptive rollouts' later stages)
pays a step's fixed cost, latency on a GPU, for fewer tokens. Issue #53 measured that share; the
counter lets a basis or a report charge it without changing what `mu_X` means.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

ROLES = ("generation", "scoring", "training")
COUNTS = (
    "prompts_generated",
    "rollouts_generated",
    "tokens_generated",
    "prompt_tokens",
    "padded_generation_tokens",
    "reward_calls",
    "reward_model_tokens",
    "reward_model_train_tokens",
    "rollouts_trained",
    "tokens_trained",
    "completion_tokens_trained",
    "forward_only_tokens",
    "gradient_steps",
    "annotations",
    "annotation_failures",
    "generation_steps",
)


@dataclass
class ComputeMeter:
    parameters: int = 0
    reward_model_parameters: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ROLES, 0.0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    @contextmanager
    def time(self, role: str) -> Iterator[None]:
        if role not in self.seconds:
            raise ValueError(f"role = {role!r}: choose one of {ROLES}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[role] += time.perf_counter() - start

    def add_seconds(self, role: str, seconds: float) -> None:
        """Charge `seconds` measured elsewhere (another thread or process) to `role`."""
        if role not in self.seconds:
            raise ValueError(f"role = {role!r}: expected one of {sorted(self.seconds)}")
        if not seconds >= 0:
            raise ValueError(f"seconds = {seconds!r}: must be >= 0")
        self.seconds[role] += float(seconds)

    def add(self, **counts: int) -> None:
        for name, value in counts.items():
            if name not in self.counts:
                raise ValueError(f"count {name!r}: choose one of {COUNTS}")
            self.counts[name] += int(value)

    def add_training_step(self, rollouts: int, step: Mapping[str, float]) -> None:
        """Count one gradient step on `rollouts` rollouts from the learner's step metrics."""
        self.add(
            rollouts_trained=rollouts,
            tokens_trained=int(step["train/tokens"]),
            completion_tokens_trained=int(step["train/completion_tokens"]),
            forward_only_tokens=int(step["train/forward_only_tokens"]),
            gradient_steps=1,
        )

    def merge(self, other: ComputeMeter) -> None:
        """Add another meter's seconds and counts (a worker's, for one delivered item)."""
        for role, seconds in other.seconds.items():
            self.seconds[role] += seconds
        for name, value in other.counts.items():
            self.counts[name] += value

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def mu(self) -> float | None:
        """Generation + scoring seconds per rollout generated ÷ training seconds per rollout trained."""
        c = self.counts
        if not (c["rollouts_generated"] and c["rollouts_trained"] and self.seconds["training"]):
            return None
        gen = (self.seconds["generation"] + self.seconds["scoring"]) / c["rollouts_generated"]
        return gen / (self.seconds["training"] / c["rollouts_trained"])

    @property
    def flops(self) -> dict[str, float]:
        c, p = self.counts, float(self.parameters)
        generation = 2 * p * (c["prompt_tokens"] + c["tokens_generated"])
        training = 6 * p * c["tokens_trained"] + 2 * p * c["forward_only_tokens"]
        rm = float(self.reward_model_parameters)
        scoring = 2 * rm * c["reward_model_tokens"] + 6 * rm * c["reward_model_train_tokens"]
        return {
            "generation": generation,
            "scoring": scoring,
            "training": training,
            "total": generation + scoring + training,
        }

    @property
    def reward_model_cost(self) -> float:
        """A learned reward model's forwards and retraining in training-token units (a trained
        policy token is 1): a forward token costs a third of a trained one, scaled by the two
        models' parameter counts (`cost_on_basis` adds this on the μ bases)."""
        if not self.parameters or not self.reward_model_parameters:
            return 0.0
        c, scale = self.counts, self.reward_model_parameters / self.parameters
        return scale * (c["reward_model_tokens"] / 3 + c["reward_model_train_tokens"])

    def cost(self, mu: float) -> float:
        """Cost basis: completion tokens generated × μ + completion tokens trained on × 1."""
        return cost_on_basis(f"mu_{mu:g}", self.metrics())

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {f"compute/{r}_seconds": s for r, s in self.seconds.items()}
        out["compute/seconds"] = self.total_seconds
        out.update({f"compute/{k}": float(v) for k, v in self.counts.items()})
        out["compute/flops"] = self.flops["total"]
        if self.reward_model_parameters:
            out["compute/reward_model_cost"] = self.reward_model_cost
        if self.mu is not None:
            out["compute/mu"] = self.mu
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters,
            "reward_model_parameters": self.reward_model_parameters,
            "seconds": dict(self.seconds),
            "counts": dict(self.counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.parameters = int(state["parameters"])
        self.seconds = {r: float(state["seconds"][r]) for r in ROLES}
        self.reward_model_parameters = int(state.get("reward_model_parameters", 0))
        self.counts = {k: int(state["counts"].get(k, 0)) for k in COUNTS}


def cost_on_basis(basis: str, metrics: dict[str, float]) -> float:
    """Compute spent so far on a labelled basis, from one logged record's `compute/...` fields.

    `measured`: seconds of generation + scoring + training on this machine.
    `rollouts`: rollouts generated.
    `annotations`: preference pairs an annotator was asked to judge (`preference` runs).
    `mu_X`: a cost model, completion tokens generated × X + completion tokens trained on × 1
    (c_gen / c_train = X = μ; prompts are not counted on either side), in training-token units,
    plus a learned reward model's cost in the same units (`ComputeMeter.reward_model_cost`).
    """
    if basis == "measured":
        return float(metrics["compute/seconds"])
    if basis == "rollouts":
        return float(metrics["compute/rollouts_generated"])
    if basis == "annotations":
        return float(metrics.get("compute/annotations", 0.0))
    if basis.startswith("mu_"):
        try:
            mu = float(basis[3:])
        except ValueError:
            raise ValueError(f"basis = {basis!r}: expected mu_<number>") from None
        generated = float(metrics["compute/tokens_generated"])
        trained = float(metrics["compute/completion_tokens_trained"])
        return generated * mu + trained + float(metrics.get("compute/reward_model_cost", 0.0))
    raise ValueError(f"basis = {basis!r}: choose measured, rollouts, annotations or mu_<number>")
