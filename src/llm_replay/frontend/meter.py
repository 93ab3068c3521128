"""The μ meter's counts for what a front end sees: a round generated, a batch trained.

Every front end charges the same counts to its `ComputeMeter` (prompts, rollouts, tokens,
reward calls for a generated round; rows and tokens for a trained batch), from which the count
bases (μ = 5, rollouts) and the measured μ are read. They were written out in each front end;
here they are counted once, from the rollouts themselves.
"""

from __future__ import annotations

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.metrics import ComputeMeter


def count_generated(meter: ComputeMeter, batch: RolloutBatch, *, prompts: int) -> None:
    """A generated and scored round: `prompts` new prompts (0 for a further stage of prompts
    already counted), its rollouts, their tokens, one reward call each."""
    meter.add(
        prompts_generated=prompts,
        rollouts_generated=len(batch),
        tokens_generated=int(batch.completion_lengths.sum()),
        prompt_tokens=int(batch.prompt_lengths.sum()),
        reward_calls=len(batch),
    )


def count_trained(meter: ComputeMeter, sample: Sample) -> None:
    """A drawn batch handed to the trainer's loss (its gradient step is counted when taken)."""
    completion = int(sample.completion_lengths.sum())
    meter.add(
        rollouts_trained=len(sample),
        tokens_trained=completion + int(sample.prompt_lengths.sum()),
        completion_tokens_trained=completion,
    )


def draw_metrics(sample: Sample) -> dict[str, float]:
    """What a trained batch drew: its rows' ages, reuse and fresh share."""
    return {
        "replay/age_mean": float(sample.ages.mean()),
        "replay/age_max": float(sample.ages.max()),
        "replay/reuse_mean": float(sample.times_sampled.mean()),
        "replay/fresh_fraction": float((sample.ages == 0).mean()),
    }


def count_metrics(meter: ComputeMeter, prefix: str) -> dict[str, float]:
    """The counts a trainer's own log shows beside its metrics (the full set is
    `ComputeMeter.metrics`), under `prefix`."""
    c = meter.counts
    out = {
        f"{prefix}tokens_generated": float(c["tokens_generated"]),
        f"{prefix}tokens_trained": float(c["completion_tokens_trained"]),
        f"{prefix}rollouts_generated": float(c["rollouts_generated"]),
        f"{prefix}rollouts_trained": float(c["rollouts_trained"]),
    }
    if meter.mu is not None:
        out[f"{prefix}mu"] = meter.mu
    return out
