"""What a method reads of verl's training step: the actor's statistics, and μ from the step's times.

Under llm-replay's own loop the learner hands a method each gradient step's statistics (clip
fraction, behaviour KL, ratio moments, entropy, gradient norm) and the compute meter its
measured μ. verl's trainer keeps both to itself: the actor's metrics go from `_update_actor`
into the step's log and nowhere else. `observe_updates` wraps the trainer instance's own
`_update_actor` (verl's method runs unchanged; the wrapper reads the metrics it added and times
it) and hands them to the sampler, which maps them to our names (`step_statistics`) and feeds
the method's host, one host step per mini-batch sample the method composed.

What verl's actor reports (verl 0.9.1: the worker's `train_mini_batch` / `_postprocess_output`,
the loss's `ppo_loss`, the trainer's `_update_actor`, which prefixes `actor/` and reduces each
key over the step's mini-batches: the max for a key naming `max`, else the mean), and what of
it the method reads:

- `actor/pg_loss` → `loss/policy`: the policy-gradient term of one optimizer step's loss (before
  any entropy or KL term), normalised over the mini-batch as the loss aggregates, as ours is;
- `actor/grad_norm` → `loss/grad_norm`: the gradient norm before clipping, as ours;
- the clip fraction → `loss/clip_fraction`: our losses' (`actor/llm_replay_clip_fraction`, from
  the losses that clip: grpo, dapo, gspo, cispo, bapo) or verl's own losses'
  (`actor/pg_clipfrac`). A loss that does not clip (tis truncates, icepop and m2po mask) reports
  none, as under our loop;
- `actor/llm_replay_sampled_nll` → `loss/sampled_nll`, from our losses: the current policy's
  alone, so read in every mode;
- the behaviour statistics (`kl_behaviour`, `log_ratio_m2`, the ratio's mean and max) from our
  losses, taken against verl's `old_log_prob`, which is the behaviour policy only with
  `algorithm.rollout_correction.bypass_mode=true`; otherwise they are left out, as verl's own
  losses leave them out. verl's `ratio_max` is not ours: each micro-batch's max, averaged over
  micro-batches and ranks, then the largest over the step's mini-batches, so it is at most the
  step's true max that our learner reports;
- the entropy → `loss/entropy`: `actor/entropy_loss`, the training forward's token entropy, which
  the worker computes only when asked (`actor_rollout_ref.actor.calculate_entropy=true`, or an
  entropy bonus, `entropy_coeff` ≠ 0); else `actor/entropy`, which verl's `_compute_old_log_prob`
  adds from its recomputed forward (the weights the step starts from), but which bypass mode
  skips. Both are aggregated with the actor's `loss_agg_mode`, so they are the mean token entropy,
  ours, only under `token-mean` (verl's default); under another mode the entropy is left out.
  In bypass mode without `calculate_entropy` verl computes no entropy at all, and it is absent.

verl averages its loss metrics over micro-batches unweighted, where our learner weighs them by
tokens; each of a step's samples reads the step's means. No method option reads the step's
entropy (anneal's entropy reading is the fresh rounds' behaviour NLL, from `rollout_log_probs`);
`missing_signals` refuses, or warns about, an option that reads a statistic this configuration
of verl does not report.

μ (generation + scoring seconds per rollout generated ÷ training seconds per row trained) is
measured in verl's sync mode, where a step waits for its own rollouts: the sampler charges the
time verl's sampler spends waiting for a step's finished groups to generation and the wrapped
`_update_actor` to training. In the async modes generation overlaps training, so the trainer's
waits say nothing of what generation cost; there μ is not measured and a method that decides
from it needs it given (`sampler_kwargs.mu`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from llm_replay.algorithms.losses import loss_reports
from llm_replay.config import ReplayConfig
from llm_replay.frontend.hooks import wrap_method
from llm_replay.frontend.metric_map import NOT_REPORTED, MetricMap, unreported_readings
from llm_replay.frontend.settings import lookup
from llm_replay.integrations.verl.plugin import LOSS_PREFIX, METRIC_PREFIX, REGISTERED
from llm_replay.methods.signals import STEP_KEYS

log = logging.getLogger(__name__)

# verl's actor metric: our learner's (methods.signals.STEP_KEYS), read in every mode
ACTOR_METRICS = {
    "actor/pg_clipfrac": "loss/clip_fraction",  # verl's own clipped losses
    f"{METRIC_PREFIX}clip_fraction": "loss/clip_fraction",  # our clipped losses
    f"{METRIC_PREFIX}sampled_nll": "loss/sampled_nll",  # the current policy's alone
    "actor/grad_norm": "loss/grad_norm",
    "actor/pg_loss": "loss/policy",
}
# reported by our losses in verl, against verl's old_log_prob (the behaviour policy in bypass mode)
BEHAVIOUR_METRICS = {
    f"{METRIC_PREFIX}ratio": "loss/ratio",
    f"{METRIC_PREFIX}ratio_max": "loss/ratio_max",
    f"{METRIC_PREFIX}kl_behaviour": "loss/kl_behaviour",
    f"{METRIC_PREFIX}log_ratio_m2": "loss/log_ratio_m2",
}
# the entropy, the first of these present: the training forward's, else the old-policy forward's
ENTROPY_METRICS = ("actor/entropy_loss", "actor/entropy")
TOKEN_MEAN = "token-mean"

UpdateCallback = Callable[[Mapping[str, Any], float, int], None]


ACTOR = MetricMap(ACTOR_METRICS)
BEHAVIOUR = MetricMap(BEHAVIOUR_METRICS)
ENTROPY = MetricMap({}, {"loss/entropy": ENTROPY_METRICS})


def step_statistics(
    metrics: Mapping[str, Any], *, behaviour: bool, token_mean: bool = True
) -> dict[str, float]:
    """verl's actor metrics for one step under our learner's names (module docstring): the
    behaviour statistics only where `behaviour` (verl's old_log_prob is the behaviour policy),
    the entropy only where `token_mean` (the actor's `loss_agg_mode` is token-mean,
    `entropy_is_token_mean`)."""
    return ((ACTOR | BEHAVIOUR) if behaviour else ACTOR).read(metrics) | (
        ENTROPY.read(metrics) if token_mean else {}
    )


def entropy_is_token_mean(root: Any) -> bool:
    """Whether verl aggregates the actor's entropy as the mean over tokens, ours
    (`actor.loss_agg_mode`, token-mean by default)."""
    mode = lookup(root, "actor_rollout_ref.actor.loss_agg_mode")
    return mode is None or str(mode) == TOKEN_MEAN


def reported_signals(root: Any) -> frozenset[str]:
    """The step statistics (`methods.signals.STEP_KEYS`' short names) verl's actor reports, and
    `step_statistics` maps, under the verl config `root`. For verl's own losses the clip
    fraction is taken as reported: most report `actor/pg_clipfrac` (verl 0.9.1: all but `gpg` and
    `kl_cov`)."""
    short = {ours: key for key, ours in STEP_KEYS.items()}
    bypass = bool(lookup(root, "algorithm.rollout_correction.bypass_mode"))
    mode = str(lookup(root, "actor_rollout_ref.actor.policy_loss.loss_mode") or "vanilla")
    names = {"loss/grad_norm", "loss/policy"}
    if mode in REGISTERED:  # ours
        reports = {f"{METRIC_PREFIX}{key}" for key in loss_reports(mode.removeprefix(LOSS_PREFIX))}
        names |= {v for k, v in ACTOR_METRICS.items() if k in reports}
        if bypass:
            names |= {v for k, v in BEHAVIOUR_METRICS.items() if k in reports}
    else:
        names.add("loss/clip_fraction")
    actor = lookup(root, "actor_rollout_ref.actor")
    computes_entropy = bool(lookup(actor, "calculate_entropy")) or bool(
        lookup(actor, "entropy_coeff")
    )
    if entropy_is_token_mean(root) and (computes_entropy or not bypass):
        names.add("loss/entropy")
    return frozenset(short[n] for n in names)


def missing_signals(root: Any, replay: ReplayConfig) -> list[str]:
    """What the method's options read of the actor that verl, configured as `root`, does not
    report (`frontend.metric_map.unreported_readings`): a setting that would never press is
    refused (the returned problems), a default reading that stays silent is warned about."""
    if root is None:
        return []
    refused, silent = unreported_readings(replay.options, reported_signals(root))
    mode = lookup(root, "actor_rollout_ref.actor.policy_loss.loss_mode")
    problems = []
    if "anneal.clip_max" in refused:
        clipped = [m for m in REGISTERED if "clip_fraction" in loss_reports(m[len(LOSS_PREFIX) :])]
        problems.append(
            f"sampler_kwargs.anneal.clip_max = {refused['anneal.clip_max']!r}: loss_mode {mode} "
            "reports no clip fraction (it does not clip), so the reading would never press; use "
            f"a loss that clips ({', '.join(clipped)}) or leave clip_max unset"
        )
    problems.extend(
        f"sampler_kwargs.{knob} = {value!r}: {NOT_REPORTED}"
        for knob, value in refused.items()
        if knob != "anneal.clip_max"
    )
    if "anneal.log_ratio_m2" in silent:
        log.warning(
            "llm-replay sampler: anneal's m2 reading (m2_max) reads the log-ratio's second "
            "moment against the behaviour policy, which verl reports only from our losses "
            "(loss_mode llm_replay_<loss>, now %s) with algorithm.rollout_correction."
            "bypass_mode=true; it will not press",
            mode,
        )
    return problems


def trainer_of(refill_fn: Any) -> Any:
    """The verl trainer that built the sampler: its `refill_fn` is the trainer's own bound
    `_add_prompts_to_generate` (verl's constructor contract), else None."""
    return getattr(refill_fn, "__self__", None)


def observe_updates(trainer: Any, callback: UpdateCallback) -> bool:
    """Wrap `trainer._update_actor(batch, metrics)` (`frontend.hooks`) so that after each call
    `callback(metrics, seconds, rows)` hears the metrics it wrote, how long it took and how many
    rows it trained (padding left out). False, with a warning, where the trainer has no such
    method."""

    def heard(args: tuple[Any, ...], kwargs: dict[str, Any], seconds: float) -> None:
        call = dict(zip(("batch", "metrics"), args, strict=False)) | kwargs
        rows = sum(not tag.get("is_padding", False) for tag in call["batch"].tags)
        callback(call["metrics"], seconds, rows)

    if wrap_method(trainer, "_update_actor", heard, key="actor metrics"):
        return True
    log.warning(
        "llm-replay sampler: verl's trainer has no _update_actor to observe; the method's "
        "learner-side signals (clip fraction, behaviour KL, entropy, measured μ) stay empty"
    )
    return False
