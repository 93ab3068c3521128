"""`ReplayPipeline`: a method plus the options turned on for it — the one object a front end drives.

Every front end (the sync loop, the asynchronous learners, the TRL trainer) holds a pipeline and
calls, per round of fresh rollouts, `batches(fresh)`; after each gradient step, `observe_step`
and `set_policy_version`; after the round, `restart_due()`; and `signals.set_mu` with the run's
measured μ before a round. The pipeline feeds the method's `RunSignals` from these calls.
Options transform the round before the method sees it (`prepare`) and each sample it yields
(`adjust`), in the order they were registered.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_replay.buffer import ReplayTable, Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    AsyncMode,
    MethodConfig,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
)
from llm_replay.methods.registry import OPTIONS, method_class

OPTIONS_DIR = "options"
PIPELINE_FILE = "pipeline.json"
PRELOADED_GROUPS = 1 << 40  # group ids of preloaded rollouts start here, clear of the run's own


def async_mode(method: type[ReplayMethod[Any]], with_options: bool) -> AsyncMode:
    """How a method runs asynchronously: its own mode, or "rounds" when an option is on (options
    transform whole rounds, and their state and versions then live with the learner)."""
    return "rounds" if with_options else method.async_mode()


def workers_fill_table(method: type[ReplayMethod[Any]], with_options: bool) -> bool:
    """Whether the workers fill the method's table and the learner samples it at the replay
    ratio (async mode "table"), as opposed to delivering whole rounds, for a runtime's refusals."""
    return async_mode(method, with_options) == "table"


class ReplayPipeline:
    def __init__(
        self, method: ReplayMethod[Any], options: Sequence[MethodOption[Any]] = ()
    ) -> None:
        for option in options:
            refusal = option.refusal(type(method))
            if refusal is not None:
                raise ValueError(
                    f"option {option.name!r}: not with method {method.name!r} ({refusal})"
                )
        self.method = method
        self.options = list(options)
        for option in self.options:
            option.bind(method)
        self.signals = method.context.signals
        self.version_offset = 0  # the source table's version when started from one (init_from)
        self.preloaded = 0

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

    def parts(self) -> list[ReplayMethod[Any] | MethodOption[Any]]:
        """The method and its options, each of which may keep rollouts (`stored_tables`)."""
        return [self.method, *self.options]

    def async_mode(self) -> AsyncMode:
        return async_mode(type(self.method), bool(self.options))

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        for option in self.options:
            fresh = option.prepare(fresh)
        return fresh

    def batches(self, fresh: RolloutBatch) -> Iterator[Sample]:
        self.signals.record_round(fresh)
        fresh = self.prepare(fresh)
        if self.version_offset:
            fresh = dataclasses.replace(
                fresh, policy_versions=fresh.policy_versions + self.version_offset
            )
        samples = self.method.batches(fresh)
        adjusting = [option for option in self.options if option.adjusts_samples]
        return self._adjusted(samples, adjusting) if adjusting else samples

    @staticmethod
    def _adjusted(samples: Iterator[Sample], options: list[MethodOption[Any]]) -> Iterator[Sample]:
        for sample in samples:
            for option in options:
                sample = option.adjust(sample)
            yield sample

    def preload(self, source: ReplayTable) -> int:
        """Start from `source`'s rollouts (`replay.init_from`). The run's versions continue from
        the source table's, so a stored rollout's age is how many updates before the source
        run's last one it was generated; its behaviour log-probs stay those of the policy that
        generated it, which is what the off-policy losses need. Returns how many were loaded."""
        refusal = self.method.preload_refusal
        if refusal is not None:
            raise ValueError(f"replay.init_from: not with method {self.method.name!r} ({refusal})")
        if self.preloaded or self.version_offset:
            raise ValueError("replay.init_from: this pipeline was already started from a table")
        keys = source.storage.keys_of(source.storage.live_in_order())
        self.version_offset = source.policy_version
        self.set_policy_version(0)
        if len(keys):
            batch, _ = source.get_batch(keys)
            batch = dataclasses.replace(batch, group_ids=batch.group_ids + PRELOADED_GROUPS)
            self.method.preload(batch)
        self.preloaded = len(keys)
        return self.preloaded

    def observe_step(self, sample: Sample, metrics: Mapping[str, float]) -> None:
        """After each gradient step: the signals record the learner's statistics, then the
        method and the options see them (a method whose table lives elsewhere, "table" mode, is
        not called)."""
        self.signals.record_step(sample, metrics)
        self.method.observe_step(sample, metrics)
        for option in self.options:
            option.observe_step()

    def set_policy_version(self, version: int) -> None:
        self.signals.set_policy_version(version + self.version_offset)
        self.method.set_policy_version(version + self.version_offset)
        for option in self.options:
            option.set_policy_version(version + self.version_offset)

    def restart_due(self) -> bool:
        return self.method.restart_due()

    def metrics(self) -> dict[str, float]:
        out = {**self.method.metrics(), **self.signals.metrics()}
        if self.preloaded:
            out["replay/preloaded"] = float(self.preloaded)
        for option in self.options:
            out.update(option.metrics())
        return out

    def save(self, directory: Path) -> None:
        self.method.save(directory)
        state = {
            "version_offset": self.version_offset,
            "preloaded": self.preloaded,
            "signals": self.signals.state(),
        }
        (directory / PIPELINE_FILE).write_text(json.dumps(state))
        for option in self.options:
            target = directory / OPTIONS_DIR / option.name
            target.mkdir(parents=True, exist_ok=True)
            option.save(target)

    def load(self, directory: Path) -> None:
        self.method.load(directory)
        if (directory / PIPELINE_FILE).is_file():
            state = json.loads((directory / PIPELINE_FILE).read_text())
            self.version_offset = int(state["version_offset"])
            self.preloaded = int(state["preloaded"])
            if "signals" in state:  # absent in checkpoints from before the signals
                self.signals.load_state(state["signals"])
        for option in self.options:
            option.load(directory / OPTIONS_DIR / option.name)
