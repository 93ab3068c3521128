"""The trainer's own fields of each row, kept beside the replay table, so a replayed row goes back
to the trainer as it came.

The replay table holds what a method decides with (tokens, behaviour log-probs, rewards, groups,
versions); a trainer's row may carry more (verl: `position_ids`, `raw_prompt`, `data_source`,
`reward_model`, `extra_fields`, a TransferQueue tag), some of which the trainer reads after
sampling. A front end keeps each fresh row's fields here under a row id the store hands out,
which the row carries through the table in its `row_ids` column (`data.columns`), so a drawn
`Sample` row is found again by its id, never re-found by its content. It drops them once no
table the method keeps holds a row of the group (`prune`), and writes them without pickle:
tensors to safetensors with their dtypes, the rest to JSON.
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

ROWS_FILE = "trajectories.json"
TENSORS_FILE = "trajectories.safetensors"


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
    """Trajectories by row id, each with the group it belongs to."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[int, Trajectory]] = {}
        self.next_id = 0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, group: int, trajectory: Trajectory) -> int:
        """Keep `trajectory` of `group`; returns its row id."""
        row_id = self.next_id
        self._rows[row_id] = (int(group), trajectory)
        self.next_id += 1
        return row_id

    def get(self, row_id: int) -> Trajectory:
        try:
            return self._rows[int(row_id)][1]
        except KeyError:
            raise LookupError(
                f"row id {row_id}: a drawn row has no trainer row kept for it (was the table "
                "filled outside this front end, e.g. by init_from?)"
            ) from None

    def groups(self) -> set[int]:
        return {group for group, _ in self._rows.values()}

    def prune(self, live_groups: Iterable[int]) -> int:
        """Drop the trajectories of groups no table holds any more; returns how many."""
        live = set(int(g) for g in live_groups)
        dead = [row_id for row_id, (group, _) in self._rows.items() if group not in live]
        for row_id in dead:
            del self._rows[row_id]
        return len(dead)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        rows = []
        for index, (row_id, (group, trajectory)) in enumerate(self._rows.items()):
            plain: dict[str, Any] = {}
            tensor_names = []
            for name, value in trajectory.fields.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"{index}/{name}"] = value.detach().clone()  # rows may share one
                    tensor_names.append(name)
                else:
                    plain[name] = _plain(value, f"trajectory field {name}")
            rows.append(
                {
                    "id": row_id,
                    "group": group,
                    "tensors": tensor_names,
                    "fields": plain,
                    "order": list(trajectory.fields),
                    "tag": _plain(trajectory.tag, "trajectory tag"),
                }
            )
        save_file(tensors, str(directory / TENSORS_FILE))
        (directory / ROWS_FILE).write_text(json.dumps({"next_id": self.next_id, "rows": rows}))

    @classmethod
    def load(cls, directory: Path) -> TrajectoryStore:
        store = cls()
        saved = json.loads((directory / ROWS_FILE).read_text())
        if not isinstance(saved, dict):
            raise ValueError(
                f"{directory / ROWS_FILE}: kept by content key (an llm-replay before row ids); "
                "its rows cannot be matched to the table's, so this checkpoint cannot resume"
            )
        tensors = load_file(str(directory / TENSORS_FILE))
        for index, row in enumerate(saved["rows"]):
            values = dict(row["fields"])
            for name in row["tensors"]:
                values[name] = tensors[f"{index}/{name}"]
            fields = {name: values[name] for name in row["order"]}
            store._rows[int(row["id"])] = (int(row["group"]), Trajectory(fields, dict(row["tag"])))
        store.next_id = int(saved["next_id"])
        return store
