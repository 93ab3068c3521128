"""`ReplayGRPOConfig`: TRL's `GRPOConfig` plus the replay method and its knobs.

The method's name and knobs are checked by llm-replay's method registry when the config is built,
so a wrong knob fails before a model is loaded and the error names the field
(`replay_knobs.delta = 2: must be in [0, 1]`). Every TRL field keeps its meaning; the replay
trainer only refuses the few TRL settings that would schedule reuse behind the method's back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from llm_replay.algorithms.token_control import TokenControl
from llm_replay.checks import number
from llm_replay.config import ADAPTIVE_REFUSED, ReplayConfig
from llm_replay.config.parse import ConfigError, build
from llm_replay.config.prompts import AdaptiveRolloutConfig
from llm_replay.config.recipes import RECIPES, Recipe
from llm_replay.frontend.metric_map import NOT_REPORTED, unreported_readings
from llm_replay.frontend.settings import (
    as_mapping,
    recipe_over,
    refuse_rescoring,
    refuse_step_resizing,
    resolve_method,
)
from llm_replay.frontend.token_control import control_from
from llm_replay.integrations.trl.callbacks import TRL_REPORTS
from llm_replay.integrations.trl.token_control import LOSS_TYPES
from llm_replay.methods import METHODS

log = logging.getLogger(__name__)
REPLAY_LOSSES = ("trl", "asymre")
SCALE_TO_ADVANTAGE = {"group": "grpo", "none": "dr_grpo", "batch": "grpo"}


@dataclass
class ReplayGRPOConfig(GRPOConfig):  # type: ignore[misc]
    replay_method: str = field(
        default="on_policy",
        metadata={
            "help": f"replay method of the llm-replay registry: {sorted(METHODS)}, or a recipe: "
            f"{sorted(RECIPES)} ('auto', the recommended default, and 'positive_schedule' need "
            "replay_loss='asymre'; 'auto' sets replay_token_control and replay_adaptive, field "
            "by field under the ones given)"
        },
    )
    replay_knobs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "the method's knobs, e.g. {'capacity': 1024, 'replay_ratio': 2} "
            "(a JSON string on the command line); `llm-replay methods` lists them"
        },
    )
    replay_loss: str = field(
        default="trl",
        metadata={
            "help": "'trl': TRL's loss_type, its ratio taken against the stored behaviour "
            "log-probs; 'asymre': REINFORCE with the baseline shifted by replay_delta_v and no "
            "ratio (AsymRE; needs scale_rewards='none')"
        },
    )
    replay_delta_v: float = field(
        default=-0.1, metadata={"help": "AsymRE's baseline shift δV (advantages become A − δV)"}
    )
    replay_correct_threshold: float = field(
        default=1.0,
        metadata={
            "help": "a completion whose total reward is at least this counts as correct "
            "(positive-biased replay and RLEP keep correct ones)"
        },
    )
    replay_sampling_weights: bool = field(
        default=False,
        metadata={"help": "scale each drawn row's advantage by its sampler importance weight"},
    )
    replay_adaptive: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "AR3PO's adaptive rollouts, e.g. {'enabled': true, 'stage_size': 2, 'reuse': "
            "true} (a JSON string on the command line): stage_size completions per prompt, more "
            "only for prompts with no correct one yet, up to num_generations; one process only"
        },
    )
    replay_token_control: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Clip-Cov / KL-Cov / W-REINFORCE on the reused rows' tokens (arXiv 2505.22617, "
            "2506.01347), e.g. {'mode': 'kl_cov', 'fraction': 0.05, 'coef': 1.0} (a JSON string "
            "on the command line); fields as algorithm.token_control and its control_* settings "
            f"(mode, rows, fraction, coef, low, high, positive_weight); loss_type in {list(LOSS_TYPES)}"
        },
    )

    replay_task_column: str | None = field(
        default=None,
        metadata={
            "help": "a train-dataset column naming each row's task (a mixture's member): the "
            "rollouts carry it, so replay_knobs.tasks ({'balance': true, 'capacity': true}) "
            "balances and caps the table per task"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.replay = self.replay_config()
        if self.replay_loss not in REPLAY_LOSSES:
            raise ValueError(f"replay_loss = {self.replay_loss!r}: choose one of {REPLAY_LOSSES}")
        recipe = RECIPES.get(self.replay_method)
        if recipe is not None and recipe.loss == "asymre" and self.replay_loss != "asymre":
            raise ValueError(
                f"replay_loss = {self.replay_loss!r}: replay_method {recipe.name!r} trains with "
                "AsymRE; set replay_loss='asymre' and scale_rewards='none'"
            )
        if self.replay_loss == "asymre" and self.scale_rewards != "none":
            raise ValueError(
                f"scale_rewards = {self.scale_rewards!r}: replay_loss 'asymre' needs 'none' "
                "(A = R − mean R, the Dr. GRPO advantage AsymRE shifts)"
            )
        number("replay_delta_v", self.replay_delta_v)
        number("replay_correct_threshold", self.replay_correct_threshold)
        if self.num_iterations != 1:
            raise ValueError(
                f"num_iterations = {self.num_iterations}: the replay method schedules reuse; "
                "set replay_knobs.replay_ratio instead"
            )
        refuse_rescoring(self.replay.options, "replay_knobs", "ReplayGRPOTrainer")
        refuse_step_resizing(self.replay.options, "replay_knobs", "ReplayGRPOTrainer")
        self.adaptive = self.adaptive_config()
        self.token_control = self.token_control_config()
        refused, silent = unreported_readings(self.replay.options, TRL_REPORTS)
        for knob, value in refused.items():
            raise ValueError(f"replay_knobs.{knob} = {value!r}: {NOT_REPORTED}")
        if "anneal.log_ratio_m2" in silent:
            log.warning(
                "replay_knobs.anneal: its m2 reading (m2_max) reads the log-ratio's second moment "
                "against the behaviour policy, which TRL's loss does not report; it will not press"
            )

    def token_control_config(self) -> TokenControl:
        """`replay_token_control` checked as `algorithm.token_control` is, and against the loss
        types whose normalisers the KL-Cov term is reduced with."""
        given = as_mapping(self.replay_token_control, "replay_token_control")
        recipe = RECIPES.get(self.replay_method)
        own = {} if recipe is None else recipe.token_control()
        if own:
            given = recipe_over(own, given, "mode")
        from_recipe = bool(own) and given.get("mode") == own.get("mode")
        control = control_from(given)
        if control.active and self.loss_type not in LOSS_TYPES:
            raise ValueError(
                f"loss_type = {self.loss_type!r}: replay_token_control runs with {list(LOSS_TYPES)}"
                + (
                    f" (replay_method {self.replay_method!r} sets replay_token_control = "
                    f"{json.dumps(given)}; set it to {{'mode': 'off'}} to run without it)"
                    if from_recipe
                    else ""
                )
            )
        return control

    def adaptive_config(self) -> AdaptiveRolloutConfig:
        """`replay_adaptive` checked as `generation.adaptive` is in a run config, and against the
        TRL fields it meets: the stages fill num_generations exactly, the advantage is per group.
        Under a recipe the user's fields go over the recipe's, and a refusal of the recipe's
        part says so."""
        given = as_mapping(self.replay_adaptive, "replay_adaptive")
        recipe = self.adaptive_recipe()
        if recipe is None:
            return self._checked_adaptive(given)
        try:
            return self._checked_adaptive(recipe_over(recipe.adaptive(), given, "enabled"))
        except ValueError as error:
            raise ValueError(f"{error}{self.recipe_adaptive_hint()}") from None

    def adaptive_recipe(self) -> Recipe | None:
        """The recipe that turns adaptive rollouts on in this config (None where it names none
        or the user turned them off)."""
        recipe = RECIPES.get(self.replay_method)
        given = as_mapping(self.replay_adaptive, "replay_adaptive")
        if recipe is None or not recipe.adaptive() or given.get("enabled") is False:
            return None
        return recipe

    def recipe_adaptive_hint(self, also: str = "") -> str:
        """For a refusal of adaptive rollouts: which recipe turned them on and how to turn them
        off (and `also`, another way out); empty where the user turned them on."""
        recipe = self.adaptive_recipe()
        if recipe is None:
            return ""
        return (
            f" (replay_method {recipe.name!r} turns AR3PO's adaptive rollouts on; set "
            "replay_adaptive = {'enabled': false} to run without them" + also + ")"
        )

    def _checked_adaptive(self, given: Any) -> AdaptiveRolloutConfig:
        value = as_mapping(given, "replay_adaptive")
        try:
            adaptive: AdaptiveRolloutConfig = build(AdaptiveRolloutConfig, value, "replay_adaptive")
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if not adaptive.enabled:
            return adaptive
        if self.num_generations % adaptive.stage_size:
            raise ValueError(
                f"replay_adaptive.stage_size = {adaptive.stage_size}: must divide num_generations "
                f"= {self.num_generations} (the stages fill a group exactly)"
            )
        if self.scale_rewards == "batch":
            raise ValueError(
                "scale_rewards = 'batch': replay_adaptive computes each group's advantage over "
                "the group as it ends up; use 'group' or 'none'"
            )
        if self.steps_per_generation != 1:
            raise ValueError(
                f"steps_per_generation = {self.steps_per_generation}: replay_adaptive needs 1. "
                "TRL hands the same prompts to every micro-step of a generation window, and an "
                "adaptive round, smaller than the window, would generate them again; set "
                "steps_per_generation=1 (gradient_accumulation_steps may stay as it is)"
            )
        method = self.replay.method
        refusal = ADAPTIVE_REFUSED.get(method)
        if refusal is not None:
            raise ValueError(
                f"replay_adaptive.enabled: not with replay_method = {method!r} ({refusal})"
            )
        return adaptive

    def replay_config(self) -> ReplayConfig:
        """The method and its knobs, validated by the registry."""
        knobs = as_mapping(self.replay_knobs, "replay_knobs", "knob")
        replay, _ = resolve_method(
            self.replay_method, knobs, "replay_knobs", method_field="replay_method"
        )
        return replay

    def refuse_missing_adaptive(self, directory: Path) -> None:
        """A run with adaptive rollouts resuming a checkpoint written without them; where a
        recipe turned them on, a run of the earlier `auto` resumes under `positive_schedule`."""
        hint = self.recipe_adaptive_hint(
            ", or replay_method='positive_schedule' to resume a run of 'auto' from before issue #38"
        )
        raise ValueError(
            f"{directory}: the checkpoint has no adaptive rollout state (it was written without "
            f"replay_adaptive){hint}"
        )

    @property
    def advantage_estimator(self) -> str:
        """The llm-replay name of the advantage TRL computes at generation."""
        return SCALE_TO_ADVANTAGE.get(str(self.scale_rewards), "grpo")
