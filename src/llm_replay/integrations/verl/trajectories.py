"""verl trajectories kept whole beside the replay table, so a replayed row goes back to verl as it came.

The replay table holds what a method decides with (tokens, behaviour log-probs, rewards, groups,
versions); a verl trajectory carries more (`position_ids`, `raw_prompt`, `data_source`,
`reward_model`, `extra_fields`, ...), and verl's trainer reads some of it after sampling. So every
fresh trajectory's fields and TransferQueue tag are kept here under the row's content key (its
group and its response tokens, which a drawn `Sample` row still has), dropped once no table the
method keeps holds a row of its group, and written without pickle: tensors to safetensors with
their dtypes, the rest to JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.data.batch import RolloutBatch

ContentKey = tuple[int, bytes]
ROWS_FILE = "trajectories.json"
TENSORS_FILE = "trajectories.safetensors"


def content_key(group_id: int, response_ids: Any) -> ContentKey:
    """A row's identity across the table and verl: its group and its response tokens."""
    tokens = np.asarray(response_ids, dtype=np.int64).astype(np.int32)
    return int(group_id), tokens.tobytes()


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
    front end's unit, else `current_version`, already in it)."""
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
    for row, tag, group in zip(rows, tags, group_ids, strict=True):
        store.add(content_key(group, row["responses"]), Trajectory(row, dict(tag)))
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
    )


@dataclass(frozen=True)
class Trajectory:
    """One verl trajectory: its fields (tensors and plain values) and its TransferQueue tag."""

    fields: dict[str, Any]
    tag: dict[str, Any]


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


def _plain(value: Any, where: str) -> Any:
    """`value` as JSON can hold it, or a ValueError naming `where`."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(
        f"{where}: a {type(value).__name__} cannot be saved without pickle (tensors and JSON "
        "values can); llm-replay's verl sampler keeps text trajectories"
    )


class TrajectoryStore:
    """Trajectories by content key; several rows with the same key (the same response to the same
    prompt) share one entry, which is what training on either of them sees."""

    def __init__(self) -> None:
        self._rows: dict[ContentKey, Trajectory] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, key: ContentKey, trajectory: Trajectory) -> None:
        self._rows.setdefault(key, trajectory)

    def get(self, key: ContentKey) -> Trajectory:
        try:
            return self._rows[key]
        except KeyError:
            raise LookupError(
                f"group {key[0]}: a drawn row has no verl trajectory (was the table filled "
                "outside this sampler, e.g. by init_from?)"
            ) from None

    def groups(self) -> set[int]:
        return {group for group, _ in self._rows}

    def prune(self, live_groups: Iterable[int]) -> int:
        """Drop the trajectories of groups no table holds any more; returns how many."""
        live = set(int(g) for g in live_groups)
        dead = [key for key in self._rows if key[0] not in live]
        for key in dead:
            del self._rows[key]
        return len(dead)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        rows = []
        for index, ((group, tokens), trajectory) in enumerate(self._rows.items()):
            plain: dict[str, Any] = {}
            tensor_names = []
            for name, value in trajectory.fields.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"{index}/{name}"] = value.contiguous()
                    tensor_names.append(name)
                else:
                    plain[name] = _plain(value, f"trajectory field {name}")
            rows.append(
                {
                    "group": group,
                    "response": np.frombuffer(tokens, dtype=np.int32).tolist(),
                    "tensors": tensor_names,
                    "fields": plain,
                    "order": list(trajectory.fields),
                    "tag": _plain(trajectory.tag, "trajectory tag"),
                }
            )
        save_file(tensors, str(directory / TENSORS_FILE))
        (directory / ROWS_FILE).write_text(json.dumps(rows))

    @classmethod
    def load(cls, directory: Path) -> TrajectoryStore:
        store = cls()
        rows = json.loads((directory / ROWS_FILE).read_text())
        tensors = load_file(str(directory / TENSORS_FILE))
        for index, row in enumerate(rows):
            values = dict(row["fields"])
            for name in row["tensors"]:
                values[name] = tensors[f"{index}/{name}"]
            fields = {name: values[name] for name in row["order"]}
            store.add(
                content_key(row["group"], row["response"]), Trajectory(fields, dict(row["tag"]))
            )
        return store
