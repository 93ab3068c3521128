"""`ReplayPipeline`: a method plus the options turned on for it — the one object a front end drives.

Every front end (the sync loop, the asynchronous learners, the TRL trainer) holds a pipeline and
calls, per round of fresh rollouts, `batches(fresh)`; after each gradient step,
`set_policy_version`; after the round, `restart_due()`. Options transform the round before the
method sees it (`prepare`), in the order they were registered.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from llm_replay.buffer import Sample
from llm_replay.methods.base import (
    AsyncMode,
    MethodConfig,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
)
from llm_replay.methods.registry import OPTIONS, method_class
from llm_replay.rollout import RolloutBatch

OPTIONS_DIR = "options"


def async_mode(method: type[ReplayMethod], with_options: bool) -> AsyncMode:
    """How a method runs asynchronously: its own mode, or "rounds" when an option is on (options
    transform whole rounds, and their state and versions then live with the learner)."""
    return "rounds" if with_options else method.async_mode()


class ReplayPipeline:
    def __init__(self, method: ReplayMethod, options: Sequence[MethodOption] = ()) -> None:
        for option in options:
            refusal = option.refusal(type(method))
            if refusal is not None:
                raise ValueError(
                    f"option {option.name!r}: not with method {method.name!r} ({refusal})"
                )
        self.method = method
        self.options = list(options)

    @classmethod
    def build(
        cls,
        method: str,
        settings: MethodConfig,
        context: MethodContext,
        options: dict[str, OptionConfig] | None = None,
    ) -> ReplayPipeline:
        built = [
            OPTIONS[name](option, context)
            for name, option in (options or {}).items()
            if option.enabled
        ]
        return cls(method_class(method)(settings, context), built)

    @property
    def name(self) -> str:
        return self.method.name

    def async_mode(self) -> AsyncMode:
        return async_mode(type(self.method), bool(self.options))

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        for option in self.options:
            fresh = option.prepare(fresh)
        return fresh

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        return self.method.batches(self.prepare(fresh))

    def observe_step(self, sample: Sample, metrics: Mapping[str, float]) -> None:
        self.method.observe_step(sample, metrics)

    def set_policy_version(self, version: int) -> None:
        self.method.set_policy_version(version)
        for option in self.options:
            option.set_policy_version(version)

    def restart_due(self) -> bool:
        return self.method.restart_due()

    def metrics(self) -> dict[str, float]:
        out = self.method.metrics()
        for option in self.options:
            out.update(option.metrics())
        return out

    def save(self, directory: Path) -> None:
        self.method.save(directory)
        for option in self.options:
            target = directory / OPTIONS_DIR / option.name
            target.mkdir(parents=True, exist_ok=True)
            option.save(target)

    def load(self, directory: Path) -> None:
        self.method.load(directory)
        for option in self.options:
            option.load(directory / OPTIONS_DIR / option.name)
