"""The durable log's record format, and the reader that tells a torn tail from damage.

A record (format 2, magic `LRJ2`)::

    MAGIC | lsn u64 | header length u32 | data length u64 | body CRC-32 u32 | head CRC-32 u32
    JSON header (the operation, its scalars, and each array's dtype, shape and byte range)
    the arrays' raw bytes
    END marker (4 bytes, never zero)

The body CRC covers the JSON header and the data; the head CRC covers the 28 bytes before it, so
a damaged length or sequence number is caught instead of being believed. No pickle anywhere.

**Torn or damaged.** A crash can only damage the end of the log: the last record (or the last
few, where several were written but not yet fsynced) can be cut short, or — after a power cut on
a file system that grew the file before its data reached the disk — read back as a prefix of
what was written followed by zeros. Everything else is damage. So a bad record at byte `b` of the
last segment is a *torn tail*, dropped by the caller, only when what is there is provably such a
remainder:

- its fixed header is incomplete or fails its CRC, and every byte from `b` + 32 to the end of
  the file is zero (the header's written prefix starts with the marker); or
- its header is whole and checks, and the record runs past the end of the file; or
- its header checks, its body does not, and its END marker and every byte after it are zero.

A record whose body checks is kept even if its END marker was cut at the end of the file (its
content is proven; only the marker's write was lost), so a damaged marker byte loses nothing.

Anything else — a record followed by a valid one, a bad CRC under an intact END marker, a flipped
byte in a length, a sequence number out of line — is damage, and raises `CheckpointError` naming
the file and the byte. A complete record always has a non-zero JSON header after its fixed
header and a non-zero END marker, so no single damaged byte of a whole record reads as a tear.
The price of that rule: a power cut that wrote a record's end before one of its middle pages
(possible on some file systems under `fsync="never"` or `"every"`) is refused rather than cut;
the error names the byte where the unacknowledged tail begins, and truncating the file there is
the user's decision to make.

Logs of format 1 (`LRJ1`, no head CRC, no END marker) are still read, so that a table written
by an older llm-replay opens (and is rewritten in format 2 by the compaction that follows). For
them a bad record is torn only if it is the last thing in the file that carries a record marker;
a damaged length in format 1's last record cannot be told from a tear, which is why format 2 exists.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_replay.buffer.checkpoint import CheckpointError
from llm_replay.data.batch import RolloutBatch
from llm_replay.data.columns import ROW_COLUMNS, ROW_NAMES

MAGIC = b"LRJ2"
END = b"LRJE"
HEAD = struct.Struct("<4sQIQII")  # magic, lsn, header length, data length, body crc, head crc
LEGACY_MAGIC = b"LRJ1"
LEGACY_HEAD = struct.Struct("<4sQIQI")  # magic, lsn, header length, data length, body crc
BATCH_ARRAYS = (
    "prompt_ids",
    "prompt_lengths",
    "completion_ids",
    "completion_lengths",
    "behaviour_logprobs",
    "task_codes",
    *ROW_NAMES,
)
OPTIONAL_BATCH_ARRAYS = tuple(column.name for column in ROW_COLUMNS if column.added)
"""Columns a record written before they existed lacks (the batch fills their default)."""


@dataclass(frozen=True)
class Record:
    """One whole record read back: where it starts and ends in its segment, and what it says."""

    start: int
    end: int
    lsn: int
    op: str
    fields: dict[str, Any]


class _Bad(Exception):
    def __init__(self, problem: str, torn: bool) -> None:
        super().__init__(problem)
        self.problem, self.torn = problem, torn


def encode_record(lsn: int, op: str, fields: dict[str, Any]) -> bytes:
    """One log record: `op` with its scalar fields and numpy / RolloutBatch fields."""
    header: dict[str, Any] = {"op": op, "scalars": {}, "arrays": []}
    chunks: list[bytes] = []
    offset = 0

    def add(name: str, array: np.ndarray) -> None:
        nonlocal offset
        data = np.ascontiguousarray(array).tobytes()
        header["arrays"].append([name, array.dtype.str, list(array.shape), offset, len(data)])
        chunks.append(data)
        offset += len(data)

    for name, value in fields.items():
        if isinstance(value, RolloutBatch):
            for column in BATCH_ARRAYS:
                add(f"{name}.{column}", getattr(value, column))
            header["scalars"][f"{name}.task_names"] = list(value.task_names)
            header["scalars"][f"{name}.allow_empty"] = bool(value.allow_empty)
        elif isinstance(value, np.ndarray):
            add(name, value)
        else:
            header["scalars"][name] = value
    head = json.dumps(header, separators=(",", ":")).encode()
    data = b"".join(chunks)
    crc = zlib.crc32(data, zlib.crc32(head))
    fixed = HEAD.pack(MAGIC, lsn, len(head), len(data), crc, 0)[: HEAD.size - 4]
    return fixed + struct.pack("<I", zlib.crc32(fixed)) + head + data + END


def decode_fields(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, size in header["arrays"]:
        kind = np.dtype(dtype)
        if kind.hasobject:
            raise ValueError(f"array {name!r} would hold objects")
        count = size // kind.itemsize
        arrays[name] = np.frombuffer(data, dtype=kind, count=count, offset=offset).reshape(shape)
    batches = {name.split(".")[0] for name in arrays if "." in name}
    for batch in batches:
        columns = {
            c: arrays.pop(f"{batch}.{c}")
            for c in BATCH_ARRAYS
            if c not in OPTIONAL_BATCH_ARRAYS or f"{batch}.{c}" in arrays
        }
        fields[batch] = RolloutBatch(
            **columns,
            task_names=tuple(header["scalars"].pop(f"{batch}.task_names")),
            allow_empty=header["scalars"].pop(f"{batch}.allow_empty"),
        )
    fields.update(arrays)
    fields.update(header["scalars"])
    return fields


def _zero_from(data: bytes, start: int) -> bool:
    """Whether every byte from `start` to the end is zero (what a power cut's tail reads as)."""
    return not data[start:].strip(b"\0")


def _parse(data: bytes, offset: int) -> tuple[int, int, int, int]:
    """(lsn, body start, JSON header end, body end) of the format-2 record at `offset`, or
    _Bad. A body that checks under an end marker cut short (or zero-filled) at the end of the
    file is a whole record: its content is proven, only the marker's last write was lost."""
    rest = len(data) - offset
    fixed = data[offset : offset + HEAD.size]
    written = len(fixed.rstrip(b"\0"))
    plausible_prefix = MAGIC.startswith(fixed[: min(written, 4)])
    if rest < HEAD.size:
        raise _Bad("a record header cut short", torn=plausible_prefix)
    magic, lsn, head_len, data_len, crc, head_crc = HEAD.unpack_from(data, offset)
    if magic != MAGIC or zlib.crc32(fixed[: HEAD.size - 4]) != head_crc:
        torn = plausible_prefix and _zero_from(data, offset + HEAD.size)
        problem = "no record marker" if magic != MAGIC else "a record header whose checksum fails"
        raise _Bad(problem, torn)
    body = offset + HEAD.size
    body_end = body + head_len + data_len
    if body_end > len(data):
        raise _Bad("a record cut short", torn=True)
    if zlib.crc32(memoryview(data)[body:body_end]) != crc:
        raise _Bad("a record whose checksum does not match", torn=_zero_from(data, body_end))
    marker = data[body_end : body_end + len(END)].rstrip(b"\0")
    if marker != END and not (END.startswith(marker) and _zero_from(data, body_end + len(marker))):
        raise _Bad("a record without its end marker", torn=False)
    return lsn, body, body + head_len, body_end


def _parse_legacy(data: bytes, offset: int) -> tuple[int, int, int, int]:
    """`_parse` for a format-1 record: torn only if no record marker follows it."""

    def last() -> bool:
        return data.find(LEGACY_MAGIC, offset + 4) < 0 and data.find(MAGIC, offset + 4) < 0

    if len(data) - offset < LEGACY_HEAD.size:
        raise _Bad("a record header cut short", torn=last())
    _, lsn, head_len, data_len, crc = LEGACY_HEAD.unpack_from(data, offset)
    body = offset + LEGACY_HEAD.size
    end = body + head_len + data_len
    if end > len(data):
        raise _Bad("a record cut short", torn=last())
    if zlib.crc32(memoryview(data)[body:end]) != crc:
        raise _Bad("a record whose checksum does not match", torn=end == len(data) and last())
    return lsn, body, body + head_len, end


def read_segment(path: Path, *, last: bool) -> Iterator[Record]:
    """Every whole record of one segment, in order. A torn tail of the last segment ends the
    iteration (the caller cuts the file at the last record's end); any other bad record raises
    `CheckpointError` naming the file and the byte where the bad record starts."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    offset = 0
    while offset < len(data):
        parse = _parse_legacy if data[offset : offset + 4] == LEGACY_MAGIC else _parse
        try:
            lsn, body, head_end, body_end = parse(data, offset)
        except _Bad as bad:
            if last and bad.torn:
                return
            raise CheckpointError(f"{path}: {bad.problem} at byte {offset}") from None
        try:
            header = json.loads(data[body:head_end])
            fields = decode_fields(header, data[head_end:body_end])
            op = header["op"]
        except (ValueError, TypeError, KeyError) as error:  # checksummed, yet not ours
            raise CheckpointError(
                f"{path}: a record that does not decode at byte {offset} ({error})"
            ) from None
        end = min(len(data), body_end + (len(END) if parse is _parse else 0))
        yield Record(offset, end, lsn, op, fields)
        offset = end
