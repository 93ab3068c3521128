"""The task of each of a trainer's rows (a mixture's member), read from a dataset column and carried
into the rollouts' task column, so the replay table's per-task parts (`replay.tasks`) and the
per-task statistics see the trainer's rows as they see ours (TRL: `replay_task_column`).

The code of a name is its index in the sorted names of the whole column, fixed when the trainer
is built from the train dataset: every process reads the same dataset, so the codes agree across
processes without a collective, and a round's codes travel as a tensor beside the other round
tensors (shuffled, gathered and reordered with them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


class TaskColumn:
    """`column` of the train dataset: each row's task name, coded against the column's names."""

    def __init__(self, column: str, dataset: Any, setting: str = "replay_task_column") -> None:
        names = getattr(dataset, "column_names", None)
        if names is None or column not in names:
            raise ValueError(
                f"{setting} = {column!r}: the train dataset has no such column "
                f"(its columns: {names})"
            )
        values = list(dataset[column])
        bad = next((v for v in values if not isinstance(v, str) or not v), None)
        if bad is not None or not values:
            raise ValueError(
                f"{setting} = {column!r}: every row needs a non-empty task name (found {bad!r})"
            )
        self.column = column
        self.setting = setting
        self.names: tuple[str, ...] = tuple(sorted(set(values)))
        self._code = {name: i for i, name in enumerate(self.names)}

    def codes(self, rows: Sequence[dict[str, Any]], device: Any) -> Tensor:
        """The task code of each input row (one row a completion), on `device`."""
        try:
            codes = [self._code[row[self.column]] for row in rows]
        except KeyError as error:
            raise ValueError(
                f"{self.setting} = {self.column!r}: row task {error.args[0]!r} is not in "
                f"the train dataset's column ({list(self.names)})"
            ) from None
        return torch.tensor(codes, dtype=torch.int64, device=device)
