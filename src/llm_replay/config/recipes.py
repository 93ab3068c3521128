"""Recipes: one name for a whole replay setup (a method, its knobs, its options, its loss, and the
generation, token and gradient-step settings it was measured with).

A user who wants replay that pays without reading the papers picks a recipe by name, as the
replay method: `replay.method: auto` in a config, `replay_method="auto"` in TRL. A recipe is
resolved when the config is read: the resolved config, and so every saved protocol and archived
run, records its parts (`replay.method: positive`, `replay.anneal.mode: schedule`,
`algorithm.loss: asymre`, `generation.adaptive.enabled: true`, `train.batch_size: 128`), never
the recipe's name.
Settings the user gives win over the recipe's, knob by knob; the recipe's algorithm settings
(its loss, that loss's knobs and its token control) are used only where the user names no loss or
the recipe's own.

- `auto`, the recommended default since issue #38 (docs/RESULTS.md, "`auto_kl_cov_ar3po` on both
  built-in tasks"): `positive_schedule` with KL-Cov on the reused rows' top 5% tokens by
  covariance (arXiv 2505.22617) and AR3PO's adaptive rollouts (arXiv 2509.25808), and since
  issue #53 two gradient steps a round (`train.steps_per_round: 2`: four while replay runs at
  y = 2). At one step a round (the preset `auto_steps1`, the default from #38 to #53) it reached
  on-policy GRPO's final accuracy on chain_sum and spell_backward with 0.25× and 0.46× of its
  μ = 5 compute with its entropy and pass@8 kept, a suite median of 0.49× at ten seeds, but 0.99×
  of an on-policy tuned by a one-knob sweep (steps a round, learning rate, group size). At two
  it needs a median 0.54× of the tuned member's compute over ten tasks, 0.41× of plain
  on-policy's on the suite at ten seeds (0.49× at one step), no seed that never
  reaches on-policy's final accuracy where one step had three, and the same or less in the
  threaded and Ray runtimes and at the demo's budget; more on the four-task mixture (0.26×
  against 0.16×), where it no longer dips under on-policy's band (docs/RESULTS.md, "`auto`
  takes two gradient steps a round"). It runs in the sync loop and the threaded and Ray
  runtimes; in TRL the gradient step is TRL's own (adaptive rollouts there need one step a generation), so TRL's
  `auto` is the recipe's replay, loss, token control and adaptive rollouts at TRL's step. verl's
  trainer can run none of its generation, step and token-control parts, so verl refuses it by
  name and points to `positive_schedule` (`Recipe.beyond_replay`).
- `positive_schedule`, the default of issue #28 (`auto` until #38): positive-biased replay with
  AsymRE, annealed to on-policy by a schedule (full replay until 10% of the budget, on-policy
  from 60%). It needs 0.44× and 0.76× there and ends with less of on-policy's entropy.

A recipe's settings apply under the user's, setting by setting; a user who sizes the gradient step
(`train.steps_per_round`, or a `train.batch_size` other than the default) keeps their own step.

Both schedules need the run's length: a compute budget or an iteration count here, `max_steps`
in TRL, `total_training_steps` in verl.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from llm_replay.algorithms.token_control import TokenControl
from llm_replay.config.parse import merged
from llm_replay.config.steps import sizes_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    evidence: str
    replay: dict[str, Any]
    algorithm: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)

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
        sections = (
            ("replay", self.replay),
            ("algorithm", self.algorithm),
            ("generation", self.generation),
            ("train", self.train),
        )
        for section, values in sections:
            for key, value in values.items():
                if isinstance(value, dict):
                    out += [(f"{section}.{key}.{k}", v) for k, v in value.items()]
                else:
                    out.append((f"{section}.{key}", value))
        return out

    def token_control(self) -> dict[str, Any]:
        """The recipe's token control in `TokenControl`'s fields (TRL's `replay_token_control`);
        empty where it sets none."""
        fields = {"token_control": "mode", "control_rows": "rows", "control_fraction": "fraction"}
        fields |= {"control_coef": "coef", "control_low": "low", "control_high": "high"}
        fields |= {"positive_weight": "positive_weight"}
        out = {fields[k]: v for k, v in self.algorithm.items() if k in fields}
        return out if TokenControl(**out).active else {}

    def adaptive(self) -> dict[str, Any]:
        """The recipe's adaptive rollouts (`generation.adaptive`, TRL's `replay_adaptive`)."""
        return dict(self.generation.get("adaptive", {}))

    def beyond_replay(self) -> list[str]:
        """The recipe's parts a trainer that only samples rows and computes the loss cannot run:
        its generation settings, its gradient step and its token control."""
        out = [f"generation.{key}" for key in self.generation]
        out += [f"train.{key}" for key in self.train]
        if self.token_control():
            out.append(f"algorithm.token_control ({self.algorithm.get('token_control', 'off')})")
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


POSITIVE_SCHEDULE = Recipe(
    name="positive_schedule",
    description=(
        "The default of issue #28: positive-biased replay with AsymRE, annealed to on-policy "
        "between 10% and 60% of the run (replay and loss only; verl runs it)."
    ),
    evidence=(
        "docs/RESULTS.md, issue #28: ends at or above on-policy's plateau on chain_sum and "
        "spell_backward with 0.44x and 0.76x of its compute"
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
)

AUTO = Recipe(
    name="auto",
    description=(
        "The recommended default: positive_schedule with KL-Cov on the reused rows' top 5% "
        "tokens by covariance, AR3PO's adaptive rollouts (2 completions a prompt, 2 more while "
        "none is correct) and two gradient steps a round."
    ),
    evidence=(
        "docs/RESULTS.md, issues #38 and #53: 0.25x and 0.46x of on-policy's compute on "
        "chain_sum and spell_backward at one step a round, entropy and pass@8 kept; at two, a "
        "median 0.54x of a tuned on-policy's over ten tasks"
    ),
    replay=copy.deepcopy(POSITIVE_SCHEDULE.replay),
    algorithm={
        **POSITIVE_SCHEDULE.algorithm,
        "token_control": "kl_cov",
        "control_rows": "replayed",
        "control_fraction": 0.05,
        "control_coef": 1.0,
    },
    generation={"adaptive": {"enabled": True, "stage_size": 2, "reuse": True}},
    train={"steps_per_round": 2},
)

RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in (AUTO, POSITIVE_SCHEDULE)}


def recipe_hint(data: dict[str, Any], message: str) -> str:
    """Words for a config error about a setting a recipe supplied rather than the user, so the
    user learns where it came from and how to turn it off; empty otherwise."""
    replay = data.get("replay")
    recipe = RECIPES.get(str(replay.get("method"))) if isinstance(replay, dict) else None
    if recipe is None:
        return ""
    generation = data.get("generation")
    given = generation.get("adaptive") if isinstance(generation, dict) else None
    if recipe.adaptive() and given is None and "adaptive" in message:
        return (
            f" (replay.method {recipe.name!r} turns generation.adaptive on; set "
            "generation.adaptive.enabled=false to run without it)"
        )
    algorithm = data.get("algorithm")
    named = isinstance(algorithm, dict) and "token_control" in algorithm
    if recipe.token_control() and not named and "control" in message:
        return (
            f" (replay.method {recipe.name!r} sets algorithm.token_control = "
            f"{recipe.algorithm.get('token_control')!r}; set algorithm.token_control=off to run "
            "without it)"
        )
    return ""


def resolve_replay(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a `replay:` mapping) with a recipe's name replaced by its method, knobs and
    options; the user's own knobs and option settings win. Anything else comes back as it is."""
    recipe = RECIPES.get(str(data.get("method")))
    if recipe is None:
        return data
    return merged(recipe.replay, {k: v for k, v in data.items() if k != "method"})


def resolve(data: dict[str, Any]) -> dict[str, Any]:
    """A whole config mapping with its `replay.method` recipe resolved: the replay part as
    `resolve_replay` does; the recipe's algorithm settings (loss, its knobs, token control)
    under the user's where the user names no loss or the recipe's own (a token control of
    another mode drops the recipe's `control_*` knobs); its generation settings under the
    user's, setting by setting."""
    replay = data.get("replay")
    if not isinstance(replay, dict) or str(replay.get("method")) not in RECIPES:
        return data
    recipe = RECIPES[str(replay["method"])]
    out = {**data, "replay": resolve_replay(replay)}
    algorithm = data.get("algorithm")
    if algorithm is None or (
        isinstance(algorithm, dict) and algorithm.get("loss", recipe.loss) == recipe.loss
    ):
        own = recipe.algorithm
        mode = (algorithm or {}).get("token_control", own.get("token_control", "off"))
        if mode != own.get("token_control", "off"):  # the recipe's control knobs are its mode's
            own = {k: v for k, v in own.items() if not k.startswith("control_")}
        out["algorithm"] = merged(own, algorithm or {})
    elif isinstance(algorithm, dict):
        log.warning(
            "replay.method = %r was measured with algorithm.loss = %r; this config trains with "
            "algorithm.loss = %r, without the recipe's other algorithm settings%s",
            recipe.name,
            recipe.loss,
            algorithm["loss"],
            _what_changes(recipe, algorithm),
        )
    generation = data.get("generation")
    if recipe.generation and (generation is None or isinstance(generation, dict)):
        out["generation"] = merged(recipe.generation, generation or {}, ("generation",))
    return resolve_train(out, recipe)


def resolve_train(data: dict[str, Any], recipe: Recipe | None = None) -> dict[str, Any]:
    """`data` with its recipe's gradient step (`train.steps_per_round`) under the user's `train`
    settings, unless the user sized the step; `recipe` defaults to the one `replay.method` names.
    `presets --show` writes a preset's step out with it."""
    if recipe is None:
        replay = data.get("replay")
        recipe = RECIPES.get(str(replay.get("method"))) if isinstance(replay, dict) else None
    train = data.get("train")
    if recipe is None or not recipe.train or not (train is None or isinstance(train, dict)):
        return data
    if sizes_step(train or {}):
        return data
    return {**data, "train": merged(recipe.train, train or {}, ("train",))}


def _what_changes(recipe: Recipe, algorithm: dict[str, Any]) -> str:
    """The tail of the warning for a loss the user named: the token control the run gets in
    place of the recipe's, and the recipe's generation settings, which stay."""
    parts = []
    own = recipe.algorithm.get("token_control", "off")
    mode = algorithm.get("token_control", "off")
    if own != "off" and mode != own:
        parts.append(f"algorithm.token_control = {mode!r}, not the recipe's {own!r}")
    if recipe.generation:
        kept = ", ".join(f"generation.{key}" for key in recipe.generation)
        parts.append(f"its generation settings stay: {kept}")
    return f" ({'; '.join(parts)})" if parts else ""
