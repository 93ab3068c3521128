"""What verl's actor worker group returns from `update_actor`, for the stub workers (`workers.py`).

verl 0.9.1's engine worker (`verl/workers/engine_workers.py`): `train_mini_batch` runs the step's
mini-batches (each rank its share, `ppo_mini_batch_size × n / dp` rows, `ppo_epochs` times),
each one `train_batch`, whose `_postprocess_output` returns the loss's metrics (`ppo_loss` in
`verl/workers/utils/losses.py`, one `Metric` per micro-batch, gathered over the ranks and reduced
by `Metric.aggregate_dp`) and the worker's own: `loss`, `grad_norm`, `lr` (on the mini-batch that
steps the learning-rate scheduler, the last), `perf/max_memory_allocated_gb`,
`perf/max_memory_reserved_gb`, `perf/cpu_memory_used_gb` and `mfu`; `train_mini_batch` lists each
key over the mini-batches. The trainer's `_update_actor` then prefixes `actor/` and reduces them.

Here the loss's metrics come from verl's own `ppo_loss`, run on each rank's share of each
mini-batch with the configured policy loss (ours through `plugin.py`, or verl's) and the actor
config verl's worker builds, so their keys and values are a real worker's for these
log-probabilities. What a model would give is made up: the current log-probs (the behaviour's
plus `SHIFT`·cos(token)) and, when the trainer asks for it (`calculate_entropy`), the token
entropy (`entropy_of`). Simplifications: one micro-batch per rank, no shuffling, bypass mode
only (`old_log_probs` are the stored behaviour log-probs: the stub computes no old-policy
forward), and the worker's own numbers (gradient norm, memory, MFU) are constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.metric import Metric
from verl.utils.py_functional import append_to_dict
from verl.workers.utils.losses import ppo_loss

FIELDS = ["prompts", "responses", "response_mask", "old_log_probs", "advantages"]
SHIFT = 0.35  # the current log-prob's distance from the behaviour's: some tokens leave a 0.2 clip
GRAD_NORM = 2.0
WORKER_KEYS = (  # `_postprocess_output`'s own, besides `lr`
    "loss",
    "grad_norm",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/cpu_memory_used_gb",
    "mfu",
)


def actor_config(config: Any) -> Any:
    """verl's `ActorConfig`, as its worker builds it from `actor_rollout_ref.actor`
    (`omega_conf_to_dataclass`), with a micro-batch size where the test config leaves none."""
    actor = OmegaConf.to_container(config.actor_rollout_ref.actor, resolve=True)
    assert isinstance(actor, dict)
    if actor.get("ppo_micro_batch_size_per_gpu") is None and not actor.get("use_dynamic_bsz"):
        actor["ppo_micro_batch_size_per_gpu"] = 1
    return omega_conf_to_dataclass(OmegaConf.create(actor))


def entropy_of(responses: torch.Tensor) -> torch.Tensor:
    """The made-up token entropy of a response's tokens. [R] -> [R]"""
    return 0.5 + 0.25 * torch.sin(responses.float())


def current_log_probs(behaviour: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """The made-up current policy's log-probs of a response's tokens. [R] -> [R]"""
    return behaviour + SHIFT * torch.cos(responses.float())


def over_sequence(prompt_length: int, values: torch.Tensor) -> torch.Tensor:
    """A response's per-token values where the model's output over the whole sequence holds them:
    a token's value sits at the position before it (`no_padding_2_padding` shifts it back).
    [R] -> [P + R]"""
    return torch.cat([torch.zeros(prompt_length - 1), values.float(), torch.zeros(1)])


def jagged(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(list(tensors), layout=torch.jagged)


def mini_batches(rows: int, dp: int, extra_info: Mapping[str, Any]) -> list[list[list[int]]]:
    """Each optimizer step's rows, per rank: verl's dispatch gives rank r the r-th contiguous
    share of the batch, and each rank runs its share in mini-batches of
    `mini_batch_size / dp` rows, `epochs` times (unshuffled). verl's worker asserts that dp
    divides `mini_batch_size`; the tests that force padding with dp = 3 and a mini-batch of 8
    rows break that, so here a rank takes `mini_batch_size // dp` rows, as verl would without
    the assert."""
    per_rank = rows // dp
    mini = int(extra_info["mini_batch_size"]) // dp
    per_epoch = per_rank // mini
    out = []
    for step in range(per_epoch * int(extra_info.get("epochs", 1))):
        first = (step % per_epoch) * mini
        out.append(
            [list(range(r * per_rank + first, r * per_rank + first + mini)) for r in range(dp)]
        )
    return out


def rank_loss(
    config: Any,
    rows: Mapping[str, list[torch.Tensor]],
    share: list[int],
    *,
    entropy: bool,
    global_info: Mapping[str, int],
) -> tuple[float, dict[str, Any]]:
    """verl's `ppo_loss` on one rank's share of a mini-batch (one micro-batch)."""
    data = tu.get_tensordict(
        tensor_dict={key: jagged(rows[key][i] for i in share) for key in FIELDS},
        non_tensor_dict=dict(global_info),
    )
    prompt = [len(rows["prompts"][i]) for i in share]
    current = [current_log_probs(rows["old_log_probs"][i], rows["responses"][i]) for i in share]
    output = {
        "log_probs": jagged(over_sequence(p, c) for p, c in zip(prompt, current, strict=True))
    }
    if entropy:
        values = [entropy_of(rows["responses"][i]) for i in share]
        output["entropy"] = jagged(over_sequence(p, e) for p, e in zip(prompt, values, strict=True))
    loss, metrics = ppo_loss(config, output, data)
    return float(loss), metrics


def train_metrics(
    config: Any, data: Any, extra_info: Mapping[str, Any], dp: int
) -> tuple[dict[str, list[Any]], list[float]]:
    """`update_actor`'s metrics, as verl's worker returns them (module docstring), and each
    mini-batch's mean token entropy computed plainly (a reference for the entropy verl reports)."""
    rows = {key: list(data[key].unbind(0)) for key in FIELDS}
    entropy = bool(extra_info.get("calculate_entropy", False))
    steps = mini_batches(len(rows["responses"]), dp, extra_info)
    out: dict[str, list[Any]] = {}
    token_entropy = []
    for step, shares in enumerate(steps):
        masks = [rows["response_mask"][i].bool() for share in shares for i in share]
        responses = [rows["responses"][i] for share in shares for i in share]
        global_info = {
            "dp_size": dp,
            "batch_num_tokens": int(sum(int(m.sum()) for m in masks)),
            "global_batch_size": sum(len(share) for share in shares),
        }
        results = [
            rank_loss(config, rows, share, entropy=entropy, global_info=global_info)
            for share in shares
        ]
        metrics: dict[str, Any] = {}
        for key, value in results[0][1].items():
            gathered = [result[1][key] for result in results]
            metrics[key] = Metric.aggregate_dp(gathered) if isinstance(value, Metric) else gathered
        metrics.update(
            {
                "loss": float(np.mean([loss for loss, _ in results])),
                "grad_norm": GRAD_NORM,
                "perf/max_memory_allocated_gb": 0.0,
                "perf/max_memory_reserved_gb": 0.0,
                "perf/cpu_memory_used_gb": 0.0,
                "mfu": 0.0,
            }
        )
        if step == len(steps) - 1:
            metrics["lr"] = float(config.optim.lr)
        append_to_dict(out, metrics)
        values = torch.cat([entropy_of(r)[m] for r, m in zip(responses, masks, strict=True)])
        token_entropy.append(float(values.mean()))
    return out, token_entropy
