"""What a method reads of verl's training step: the actor's statistics, and μ from the step's times.

Under llm-replay's own loop the learner hands a method each gradient step's statistics (clip
fraction, behaviour KL, ratio moments, entropy, gradient norm) and the compute meter its
measured μ. verl's trainer keeps both to itself: the actor's metrics go from `_update_actor`
into the step's log and nowhere else. `observe_updates` wraps the trainer instance's own
`_update_actor` (verl's method runs unchanged; the wrapper reads the metrics it added and times
it) and hands them to the sampler, which maps them to our names (`step_statistics`) and feeds
the method's host, one host step per mini-batch sample the method composed.

verl reduces the actor's metrics over a step's mini-batches, so each of a step's samples reads
the step's means. The behaviour statistics (`kl_behaviour`, `log_ratio_m2`, the ratio's moments)
are reported by our losses in verl (`llm_replay_<loss>`, `plugin.py`) and are taken against the
behaviour policy only when verl's `old_log_prob` is the behaviour log-probs
(`algorithm.rollout_correction.bypass_mode=true`); otherwise they are left out, as verl's own
losses leave them out.

μ (generation + scoring seconds per rollout generated ÷ training seconds per row trained) is
measured in verl's sync mode, where a step waits for its own rollouts: the sampler charges the
time verl's sampler spends waiting for a step's finished groups to generation and the wrapped
`_update_actor` to training. In the async modes generation overlaps training, so the trainer's
waits say nothing of what generation cost; there μ is not measured and a method that decides
from it needs it given (`sampler_kwargs.mu`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from llm_replay.integrations.verl.plugin import METRIC_PREFIX

log = logging.getLogger(__name__)

# verl's actor metric: our learner's (methods.signals.STEP_KEYS); verl's own losses report these
ACTOR_METRICS = {
    "actor/pg_clipfrac": "loss/clip_fraction",
    "actor/entropy": "loss/entropy",
    "actor/grad_norm": "loss/grad_norm",
    "actor/pg_loss": "loss/policy",
}
# reported by our losses in verl, against verl's old_log_prob (the behaviour policy in bypass mode)
BEHAVIOUR_METRICS = {
    f"{METRIC_PREFIX}ratio": "loss/ratio",
    f"{METRIC_PREFIX}ratio_max": "loss/ratio_max",
    f"{METRIC_PREFIX}kl_behaviour": "loss/kl_behaviour",
    f"{METRIC_PREFIX}log_ratio_m2": "loss/log_ratio_m2",
    f"{METRIC_PREFIX}sampled_nll": "loss/sampled_nll",
}

UpdateCallback = Callable[[Mapping[str, Any], float, int], None]


def step_statistics(metrics: Mapping[str, Any], *, behaviour: bool) -> dict[str, float]:
    """verl's actor metrics for one step under our learner's names; the behaviour statistics
    only where `behaviour` (verl's old_log_prob is the behaviour policy)."""
    names = {**ACTOR_METRICS, **(BEHAVIOUR_METRICS if behaviour else {})}
    out = {}
    for theirs, ours in names.items():
        value = metrics.get(theirs)
        if value is None or isinstance(value, bool):
            continue
        try:
            out[ours] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def trainer_of(refill_fn: Any) -> Any:
    """The verl trainer that built the sampler: its `refill_fn` is the trainer's own bound
    `_add_prompts_to_generate` (verl's constructor contract), else None."""
    return getattr(refill_fn, "__self__", None)


def observe_updates(trainer: Any, callback: UpdateCallback) -> bool:
    """Wrap `trainer._update_actor(batch, metrics)` so that after each call `callback(metrics,
    seconds, rows)` hears the metrics it wrote, how long it took and how many rows it trained
    (padding left out). False, with a warning, where the trainer has no such method."""
    original = getattr(trainer, "_update_actor", None)
    if not callable(original):
        log.warning(
            "llm-replay sampler: verl's trainer has no _update_actor to observe; the method's "
            "learner-side signals (clip fraction, behaviour KL, entropy, measured μ) stay empty"
        )
        return False
    if getattr(original, "__llm_replay_observed__", False):
        return True

    def _update_actor(batch: Any, metrics: dict[str, Any]) -> Any:
        started = time.perf_counter()
        out = original(batch, metrics)
        seconds = time.perf_counter() - started
        rows = sum(not tag.get("is_padding", False) for tag in batch.tags)
        callback(metrics, seconds, rows)
        return out

    _update_actor.__llm_replay_observed__ = True  # type: ignore[attr-defined]
    trainer._update_actor = _update_actor
    return True
