"""Settings of several sections that cannot go together, checked on the whole config.

Each section checks its own fields; what only a combination of sections rules out (a preference
run with replay options, a mixture whose members need more tokens than generation gives, a loss
that regresses a rollout's summed log-ratio with truncated sampling) is refused here, by the
field to change. `Config.check` calls these after the sections' own checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_replay.config.parse import ConfigError

if TYPE_CHECKING:
    from llm_replay.config import Config


def check_sequence_regression(config: Config) -> None:
    """A loss that regresses a rollout's summed log-ratio onto its advantage (`oapl`)."""
    loss = config.algorithm.loss
    if config.generation.truncates:
        raise ConfigError(
            f"algorithm.loss = {loss!r}: not with generation.top_k/top_p truncation (a token "
            "outside the nucleus has its log-prob floored, which would dominate the "
            "rollout's summed log-ratio)"
        )
    if config.algorithm.token_controls().stops_gradient:
        raise ConfigError(
            f"algorithm.token_control = {config.algorithm.token_control!r}: not with "
            f"algorithm.loss = {loss!r}, whose loss is one value per rollout given to each "
            "token, so stopping one token's gradient would drop a share of the whole rollout's"
        )
    options = dict(config.replay.enabled_options())
    rescaling = None
    if "balance" in options:
        rescaling = "replay.balance"
    elif getattr(options.get("stale_rewards"), "policy", None) == "discount":
        rescaling = "replay.stale_rewards.policy = 'discount'"
    if rescaling is not None:
        raise ConfigError(
            f"{rescaling}: not with algorithm.loss = {loss!r}, which regresses onto the "
            "advantage rather than weighting by it, so rescaling a row's advantage would move "
            "its target instead of its weight"
        )


def check_preference(config: Config) -> None:
    p = config.preference
    if config.replay.method != "on_policy" or config.replay.enabled_options():
        raise ConfigError(
            f"replay.method = {config.replay.method!r}: preference runs replay pairs through "
            "preference.replay; leave replay.method at on_policy without options"
        )
    g = config.generation
    if g.adaptive.enabled:
        raise ConfigError(
            "generation.adaptive.enabled: not with preference.enabled (pairs are made from "
            "whole groups of generation.group_size)"
        )
    if config.algorithm.head_gate:
        raise ConfigError(
            "algorithm.head_gate: not with preference.enabled (the pair step takes its own "
            "optimizer steps)"
        )
    if p.correction == "truncated_is" and g.truncates:
        raise ConfigError(
            "preference.correction = 'truncated_is': not with generation.top_k/top_p "
            "truncation (the behaviour log-probs are of the truncated distribution, a pair's "
            "sequence log-probs of the full one)"
        )
    if p.annotator == "reward_model" and config.task.reward != "model":
        raise ConfigError(
            "preference.annotator = 'reward_model': set task.reward=model and "
            "reward_model.path (the judge is the run's reward model, refreshes included)"
        )


def check_mixture(config: Config) -> None:
    """One generation length serves every member: it must fit each one's longest answer."""
    limit = config.generation.max_new_tokens
    for member in config.task.mixture_members:
        if member.answer_tokens is not None and member.answer_tokens > limit:
            raise ConfigError(
                f"generation.max_new_tokens = {limit}: task.members.{member.name} needs "
                f"{member.answer_tokens} (its longest answer and EOS); raise it to the "
                "members' largest"
            )
