"""The advantages a method decided, for a trainer that computes them again by row id.

Some trainers recompute every row's advantage in a step of their own, grouped by a row id (verl
by `uid`, from `rm_scores`). A replayed row alone in its group would get zero there, and a
method may change what a row's advantage is (a sampling weight, a discount for a stale reward).
So the front end gives each row it returns an id of its own, books the method's advantage under
it, and the trainer's advantage step, replaced by one that reads the book, gets them back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence


class AdvantageBook:
    """row id → advantage for the rows of the step being trained. A trainer's subclass names
    its ids (`noun`) and says, for an id nothing booked, how the trainer must be set up for the
    book to be written (`missing`)."""

    noun = "row"
    missing = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}

    def write(self, ids: Sequence[str], advantages: Sequence[float]) -> None:
        if len(ids) != len(advantages):
            raise ValueError(f"advantages: {len(advantages)} values for {len(ids)} row ids")
        with self._lock:
            self._values.update(zip(ids, (float(a) for a in advantages), strict=True))

    def forget(self, ids: Iterable[str]) -> None:
        with self._lock:
            for row_id in ids:
                self._values.pop(row_id, None)

    def get(self, ids: Sequence[str]) -> list[float | None]:
        """Each id's advantage, None where none is booked."""
        with self._lock:
            return [self._values.get(row_id) for row_id in ids]

    def read(self, ids: Sequence[str]) -> list[float]:
        with self._lock:
            missing = [row_id for row_id in ids if row_id not in self._values]
            if missing:
                raise KeyError(
                    f"{self.noun} {missing[0]!r}: no advantage booked by llm-replay's front "
                    f"end. {self.missing}"
                )
            return [self._values[row_id] for row_id in ids]
