"""Where the storage's token arena lives: in RAM, or memory-mapped from a file on disk.

`MemoryArena` allocates plain numpy arrays. `DiskArena(directory)` allocates each arena buffer as
a memory-mapped file there (`arena-N.i32`), so a table can hold more token bytes than fit in RAM:
the kernel pages the payload in and out. Two details keep that true in practice:

- *Resident memory stays bounded.* Pages a process has touched count in its resident set until it
  lets go of them, and every insert writes and every sample reads arena pages. So the arena counts
  the bytes written and read since it last let go, and past `resident_budget` it calls
  `madvise(MADV_DONTNEED)` on its mapping: the pages leave this process (the data stays in the
  file and, while memory allows, in the kernel's page cache, which is reclaimable and not the
  process's). Reading them again faults them back in.
- *Old buffers are unlinked, not closed.* A growth or compaction installs a new buffer and
  unlinks the old file; pinned rows that still read it keep the mapping (and so the data) alive
  until their copy is done.

The files are scratch space for this process, not a persistence format (a durable table's log and
snapshots are that): opening a table over an existing arena directory starts fresh files.
"""

from __future__ import annotations

import itertools
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]

GROWTH = 1.125
"""Minimum growth factor of the arena when the projection is exceeded."""

MAX_GROWTH_STEP = 8.0
"""One growth never allocates more than this multiple of what is needed now."""

HEADROOM = 1.05
"""The arena is sized to the projected steady state plus this margin."""

UNIT_BYTES = 4
"""Bytes per arena unit: a token id (int32) or a behaviour log-prob (float32)."""

COPY_UNITS = 1 << 21
"""A growth or compaction copies at most this many units (8 MiB) between page releases."""


def guard_for(max_len: int) -> int:
    """Units kept after the ring so a row window of the widest batch never leaves the buffer."""
    return max(1024, 2 * max_len)


class MemoryArena:
    """Arena buffers in RAM."""

    disk = False

    def new(self, units: int, *, zeroed: bool = True) -> I32:
        return np.zeros(units, dtype=np.int32) if zeroed else np.empty(units, dtype=np.int32)

    def touched(self, nbytes: int) -> None:
        """`nbytes` of the arena were written or read (only a disk arena keeps count)."""

    def describe(self) -> dict[str, Any]:
        return {"kind": "memory"}


class DiskArena(MemoryArena):
    """Arena buffers memory-mapped from files in `directory` (see the module docstring)."""

    disk = True

    def __init__(self, directory: str | Path, *, resident_budget: int = 64 << 20) -> None:
        if resident_budget < 1 << 16:
            raise ValueError(f"resident_budget = {resident_budget!r}: must be at least 64 KiB")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("arena-*.i32"):
            stale.unlink()
        self.resident_budget = int(resident_budget)
        self._numbers = itertools.count()
        self._current: np.memmap | None = None
        self._path: Path | None = None
        self._since_release = 0
        self.releases = 0

    def new(self, units: int, *, zeroed: bool = True) -> I32:
        path = self.directory / f"arena-{next(self._numbers)}.i32"
        with path.open("wb") as handle:  # a sparse file of the right length: zeros for free
            handle.truncate(max(1, units) * 4)
        array = np.memmap(path, dtype=np.int32, mode="r+", shape=(units,))
        mapping = getattr(array, "_mmap", None)
        if mapping is not None:  # samples read scattered rows: no read-ahead around them
            mapping.madvise(mmap.MADV_RANDOM)
        if self._path is not None:
            self._path.unlink(missing_ok=True)  # pinned readers keep their mapping
        self._current, self._path = array, path
        self._since_release = 0
        return array

    def touched(self, nbytes: int) -> None:
        self._since_release += int(nbytes)
        if self._since_release > self.resident_budget:
            self.release()

    def release(self) -> None:
        """Let go of every arena page this process holds (the data stays in the file)."""
        self._since_release = 0
        mapping = getattr(self._current, "_mmap", None)
        if mapping is not None:
            mapping.madvise(mmap.MADV_DONTNEED)
            self.releases += 1

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "disk",
            "directory": str(self.directory),
            "resident_budget": self.resident_budget,
            "file_bytes": os.path.getsize(self._path) if self._path else 0,
        }


def batch_nbytes(batch: Any) -> int:
    """Payload bytes a `RolloutBatch` takes once stored: ids and completion log-probs, 4 B each."""
    return UNIT_BYTES * int(batch.prompt_ids.size + 2 * batch.completion_ids.size)
