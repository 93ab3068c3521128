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


def unreported_readings(
    options: Mapping[str, Any] | None, reported: frozenset[str]
) -> tuple[dict[str, Any], list[str]]:
    """What a method's options read of the learner that a trainer does not report (`reported`:
    `methods.signals.STEP_KEYS`' short names). Returns the settings to refuse (a reading set by
    the user that would never press: anneal's `clip_max` without a clip fraction) and the
    readings on by default that stay silent (anneal's `m2` without the log-ratio's moment), for a
    warning, since the option's other readings still work. No option reads the step's entropy
    (anneal's entropy reading is the fresh rounds' behaviour NLL), so its absence is neither."""
    anneal = (options or {}).get("anneal")
    if anneal is None or not getattr(anneal, "enabled", False):
        return {}, []
    if getattr(anneal, "mode", None) != "signals":
        return {}, []
    refused: dict[str, Any] = {}
    clip_max = getattr(anneal, "clip_max", None)
    if clip_max is not None and "clip_fraction" not in reported:
        refused["anneal.clip_max"] = clip_max
    silent = [] if "log_ratio_m2" in reported else ["m2"]
    return refused, silent
