"""Samplers: which stored rollouts a batch gets.

Each sampler keeps whatever index it needs, updated through `on_insert` / `on_remove` hooks that the
table calls under its lock, and answers `sample(n, rng, storage) -> (slots, probabilities)` where
`probabilities[i]` is the probability that one draw picks `slots[i]` (for importance weights).

| sampler | draws | source |
|---|---|---|
| `Uniform` | uniformly, never removing; within a batch with or without replacement | 2604.08706 |
| `Fifo` | the oldest stored rollouts (with `max_times_sampled=1`: the on-policy queue) | Reverb |
| `Prioritized` | P(i) ∝ (p_i + ε)^α, sum tree, IS weights (N·P)^-β / max | PER; 2606.04560 |
| `Recency` | weight 2^(-age / half_life), age in policy versions | — |
| `Groups` | whole groups (all stored rollouts of a prompt instance), uniformly (group_sampler.py) | GRPO |
| `Pairs` | whole preference pairs, uniformly, by recency or by margin (pair_sampler.py) | DPO |

What stays in a table is not a sampler's business: the eviction bounds (`buffer.eviction`) and
a remover (`buffer.removers`, e.g. positive-biased retention) decide that.

Priorities are sampling *masses* (p + ε)^α summed in float64; a mass outside
[`MIN_MASS`, `MAX_MASS`] is refused (naming the rollout), so the total can neither overflow nor
make the smallest probability underflow: every draw has a finite, positive probability and a
finite importance weight.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from llm_replay.buffer.storage import RolloutStorage
from llm_replay.buffer.sum_tree import SumTree
from llm_replay.data.batch import RolloutBatch

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
EMPTY = np.zeros(0, dtype=np.int64)

MAX_MASS = 1e100
"""Largest sampling mass (p + ε)^α of one rollout; with ~1e9 of them the sum stays finite."""

MIN_MASS = 1e-100
"""Smallest non-zero mass, so the smallest draw probability stays a normal float64."""


SAMPLERS: dict[str, type[Sampler]] = {}


class Sampler(ABC):
    """Base class; a subclass with a `name` registers itself in SAMPLERS (checkpoints rebuild
    samplers by that name)."""

    name: ClassVar[str]
    with_replacement: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if isinstance(name, str):
            if name in SAMPLERS and SAMPLERS[name] is not cls:
                raise ValueError(f"sampler name {name!r} is taken by {SAMPLERS[name].__name__}")
            SAMPLERS[name] = cls

    def bind(self, storage: RolloutStorage) -> None:
        """Called once by the table, before any insert."""
        self.storage = storage

    def on_insert(self, slots: I64) -> None:  # noqa: B027 - optional hook
        """New rollouts at `slots`."""

    def on_remove(self, slots: I64) -> None:  # noqa: B027 - optional hook
        """Rollouts at `slots` are about to be freed (still readable)."""

    def check_insert(self, batch: RolloutBatch) -> None:  # noqa: B027 - optional hook
        """Refuse (raise, naming the field) what this sampler cannot index; changes nothing."""

    def available(self) -> int:
        """How many rollouts one batch may draw without replacement."""
        return self.storage.size

    @abstractmethod
    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        """`n` slots and the per-draw probability of each."""

    def importance_weights(self, probabilities: F64) -> F64:
        """Per-item weights correcting for non-uniform sampling (1 for uniform samplers)."""
        return np.ones(len(probabilities), dtype=np.float64)

    def update_priorities(self, slots: I64, priorities: F64) -> None:
        raise TypeError(f"the {self.name!r} sampler has no priorities to update")

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-serialisable (checkpoint manifest)."""
        return {}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:  # noqa: B027
        """Restore from `state_arrays` (storage is already restored)."""


class Uniform(Sampler):
    """Uniform over stored rollouts; sampling never removes anything."""

    name = "uniform"

    def __init__(self, replacement: bool = True) -> None:
        self.replacement = bool(replacement)

    @property
    def with_replacement(self) -> bool:  # type: ignore[override]
        return self.replacement

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        size = self.storage.size
        picks = rng.integers(0, size, n) if self.replacement else rng.choice(size, n, replace=False)
        slots = self.storage.dense[picks].astype(np.int64)
        return slots, np.full(n, 1.0 / size)

    def config(self) -> dict[str, Any]:
        return {"replacement": self.replacement}


class Fifo(Sampler):
    """The oldest stored rollouts first; deterministic."""

    name = "fifo"
    with_replacement = False

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        slots = self.storage.oldest(n)
        return slots, np.ones(len(slots))


def _check_exponent(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} = {value!r}: must be finite and >= 0")
    return float(value)


class _TreeSampler(Sampler):
    """Draws proportionally to per-slot masses kept in a sum tree; subclasses decide the masses."""

    stratified: ClassVar[bool] = True

    def bind(self, storage: RolloutStorage) -> None:
        super().bind(storage)
        self.tree = SumTree(storage.capacity)

    def on_remove(self, slots: I64) -> None:
        self.tree.set(slots, 0.0)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[I64, F64]:
        slots = self.tree.sample(n, rng, stratified=self.stratified)
        return slots, self.tree.get(slots) / self.tree.total

    def _scalars(self) -> np.ndarray:
        """Scalar state saved beside the tree's leaves."""
        raise NotImplementedError

    def _load_scalars(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def state_arrays(self) -> dict[str, np.ndarray]:
        base = self.tree.leaf_base
        return {
            "leaves": self.tree.sums[base : base + self.storage.capacity].copy(),
            "scalars": self._scalars(),
        }

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        leaves = arrays["leaves"]
        live = np.zeros(self.storage.capacity, dtype=bool)
        live[self.storage.live_slots()] = True
        if (
            leaves.shape != (self.storage.capacity,)
            or not np.isfinite(leaves).all()
            or (leaves < 0).any()
            or (leaves > MAX_MASS).any()
            or (leaves[~live] != 0).any()
        ):
            raise ValueError(f"sampler leaves: must be {self.storage.capacity} masses in range")
        base = self.tree.leaf_base
        self.tree.sums[base : base + self.storage.capacity] = leaves
        self.tree.rebuild()  # internal nodes are always left + right, so this is exact
        self._load_scalars(arrays["scalars"])


class Prioritized(_TreeSampler):
    """P(i) ∝ (p_i + ε)^α, with importance weights (N·P(i))^-β normalised by their maximum.

    The priority of a new rollout defaults to |advantage| (frozen at birth, as in rollout-level
    advantage-prioritized replay); rollouts without an advantage get the largest priority seen.

    With `decay_steps` = τ the mass also decays with the rollout's age in policy versions,
    (p_i + ε)^α · exp(−age_i / τ) (FreshPER, arXiv 2604.16918: stored priorities go stale as the
    policy moves). All ages grow together, so relative masses depend only on each rollout's own
    version: the tree holds (p_i + ε)^α · exp((v_i − v_ref) / τ) and is rescaled when v_ref moves.
    """

    name = "prioritized"
    REBASE_AT = 50.0  # rescale once the newest exponent passes e^50

    def __init__(
        self,
        alpha: float = 0.5,
        beta: float = 0.4,
        epsilon: float = 1e-6,
        decay_steps: float | None = None,
    ) -> None:
        self.alpha = _check_exponent("alpha", alpha)
        self.beta = _check_exponent("beta", beta)
        if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon = {epsilon!r}: must be finite and > 0")
        self.epsilon = float(epsilon)
        if decay_steps is not None and not (math.isfinite(decay_steps) and decay_steps > 0):
            raise ValueError(f"decay_steps = {decay_steps!r}: must be finite and > 0 (or None)")
        self.decay_steps = None if decay_steps is None else float(decay_steps)
        if not MIN_MASS <= self._mass(np.zeros(1))[0] <= MAX_MASS:
            raise ValueError(
                f"epsilon ** alpha = {self.epsilon} ** {self.alpha}: the mass of a zero priority "
                f"must lie in [{MIN_MASS}, {MAX_MASS}]"
            )
        self.max_priority = 1.0
        self.reference = 0

    def _mass(self, priorities: F64) -> F64:
        with np.errstate(over="ignore"):
            return np.power(np.abs(priorities) + self.epsilon, self.alpha)

    def _decayed(self, slots: I64, priorities: F64) -> F64:
        mass = self._mass(priorities)
        if self.decay_steps is None:
            return mass
        exponent = (self.storage.policy_version[slots] - self.reference) / self.decay_steps
        with np.errstate(over="ignore", under="ignore"):
            return np.clip(mass * np.exp(exponent), MIN_MASS, MAX_MASS)

    def _check_priorities(self, field: str, priorities: F64) -> None:
        bad = ~np.isfinite(priorities) | (priorities < 0)
        bad |= ~(self._mass(np.where(bad, 0.0, priorities)) <= MAX_MASS)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{field.format(i)} = {float(priorities[i])!r}: a priority must be finite, >= 0 and "
                f"have (p + epsilon) ** alpha <= {MAX_MASS}"
            )

    def check_insert(self, batch: RolloutBatch) -> None:
        adv = np.asarray(batch.advantages)
        self._check_priorities("rollouts[{}].advantage", np.abs(np.where(np.isnan(adv), 0, adv)))

    def on_insert(self, slots: I64) -> None:
        adv = self.storage.advantage[slots]
        priorities = np.where(np.isnan(adv), self.max_priority, np.abs(adv))
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
            self._maybe_rebase(int(self.storage.policy_version[slots].max()))
        self.tree.set(slots, self._decayed(slots, priorities))

    def _maybe_rebase(self, newest: int) -> None:
        if (
            self.decay_steps is None
            or (newest - self.reference) / self.decay_steps < self.REBASE_AT
        ):
            return
        factor = math.exp(-(newest - self.reference) / self.decay_steps)
        self.reference = newest
        live = self.storage.live_slots()
        with np.errstate(under="ignore"):
            self.tree.set(live, np.clip(self.tree.get(live) * factor, MIN_MASS, MAX_MASS))

    def update_priorities(self, slots: I64, priorities: F64) -> None:
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != slots.shape:
            raise ValueError(f"priorities has shape {p.shape}, expected {slots.shape}")
        self._check_priorities("priorities[{}]", p)
        if len(p):
            self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.set(slots, self._decayed(slots, p))

    def importance_weights(self, probabilities: F64) -> F64:
        # (N P_i)^-β / max_j (N P_j)^-β = (P_i / P_min)^-β; P_min over every stored rollout.
        p_min = self.tree.min / self.tree.total
        return np.power(probabilities / p_min, -self.beta)

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"alpha": self.alpha, "beta": self.beta, "epsilon": self.epsilon}
        if self.decay_steps is not None:
            out["decay_steps"] = self.decay_steps
        return out

    def _scalars(self) -> np.ndarray:
        return np.array([self.max_priority, float(self.reference)])

    def _load_scalars(self, values: np.ndarray) -> None:
        self.max_priority = float(values[0])
        self.reference = int(values[1]) if len(values) > 1 else 0


class Recency(_TreeSampler):
    """Weight 2^(-age / half_life) with age = current policy version - the rollout's version.

    All ages grow together when the version advances, so relative weights depend only on each
    rollout's own version: mass 2^((v_i - v_ref) / half_life) in a sum tree, rebased when large.
    """

    name = "recency"
    stratified = False

    def __init__(self, half_life: float = 4.0) -> None:
        if not (math.isfinite(half_life) and half_life > 0):
            raise ValueError(f"half_life = {half_life!r}: must be finite and > 0")
        self.half_life = float(half_life)
        self.reference = 0

    def _mass(self, slots: I64) -> F64:
        exponent = (self.storage.policy_version[slots] - self.reference) / self.half_life
        return np.exp2(np.clip(exponent, -1000, None))

    def on_insert(self, slots: I64) -> None:
        if (
            len(slots)
            and (self.storage.policy_version[slots].max() - self.reference) / self.half_life > 500
        ):
            self.reference = int(self.storage.policy_version[slots].max())
            live = self.storage.live_slots()
            self.tree.set(live, self._mass(live))
        self.tree.set(slots, self._mass(slots))

    def config(self) -> dict[str, Any]:
        return {"half_life": self.half_life}

    def _scalars(self) -> np.ndarray:
        return np.array([self.reference], dtype=np.int64)

    def _load_scalars(self, values: np.ndarray) -> None:
        self.reference = int(values[0])


def make_sampler(name: str, **kwargs: Any) -> Sampler:
    """Build a sampler from its registry name (configs, checkpoints)."""
    try:
        cls = SAMPLERS[name]
    except KeyError:
        raise ValueError(f"sampler = {name!r}: expected one of {sorted(SAMPLERS)}") from None
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"sampler {name!r}: {error}") from None
