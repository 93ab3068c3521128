"""Recipes: one name for a whole replay setup (a method, its knobs, its options and its loss).

A user who wants replay that pays without reading the papers picks a recipe by name, as the
replay method: `replay.method: auto` in a config, `replay_method="auto"` in TRL,
`sampler_kwargs.method=auto` in verl. A recipe is resolved when the config is read: the resolved
config, and so every saved protocol and archived run, records its parts (`replay.method:
positive`, `replay.anneal.mode: schedule`, `algorithm.loss: asymre`), never the recipe's name.
Settings the user gives win over the recipe's, knob by knob; the recipe's loss is used only where
the user names no loss (its knobs belong to that loss).

`auto` is the combination issue #28 chose (docs/RESULTS.md, "Replay that holds to the plateau"):
positive-biased replay with AsymRE, annealed to on-policy by a schedule (full replay until 10% of
the budget, on-policy from 60%). On both built-in tasks it ends at or above on-policy GRPO's
plateau, is never below on-policy's seed band at equal μ = 5 compute after the first tenth of the
budget, and reaches on-policy's final accuracy with less of its compute (the figures are in
RESULTS, generated from the archived runs), where positive-biased replay alone flattened below
on-policy on spell_backward. The schedule needs the run's length: a compute budget or an
iteration count here, `max_steps` in TRL, `total_training_steps` in verl.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from llm_replay.config.parse import merged

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    evidence: str
    replay: dict[str, Any]
    algorithm: dict[str, Any] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return str(self.replay["method"])

    @property
    def loss(self) -> str | None:
        loss = self.algorithm.get("loss")
        return None if loss is None else str(loss)

    def parts(self) -> list[tuple[str, Any]]:
        """(dotted setting, value) for everything the recipe sets, as `--set` would name it."""
        out: list[tuple[str, Any]] = []
        for section, values in (("replay", self.replay), ("algorithm", self.algorithm)):
            for key, value in values.items():
                if isinstance(value, dict):
                    out += [(f"{section}.{key}.{k}", v) for k, v in value.items()]
                else:
                    out.append((f"{section}.{key}", value))
        return out

    def describe(self) -> dict[str, Any]:
        """What `llm-replay methods` lists for a recipe (its parts in place of knobs)."""
        return {
            "name": self.name,
            "kind": "recipe",
            "description": self.description,
            "paper": self.evidence,
            "knobs": [{"name": name, "default": value} for name, value in self.parts()],
        }


RECIPES: dict[str, Recipe] = {
    "auto": Recipe(
        name="auto",
        description=(
            "The recommended default: positive-biased replay with AsymRE, annealed to on-policy "
            "between 10% and 60% of the run."
        ),
        evidence=(
            "docs/RESULTS.md, issue #28: ends at or above on-policy's plateau on chain_sum and "
            "spell_backward with less of its compute"
        ),
        replay={
            "method": "positive",
            "capacity": 1024,
            "delta": 0.5,
            "replay_ratio": 2.0,
            "anneal": {"enabled": True, "mode": "schedule", "start": 0.1, "end": 0.6},
        },
        algorithm={
            "advantage": "dr_grpo",
            "loss": "asymre",
            "delta_v": -0.1,
            "aggregation": "token_mean",
        },
    ),
}


def resolve_replay(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a `replay:` mapping) with a recipe's name replaced by its method, knobs and
    options; the user's own knobs and option settings win. Anything else comes back as it is."""
    recipe = RECIPES.get(str(data.get("method")))
    if recipe is None:
        return data
    return merged(recipe.replay, {k: v for k, v in data.items() if k != "method"})


def resolve(data: dict[str, Any]) -> dict[str, Any]:
    """A whole config mapping with its `replay.method` recipe resolved: the replay part as
    `resolve_replay` does, and the recipe's loss with its knobs where the user names no loss."""
    replay = data.get("replay")
    if not isinstance(replay, dict) or str(replay.get("method")) not in RECIPES:
        return data
    recipe = RECIPES[str(replay["method"])]
    out = {**data, "replay": resolve_replay(replay)}
    algorithm = data.get("algorithm")
    if algorithm is None or (isinstance(algorithm, dict) and "loss" not in algorithm):
        out["algorithm"] = merged(recipe.algorithm, algorithm or {})
    elif isinstance(algorithm, dict) and algorithm["loss"] != recipe.loss:
        log.warning(
            "replay.method = %r was measured with algorithm.loss = %r; this config trains with "
            "algorithm.loss = %r",
            recipe.name,
            recipe.loss,
            algorithm["loss"],
        )
    return out
