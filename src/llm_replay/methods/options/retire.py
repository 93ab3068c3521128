"""Retire mastered prompts: stop replaying a prompt's rollouts once fresh groups show it solved
(after BBG, arXiv 2606.15455, and MCPO, arXiv 2604.16972).

A prompt the policy now solves every time teaches nothing: its fresh group has zero variance, and
its stored successes, replayed, only sharpen what is already learned (and under AsymRE's shifted
baseline still pull on the policy). This option reads each round's per-prompt pass rates from the
run's signals (`RoundStats.prompt_keys`, `pass_rates`) and, once a prompt's fresh groups have
passed at `pass_rate` or above for `rounds` rounds in a row, removes every stored rollout of it
from the method's table through the table's per-prompt index, and keeps removing what the method
stores of it while it stays solved. A fresh group below `pass_rate` brings the prompt back.
Prompts must recur for this to matter: a fixed train set trained for epochs (`task.train_size`).
Logged: `retire/prompts` (retired now), `retire/removed` (rollouts removed so far).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_replay.checks import integer
from llm_replay.data.batch import RolloutBatch
from llm_replay.methods.base import (
    MethodConfigError,
    MethodContext,
    MethodOption,
    OptionConfig,
    ReplayMethod,
    knob,
)
from llm_replay.methods.registry import register_option


@dataclass
class RetireConfig(OptionConfig):
    pass_rate: float = knob(1.0, "a fresh group passing at this rate or above counts as solved")
    rounds: int = knob(1, "solved fresh groups in a row that retire a prompt")

    def check(self) -> None:
        if not (math.isfinite(self.pass_rate) and 0.0 < self.pass_rate <= 1.0):
            raise MethodConfigError(f"pass_rate = {self.pass_rate!r}: must be in (0, 1]")
        integer("rounds", self.rounds, minimum=1, error=MethodConfigError)


@register_option
class RetireMastered(MethodOption[RetireConfig]):
    name = "retire"
    description = "Stop replaying a prompt once its fresh groups show it solved."
    paper = "BBG, arXiv 2606.15455; MCPO, arXiv 2604.16972"
    Config = RetireConfig

    def __init__(self, settings: OptionConfig, context: MethodContext) -> None:
        super().__init__(settings, context)
        self.streak: dict[bytes, int] = {}
        self.removed = 0

    @classmethod
    def refusal(cls, method: type[ReplayMethod[Any]]) -> str | None:
        if method.consumes_rollouts:
            return "it trains on each rollout once and replays nothing"
        return None

    def prepare(self, fresh: RolloutBatch) -> RolloutBatch:
        stats = self.context.signals.round
        for prompt, rate in zip(stats.prompt_keys, stats.pass_rates, strict=True):
            if rate >= self.settings.pass_rate:
                self.streak[prompt] = self.streak.get(prompt, 0) + 1
            else:
                self.streak.pop(prompt, None)
        table = self.method.table
        for prompt in self.retired():
            keys = table.keys_for_prompt(prompt)
            if len(keys):
                self.removed += table.remove(keys)
        return fresh

    def retired(self) -> list[bytes]:
        return [q for q, n in self.streak.items() if n >= self.settings.rounds]

    def metrics(self) -> dict[str, float]:
        return {"retire/prompts": float(len(self.retired())), "retire/removed": float(self.removed)}

    def state(self) -> dict[str, Any]:
        return {"streak": {q.hex(): n for q, n in self.streak.items()}, "removed": self.removed}

    def load_state(self, state: dict[str, Any]) -> None:
        self.streak = {bytes.fromhex(q): int(n) for q, n in state["streak"].items()}
        self.removed = int(state["removed"])
