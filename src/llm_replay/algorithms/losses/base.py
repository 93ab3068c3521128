"""What a policy loss is: a registered class with its typed knobs, its paper and one signature.

A loss maps per-token inputs (`LossInputs`) to a per-token loss (the negative of the objective to
maximise) and its per-token diagnostics; `policy_loss` then applies per-rollout sampling weights
and aggregates. Notation per token t of rollout i: r = π_θ/π_behav, the ratio to the log-probs
stored when the rollout was generated; A_i the rollout's advantage (computed at generation, never
recomputed on reuse); sg = stop-gradient.

A loss class declares, beside its `__call__`: `name`, a one-line `description`, its `paper`, its
knobs as a `Config` dataclass (each field with help, validated by `check` with the knob's name;
the config loader reads them under `algorithm.<knob>`), `needs_proximal` (the learner then runs
a no-grad forward pass for π_prox), `advantage` (the estimator it requires, if any) and
`trl_loss` (what `ReplayGRPOTrainer` runs for it, if it can). `@register_loss` puts it in
`LOSSES`, from which the config loader, `llm-replay losses`, the learner and the TRL mapping all
read; adding a loss is one module in this package and one test.

The loss modules use tensor methods (`t.exp()`, `a.minimum(b)`) and import torch only for type
checking, so the registry — and the config loader that validates knobs against it — loads
without torch.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from torch import Tensor


class LossConfigError(ValueError):
    """A loss knob is out of range; the message starts with the knob's name."""


def knob(default: Any, help: str) -> Any:
    """A loss config field with the one-line help `llm-replay losses` prints."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class LossConfig:
    """Base of every loss's knobs (a loss without knobs uses it as it is)."""

    def check(self) -> None:
        """Raise `LossConfigError` naming the knob."""

    def __post_init__(self) -> None:
        self.check()


def non_negative(name: str, value: float | None, *, strict: bool = False) -> None:
    if value is None:
        return
    bad = not math.isfinite(value) or value < 0 or (strict and value == 0)
    if bad:
        raise LossConfigError(f"{name} = {value!r}: must be finite and {'>' if strict else '>='} 0")


@dataclass(frozen=True)
class ClipConfig(LossConfig):
    """PPO-style clip ε below and above 1; None takes the loss's documented default."""

    clip_low: float | None = knob(None, "ε_low: the ratio is clipped below at 1 − ε_low")
    clip_high: float | None = knob(None, "ε_high: the ratio is clipped above at 1 + ε_high")

    def check(self) -> None:
        non_negative("clip_low", self.clip_low)
        non_negative("clip_high", self.clip_high)


@dataclass(frozen=True)
class LossInputs:
    """logprobs, behaviour_logprobs, proximal_logprobs: [B, T]; advantages [B]; mask [B, T] float;
    replayed [B] bool (rows a method drew from its table rather than the fresh round)."""

    logprobs: Tensor
    behaviour_logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    proximal_logprobs: Tensor | None = None
    replayed: Tensor | None = None

    @property
    def log_ratio(self) -> Tensor:
        return (self.logprobs - self.behaviour_logprobs) * self.mask

    def sequence_log_ratio(self, log_ratio: Tensor) -> Tensor:
        """Length-normalised sequence log-ratio, broadcast to [B, T]."""
        lengths = self.mask.sum(-1).clamp(min=1)
        return ((log_ratio * self.mask).sum(-1) / lengths)[:, None].expand_as(self.mask)


class Loss(ABC):
    """Base of every policy loss (see the module docstring)."""

    name: ClassVar[str]
    description: ClassVar[str]
    paper: ClassVar[str]
    Config: ClassVar[type[LossConfig]] = LossConfig
    default_clip: ClassVar[tuple[float, float] | None] = None  # (ε_low, ε_high) of a clipped loss
    needs_proximal: ClassVar[bool] = False
    advantage: ClassVar[str | None] = None  # the advantage estimator it requires
    trl_loss: ClassVar[str | None] = None  # ReplayGRPOTrainer's `replay_loss` for it
    reads_behaviour: ClassVar[bool] = True  # its gradient reads the behaviour log-probs
    aggregation: ClassVar[str | None] = None  # the aggregation it requires, if any
    # its loss sums the whole rollout's log-ratio (a token floored by top-k/top-p truncation
    # would dominate it) and treats A as a regression target, not a weight (an option that
    # rescales advantages would move the target instead of weighting the row)
    regresses_sequence: ClassVar[bool] = False

    def __init__(self, settings: LossConfig | None = None) -> None:
        settings = settings if settings is not None else self.Config()
        if not isinstance(settings, self.Config):
            raise TypeError(f"settings = {settings!r}: expected {self.Config.__name__}")
        self.settings = settings

    @abstractmethod
    def __call__(self, x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
        """(per-token loss [B, T], per-token diagnostics by name)."""

    def clip_epsilons(self) -> tuple[float, float]:
        """(ε_low, ε_high): the knobs where set, else the loss's documented defaults."""
        assert self.default_clip is not None and isinstance(self.settings, ClipConfig)
        low, high = self.default_clip
        s = self.settings
        return (
            s.clip_low if s.clip_low is not None else low,
            s.clip_high if s.clip_high is not None else high,
        )

    def clip_range(self) -> tuple[float, float]:
        """(1 − ε_low, 1 + ε_high), the bounds the ratio is clipped to."""
        low, high = self.clip_epsilons()
        return 1.0 - low, 1.0 + high


def clipped_surrogate(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic surrogate (to minimise) and where the clip was active."""
    unclipped = ratio * adv
    clipped = ratio.clamp(low, high) * adv
    return -unclipped.minimum(clipped), (clipped < unclipped).float()


LOSSES: dict[str, type[Loss]] = {}


def register_loss(cls: type[Loss]) -> type[Loss]:
    if cls.name in LOSSES:
        raise ValueError(f"loss {cls.name!r} is registered twice")
    if cls.default_clip is not None and not issubclass(cls.Config, ClipConfig):
        raise TypeError(f"{cls.__name__}: a loss with default_clip needs a ClipConfig")
    LOSSES[cls.name] = cls
    return cls
