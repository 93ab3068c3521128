"""A declared map from a trainer's metric names to the step signals a method reads.

Under llm-replay's loop the learner hands a method each gradient step's statistics under our
names (`methods.signals.STEP_KEYS`: `loss/clip_fraction`, `loss/entropy`, `loss/kl_behaviour`,
...). A trainer logs its own under its own names, as numbers or as lists of a step's values
(TRL). A front end declares which of its names is which of ours, and `MetricMap.read` does the
rest: the latest value of a list, numbers only, the first present of several candidates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def latest_number(value: Any) -> float | None:
    """`value` as a float (the last element of a non-empty list), None where it is not one."""
    if isinstance(value, list | tuple):
        if not value:
            return None
        value = value[-1]
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class MetricMap:
    """`names`: the trainer's metric → ours; `first_of`: ours → the trainer's candidates, the
    first one present read."""

    names: Mapping[str, str]
    first_of: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def read(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for theirs, ours in self.names.items():
            value = latest_number(metrics.get(theirs))
            if value is not None:
                out[ours] = value
        for ours, candidates in self.first_of.items():
            for theirs in candidates:
                value = latest_number(metrics.get(theirs))
                if value is not None:
                    out[ours] = value
                    break
        return out

    def __or__(self, other: MetricMap) -> MetricMap:
        return MetricMap({**self.names, **other.names}, {**self.first_of, **other.first_of})


NOT_REPORTED = (
    "it reads a statistic of the learner's step that this trainer does not report (the guard's "
    "replay-gradient reading is taken by llm-replay's own learner only), so it would never act"
)


def unreported_readings(
    options: Mapping[str, Any] | None, reported: frozenset[str]
) -> tuple[dict[str, Any], list[str]]:
    """What a method's options read of the learner (`OptionConfig.learner_readings`) that a
    trainer does not report (`reported`: `methods.signals.STEP_KEYS`' short names). Returns the
    settings to refuse, `option.knob` → value (a reading the user asked for that would never
    press: anneal's `clip_max` without a clip fraction), and the `option.statistic` readings on by
    default that stay silent, for a warning, since the option's other readings still work."""
    refused: dict[str, Any] = {}
    silent: list[str] = []
    for name, settings in (options or {}).items():
        if not getattr(settings, "enabled", False):
            continue
        for statistic, knob, value in settings.learner_readings():
            if statistic in reported:
                continue
            if knob is None:
                silent.append(f"{name}.{statistic}")
            else:
                refused[f"{name}.{knob}"] = value
    return refused, silent
