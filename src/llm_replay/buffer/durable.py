"""Crash-durable tables: a snapshot plus an append-only, checksummed log of every change since.

`ReplayTable.open(DIR, ...)` gives a table whose every state change (insert, sample, take,
priority update, policy version, remove) is appended to a log in DIR before the call returns, in
the order the table applied them under its lock. Reopening DIR loads the snapshot and replays the
log, so the table comes back exactly: contents, order, keys, sampler and eviction state, counters
and RNG — its next samples equal those an uninterrupted table would draw.

Layout::

    DIR/snapshot/               a table checkpoint (`checkpoint.py`), manifest holds `lsn`
    DIR/log/LSN.seg             segments; LSN = the sequence number of the segment's first record

Records (`log_records.py`) carry a CRC over their fixed header, a CRC over their body and an
end marker, so a torn tail from a crash is told apart from damage: a tail that is provably torn
(cut short, or a written prefix followed by zeros, with nothing valid after it) is dropped and
the file cut back to the last whole record; anything else raises `CheckpointError` naming the
file and byte, and nothing is written over it.

**A new directory** becomes durable when its first snapshot is complete. A crash before that
leaves at most an empty log and a partial snapshot: nothing was acknowledged, so the next open
starts the table afresh. A directory with log records but no complete snapshot is damage.

**Durability policy** (`fsync`): every write reaches the operating system before the call
returns, so a killed process loses nothing that returned. What `fsync` adds is survival of a
power or kernel failure: `"always"` (the default) fsyncs the log on every insert, which costs a
few milliseconds against the seconds to hours of generation an insert of rollouts represents;
`"every"` fsyncs every `fsync_every` inserts (at most that many minus one lost); `"never"`
leaves it to the operating system. Sample and version records ride along with the next insert's
fsync (after a power failure the table may come back a few draws behind, never with a rollout
missing that an insert acknowledged under "always" added).

**Compaction.** `checkpoint()` writes a new snapshot atomically (it records the last sequence
number it contains), starts a new segment and deletes the older ones; a crash in between leaves
old segments whose records are all at or below the snapshot's number, and replay skips them. The
log is also compacted on its own once it holds `compact_bytes` since the last snapshot.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, Protocol, Self, cast

import numpy as np

from llm_replay.buffer.checkpoint import (
    CheckpointError,
    fsync_path,
    read_checkpoint_dir,
    resolve_checkpoint,
    write_atomic_dir,
)
from llm_replay.buffer.log_records import encode_record, read_segment
from llm_replay.checks import integer


class Table(Protocol):
    """What of a `ReplayTable` the journal reads and redoes. `table.py` imports this module (its
    `Journaled` mixin), so the table is described here rather than imported: no import cycle,
    and the journal's reach into the table is written down."""

    _log: OperationLog | None
    _cond: threading.Condition
    _tokens: set[int]
    storage: Any

    def state_unlocked(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...
    def checkpoint(self) -> None: ...
    def _apply_insert(self, batch: Any) -> Any: ...
    def _apply_sample(self, n: int) -> tuple[Any, Any, Any]: ...
    def _apply_take(self, keys: np.ndarray, *, count: bool) -> tuple[Any, Any, Any, Any]: ...
    def _apply_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> Any: ...
    def _apply_version(self, version: int) -> Any: ...
    def _apply_remove(self, keys: np.ndarray) -> Any: ...
    def _apply_scores(
        self, keys: np.ndarray, rewards: Any, advantages: Any, correct: Any, versions: Any = None
    ) -> Any: ...


SNAPSHOT = "snapshot"
LOG = "log"
FSYNC_POLICIES = ("always", "every", "never")


class OperationLog:
    """The append side of a durable table's log (one open segment, written with os.write)."""

    def __init__(
        self,
        directory: Path,
        next_lsn: int,
        *,
        fsync: str = "always",
        fsync_every: int = 16,
        compact_bytes: int = 1 << 30,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync = {fsync!r}: choose one of {FSYNC_POLICIES}")
        integer("fsync_every", fsync_every, minimum=1)
        self.directory = Path(directory)
        self.policy = fsync
        self.every = fsync_every
        self.compact_bytes = int(compact_bytes)
        self.lsn = next_lsn - 1
        self.bytes_since_snapshot = 0
        self._unsynced_inserts = 0
        self._fd = -1
        self._open_segment(next_lsn)

    def _open_segment(self, first_lsn: int) -> None:
        log_dir = self.directory / LOG
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / f"{first_lsn:020d}.seg"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.segment = path
        fsync_path(log_dir)

    def append(self, op: str, fields: dict[str, Any]) -> None:
        record = encode_record(self.lsn + 1, op, fields)
        view = memoryview(record)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.lsn += 1
        self.bytes_since_snapshot += len(record)
        if op == "insert":
            self._unsynced_inserts += 1
            if self.policy == "always" or (
                self.policy == "every" and self._unsynced_inserts >= self.every
            ):
                os.fsync(self._fd)
                self._unsynced_inserts = 0

    def rotate(self) -> None:
        """Start a new segment after a snapshot holding everything up to `lsn`; drop the old."""
        os.fsync(self._fd)
        os.close(self._fd)
        old = sorted((self.directory / LOG).glob("*.seg"))
        self._open_segment(self.lsn + 1)
        for path in old:
            if path != self.segment:  # an empty segment reopened under the same name stays
                path.unlink()
        self.bytes_since_snapshot = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def write_snapshot(table: Table, log: OperationLog) -> None:
    """Snapshot everything up to the log's last record, then start a new segment (caller holds
    the table's lock)."""
    meta, arrays = table.state_unlocked()
    write_atomic_dir(log.directory / SNAPSHOT, {"table": meta, "lsn": log.lsn}, arrays)
    log.rotate()


def apply(table: Table, op: str, fields: dict[str, Any]) -> None:
    """Redo one logged change (the caller holds the table's lock; limiters are not consulted:
    the change was admitted when it was first made)."""
    if op == "insert":
        table._apply_insert(fields["batch"])
        if "token" in fields:
            table._tokens.add(int(fields["token"]))
    elif op == "sample":
        pin, _, _ = table._apply_sample(int(fields["n"]))
        table.storage.unpin(pin)
    elif op == "take":
        pin, _, _, _ = table._apply_take(fields["keys"].astype(np.int64), count=True)
        table.storage.unpin(pin)
    elif op == "priorities":
        table._apply_priorities(fields["keys"].astype(np.int64), fields["priorities"])
    elif op == "version":
        table._apply_version(int(fields["version"]))
    elif op == "remove":
        table._apply_remove(fields["keys"].astype(np.int64))
    elif op == "scores":
        keys = fields["keys"].astype(np.int64)
        table._apply_scores(
            keys,
            fields["rewards"],
            fields["advantages"],
            fields["correct"],
            fields.get("reward_versions"),
        )
    else:
        raise CheckpointError(f"unknown log operation {op!r}")


def open_table(
    cls: Any,
    directory: str | Path,
    *,
    fsync: str = "always",
    fsync_every: int = 16,
    compact_bytes: int = 1 << 30,
    **table_kwargs: Any,
) -> Table:
    """A durable table in `directory`: recovered if it holds one, else new from `table_kwargs`."""
    return journal_table(
        cls(**table_kwargs),
        directory,
        fsync=fsync,
        fsync_every=fsync_every,
        compact_bytes=compact_bytes,
    )


def journal_table(
    table: Table,
    directory: str | Path,
    *,
    replace: bool = False,
    fsync: str = "always",
    fsync_every: int = 16,
    compact_bytes: int = 1 << 30,
) -> Table:
    """Make a table built in memory durable in `directory`.

    If the directory already holds a durable table it is recovered (it must have `table`'s
    capacities and sampler) and returned instead of `table`, unless `replace` is set: then the
    directory's old snapshot and log are dropped and `table` (loaded from a checkpoint, say) is
    what the directory holds from now on."""
    root = Path(directory)
    if table._log is not None:
        raise ValueError(f"directory = {str(root)!r}: the table is durable already")
    options: dict[str, Any] = {
        "fsync": fsync,
        "fsync_every": fsync_every,
        "compact_bytes": compact_bytes,
    }
    if replace and root.exists():
        for stale in [root / LOG, *root.glob(f"{SNAPSHOT}*"), *root.glob(f".{SNAPSHOT}*")]:
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
    if not _holds_table(root):
        root.mkdir(parents=True, exist_ok=True)
        for segment in _segments(root):  # empty ones, left by a first open that did not finish
            segment.unlink()
        with table._cond:
            table._log = OperationLog(root, 1, **options)
            write_snapshot(table, table._log)
        return table
    recovered, lsn = recover(type(table), root, repair=True, expect=table)
    recovered._log = OperationLog(root, lsn + 1, **options)
    recovered.checkpoint()  # compact what was replayed
    return recovered


def is_durable_dir(path: str | Path) -> bool:
    """Whether `path` is (or was meant to be) a durable table's directory."""
    root = Path(path)
    return (root / SNAPSHOT).exists() or bool(list(root.glob(f".{SNAPSHOT}.*")))


def _segments(root: Path) -> list[Path]:
    return sorted((root / LOG).glob("*.seg")) if (root / LOG).is_dir() else []


def _first_lsn(segment: Path) -> int:
    """A segment is named by the sequence number of its first record."""
    try:
        return int(segment.stem)
    except ValueError:
        raise CheckpointError(f"{segment}: not a log segment name (LSN.seg)") from None


def _holds_table(root: Path) -> bool:
    """Whether `root` holds a durable table to recover. A directory whose first open was killed
    before its snapshot was renamed into place holds none: nothing was logged yet, so nothing
    was acknowledged. A snapshot that is there but incomplete, or log records without one, are
    damage, and raise."""
    if not is_durable_dir(root):
        return False
    try:
        resolve_checkpoint(root / SNAPSHOT)
        return True
    except CheckpointError as missing:
        logged = [p for p in _segments(root) if p.stat().st_size > 0]
        replaced = list(root.glob(f".{SNAPSHOT}.old-*"))
        if (root / SNAPSHOT).exists() or replaced or logged:
            held = f"; {logged[0]} holds {logged[0].stat().st_size} bytes of log" if logged else ""
            raise CheckpointError(f"{missing}{held} (refusing to start the table over)") from None
        return False


def recover(
    cls: Any, root: Path, *, repair: bool, expect: Table | None = None
) -> tuple[Table, int]:
    """The table a durable directory holds (snapshot + log replayed) and its last sequence
    number; `repair` cuts a torn tail off the log (read-only callers leave it)."""
    manifest, arrays = read_checkpoint_dir(resolve_checkpoint(root / SNAPSHOT))
    saved_meta = manifest["table"]
    if expect is not None:
        from llm_replay.buffer.table_state import table_arguments

        _check_same_config(table_arguments(saved_meta), expect, root)
    overrides: dict[str, Any] = {}
    if expect is not None and expect.storage.arena_store.disk:
        store = expect.storage.arena_store
        overrides = {"arena_dir": store.directory, "resident_budget": store.resident_budget}
    table = cls.from_state(saved_meta, arrays, **overrides)
    lsn = int(manifest["lsn"])
    segments = _segments(root)
    with table._cond:
        for index, path in enumerate(segments):
            last = index == len(segments) - 1
            if not last and _first_lsn(segments[index + 1]) - 1 <= lsn:
                continue  # wholly in the snapshot: left by a crash before its deletion
            good = 0
            for record in read_segment(path, last=last):
                good = record.end
                if record.lsn <= lsn:
                    continue
                if record.lsn != lsn + 1:
                    raise CheckpointError(
                        f"{path}: record {record.lsn} at byte {record.start} follows record "
                        f"{lsn} (a record is missing)"
                    )
                apply(table, record.op, record.fields)
                lsn = record.lsn
            if repair and last and good < path.stat().st_size:
                with path.open("r+b") as handle:  # drop the torn tail for good
                    handle.truncate(good)
                    os.fsync(handle.fileno())
    return table, lsn


def _check_same_config(saved: dict[str, Any], fresh: Table, root: Path) -> None:
    from llm_replay.buffer.table_state import table_arguments

    meta, _ = fresh.state_unlocked()
    wanted = table_arguments(meta)
    for key in (
        "max_rollouts",
        "max_tokens",
        "max_age",
        "max_times_sampled",
        "max_bytes",
        "max_items",
        "groups_per_item",
    ):
        if saved[key] != wanted[key]:
            raise ValueError(
                f"{key} = {wanted[key]!r}: {root} holds a table with {key} = {saved[key]!r}"
            )
    if saved["sampler"].config() != wanted["sampler"].config() or type(
        saved["sampler"]
    ) is not type(wanted["sampler"]):
        raise ValueError(f"sampler: {root} holds a table with another sampler or settings")
    saved_remover, wanted_remover = saved["remover"], wanted["remover"]
    if type(saved_remover) is not type(wanted_remover) or (
        saved_remover is not None and saved_remover.config() != wanted_remover.config()
    ):
        raise ValueError(f"remover: {root} holds a table with another remover or settings")
    if saved["rate_limiter"].config() != wanted["rate_limiter"].config():
        raise ValueError(
            f"rate_limiter = {wanted['rate_limiter'].config()}: {root} holds a table with "
            f"rate_limiter = {saved['rate_limiter'].config()} (its counts belong to that limiter)"
        )


class Journaled:
    """The durable side of `ReplayTable` (mixed in): `open`, the journal hook, `checkpoint`."""

    _log: OperationLog | None
    _cond: threading.Condition

    @classmethod
    def open(cls, directory: str | Path, **kwargs: Any) -> Self:
        """A crash-durable table kept in `directory` (see `buffer.durable`): recovered exactly if
        the directory holds one, else created from `kwargs` (the constructor's arguments, plus
        `fsync` = "always" | "every" | "never", `fsync_every`, `compact_bytes`)."""
        return cast(Self, open_table(cls, directory, **kwargs))

    def make_durable(self, directory: str | Path, **options: Any) -> Self:
        """This table, made durable in `directory` (see `journal_table`: a directory that already
        holds a table is recovered instead, unless `replace=True`)."""
        return cast(Self, journal_table(cast(Any, self), directory, **options))

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The table in `path`, a `save()` checkpoint or a durable directory, read without
        changing anything there (a durable table's torn tail is skipped, not cut off)."""
        if is_durable_dir(path):
            return cast(Self, recover(cls, Path(path), repair=False)[0])
        return cls.load(path)  # type: ignore[attr-defined,no-any-return]

    @property
    def durable(self) -> bool:
        return self._log is not None

    def _journal(self, op: str, **fields: Any) -> None:
        """Log a change just applied (caller holds the lock); compact a log grown too long."""
        if self._log is None:
            return
        self._log.append(op, fields)
        if self._log.bytes_since_snapshot > self._log.compact_bytes:
            write_snapshot(cast(Table, self), self._log)

    def checkpoint(self) -> None:
        """Durable tables: snapshot the table and drop the log it covers."""
        if self._log is None:
            raise ValueError("checkpoint: not a durable table (use ReplayTable.open or save)")
        with self._cond:
            write_snapshot(cast(Table, self), self._log)
