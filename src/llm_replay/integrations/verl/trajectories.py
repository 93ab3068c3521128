"""verl trajectories in and out: TransferQueue's rows read as llm-replay rollouts, each kept whole
(`frontend.payloads`) so that a replayed row goes back to verl as it came.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.data.batch import RolloutBatch
from llm_replay.frontend.payloads import Trajectory, TrajectoryStore


def read_rollouts(
    keys: list[str],
    tags: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    *,
    group_of: Callable[[str], int],
    store: TrajectoryStore,
    needs_behaviour: bool,
    advantage: str,
    correct_threshold: float,
    current_version: int,
    version_of: Callable[[int], int] = int,
) -> RolloutBatch:
    """Fresh verl trajectories as llm-replay rollouts, each kept whole in `store`: rewards are
    the summed `rm_scores`, behaviour log-probs the stored `rollout_log_probs` (required where
    `needs_behaviour`), the group `group_of(uid)`, the policy version the weights the trajectory
    started from (`min_global_steps` through `version_of`, which turns verl's version into the
    front end's unit, else `current_version`, already in it); each row carries the id `store`
    gave its trajectory."""
    group_ids = []
    for key, row in zip(keys, rows, strict=True):
        uid, _session, index = key.rsplit("_", 2)
        if index != "0":
            raise ValueError(
                f"trajectory {key!r}: an agent loop with several outputs per session is not "
                "supported yet (llm-replay replays one trajectory per session)"
            )
        if "rm_scores" not in row:
            raise ValueError(
                f"trajectory {key!r} has no rm_scores: llm-replay's sampler needs the reward "
                "computed during rollout (reward loop workers), not by a colocated reward "
                "model after sampling"
            )
        group_ids.append(group_of(uid))
    behaviour = []
    for key, row in zip(keys, rows, strict=True):
        logprobs = row.get("rollout_log_probs")
        if logprobs is None:
            if needs_behaviour:
                raise ValueError(
                    f"trajectory {key!r} has no rollout_log_probs: set "
                    "actor_rollout_ref.rollout.calculate_log_probs=true (a replayed row's "
                    "ratio is taken against the policy that generated it)"
                )
            logprobs = np.zeros(len(row["responses"]), dtype=np.float32)
        behaviour.append(np.asarray(logprobs, dtype=np.float32))
    rewards = np.array([float(row["rm_scores"].sum()) for row in rows], dtype=np.float64)
    group_array = np.asarray(group_ids, dtype=np.int64)
    versions = np.array(
        [
            current_version
            if tag.get("min_global_steps") is None
            else version_of(int(tag["min_global_steps"]))
            for tag in tags
        ],
        dtype=np.int64,
    )
    row_ids = [
        store.add(group, Trajectory(row, dict(tag)))
        for row, tag, group in zip(rows, tags, group_ids, strict=True)
    ]
    return RolloutBatch.from_ragged(
        prompt_ids=[np.asarray(row["prompts"], dtype=np.int64) for row in rows],
        completion_ids=[np.asarray(row["responses"], dtype=np.int64) for row in rows],
        behaviour_logprobs=behaviour,
        rewards=rewards,
        advantages=group_advantages(rewards, group_array, advantage),
        group_ids=group_array,
        policy_versions=versions,
        correct=rewards >= correct_threshold,
        finish_reasons=["stop"] * len(rows),
        allow_empty=True,
        row_ids=row_ids,
    )


def split_rows(data: Any, count: int) -> list[dict[str, Any]]:
    """A TransferQueue batch (a TensorDict of jagged, stacked and non-tensor fields) as one dict
    of fields per row, in the batch's order."""
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    for name in data.keys():  # noqa: SIM118 - iterating a TensorDict walks its rows
        value = data[name]
        if isinstance(value, torch.Tensor):
            parts: Sequence[Any] = list(value.unbind(0))
        elif hasattr(value, "tolist") and not isinstance(value, list):
            parts = value.tolist()
        else:
            parts = list(value)
        if len(parts) != count:
            raise ValueError(f"{name}: {len(parts)} values for {count} trajectories")
        for row, part in zip(rows, parts, strict=True):
            row[name] = part.clone() if isinstance(part, torch.Tensor) else part
    return rows
