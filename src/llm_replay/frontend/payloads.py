"""The trainer's own fields of each row, kept beside the replay table, so a replayed row goes back
to the trainer as it came.

The replay table holds what a method decides with (tokens, behaviour log-probs, rewards, groups,
versions); a trainer's row may carry more (verl: `position_ids`, `raw_prompt`, `data_source`,
`reward_model`, `extra_fields`, a TransferQueue tag), some of which the trainer reads after
sampling. A front end keeps each fresh row's fields here under the row's content key (its group
and its response tokens, which a drawn `Sample` row still has), drops them once no table the
method keeps holds a row of the group (`prune`), and writes them without pickle: tensors to
safetensors with their dtypes, the rest to JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

ContentKey = tuple[int, bytes]
ROWS_FILE = "trajectories.json"
TENSORS_FILE = "trajectories.safetensors"


def content_key(group_id: int, response_ids: Any) -> ContentKey:
    """A row's identity across the table and the trainer: its group and its response tokens."""
    tokens = np.asarray(response_ids, dtype=np.int64).astype(np.int32)
    return int(group_id), tokens.tobytes()


@dataclass(frozen=True)
class Trajectory:
    """One row of the trainer's: its fields (tensors and plain values) and a tag (verl: its
    TransferQueue tag)."""

    fields: dict[str, Any]
    tag: dict[str, Any]


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
        "values can); a front end keeps text rows"
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
                f"group {key[0]}: a drawn row has no trainer row kept for it (was the table "
                "filled outside this front end, e.g. by init_from?)"
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
