"""Settings of several sections that cannot go together, checked on the whole config.

Each section checks its own fields; what only a combination of sections rules out (a preference
run with replay options, a mixture whose members need more tokens than generation gives, a loss
that regresses a rollout's summed log-ratio with truncated sampling) is refused here, by the
field to change. `Config.check` calls these after the sections' own checks.

What runs but trains otherwise than the settings suggest is warned about here, not refused: a
gradient step larger than a round of generation trains a step only every few rounds, fewer
steps than the settings suggest, and nothing in the run's output says so (issue #53).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llm_replay.config.parse import ConfigError
from llm_replay.methods import OPTIONS

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


def round_shape_warning(config: Config) -> str | None:
    """Why a round would train less than one gradient step, or None: for a method whose steps
    follow a credit (`credit_steps`: a step per `train.batch_size` of y × the round's rollouts,
    the rest carried over), a step larger than a full round at its least ratio: the ratio as
    set, the least a method may choose (`ratio_floor`), or 1 where an option can hand the run
    to on-policy (`sets_replay_scale`: the anneal, the bandit). A step then comes every few
    rounds: a larger batch in effect, and fewer steps than a preset that says "two steps a
    round" means; on rows trained once in order (the on-policy queue, the anchored batches of a
    run handed to on-policy), a step that is not a whole number of rounds also trains rows
    generated by the weights before the last step. Methods that train one batch a round
    whatever its size (ExGRPO, prioritized replay, RLEP's phase II) are not read. Adaptive
    rollouts' rounds are smaller than a full one when prompts are solved early, so a step can
    come less often than this says; `auto` was measured so. An option that resizes the step at
    the handover (the anneal's `on_policy_batch_size`) is read at that size on a full round,
    and `train.batch_size` at the ratio as set."""
    method = config.replay.method_class
    if config.preference.enabled or not method.credit_steps:
        return None  # a preference run's pair steps are sized by preference.*
    g = config.generation
    batch = config.train.batch_size
    ratio = config.replay.samples_per_insert
    least = min(ratio, method.ratio_floor) if method.ratio_floor is not None else ratio
    handing = [n for n, _ in config.replay.enabled_options() if OPTIONS[n].sets_replay_scale]
    resized = [
        (f"replay.{n}.{knob}", getattr(o, knob))
        for n, o in config.replay.enabled_options()
        if (knob := OPTIONS[n].resizes_steps(o)) is not None
    ]
    for field, rows in resized:
        if rows > g.rollouts_per_step:
            return (
                f"{field} = {rows}: more than a full round trains once the run is handed to "
                f"on-policy (generation.prompts_per_step × group_size = {g.rollouts_per_step} "
                f"rollouts), so a gradient step then comes only every "
                f"{rows / g.rollouts_per_step:.3g} rounds; set it to {g.rollouts_per_step} or less"
            )
    if handing and not resized:
        least = min(least, 1.0)
    per_round = least * g.rollouts_per_step
    if batch <= per_round + 1e-9:
        return None
    rounds = batch / per_round
    what = f"{g.prompts_per_step} × {g.group_size} = {g.rollouts_per_step} rollouts"
    if least != 1.0:
        what += f" × replay ratio {least:g} = {per_round:g} rows to train"
    if least < ratio:
        what += (
            f", once replay.{handing[0]} hands the run to on-policy"
            if handing
            else f", at the least replay ratio {method.name} may choose"
        )
    text = (
        f"train.batch_size = {batch}: more than a full round trains (generation.prompts_per_step "
        f"× group_size = {what}), so a gradient step comes only every {rounds:.3g} rounds"
    )
    in_order = method.consumes_rollouts or (bool(handing) and least == 1.0)
    if in_order and not math.isclose(rounds, round(rounds)):
        text += ", and part of its rows were generated by the weights before the last step"
    fits = [int(b) for b in (per_round, per_round / 2) if b == int(b) and b >= 1]
    fix = f"set train.batch_size to {' or '.join(map(str, fits))}" if fits else "lower it"
    return f"{text}; for one step a round or more {fix}, or raise generation.prompts_per_step"
