"""The durable log under damage: every flipped byte is refused by name, every torn tail that a
crash can leave is cut, a killed first open leaves an openable directory, and format-1 logs
still open."""

from __future__ import annotations

import struct
import zlib
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import CheckpointError, Fifo, ReplayTable, SampleToInsertRatio, Uniform
from llm_replay.buffer.durable import LOG, SNAPSHOT
from llm_replay.buffer.log_records import (
    END,
    HEAD,
    LEGACY_HEAD,
    LEGACY_MAGIC,
    MAGIC,
    Record,
    encode_record,
    read_segment,
)
from tests.buffer.durable_worker import numbered_batch
from tests.crash import count_steps, kill_at_step

INSERTS = 5


def written_log(directory: Path, inserts: int = INSERTS) -> tuple[Path, list[int]]:
    """A durable table in `directory` with `inserts` inserts of 4 rows (closed), its one log
    segment, and each record's start byte (plus the segment's end)."""
    table = ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    (segment,) = (directory / LOG).glob("*.seg")
    starts = [0]
    for i in range(inserts):
        table.insert(numbered_batch(i))
        starts.append(segment.stat().st_size)
    table.close()
    return segment, starts


def inserted(directory: Path) -> list[int]:
    """The batch numbers a read of `directory` holds, in order (changes nothing there)."""
    table = ReplayTable.read(directory)
    return [int(g) for g in table.storage.group_id[table.storage.live_in_order()][::4]]


def files(directory: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def read_back(segment: Path) -> int:
    """How many records a read of `segment` (as the last one) gives back."""
    return len(list(read_segment(segment, last=True)))


def record_of(starts: list[int], position: int) -> int:
    return int(np.searchsorted(starts, position, side="right")) - 1


def framing(starts: list[int]) -> list[int]:
    """Every byte of every record's fixed header and end marker."""
    out: list[int] = []
    for start, end in pairwise(starts):
        out += [*range(start, start + HEAD.size), *range(end - len(END), end)]
    return out


def test_every_flipped_byte_of_every_record_is_refused_naming_file_and_byte(
    tmp_path: Path,
) -> None:
    """The property: a flip never loses a record silently. With one byte changed, no record can
    be a crash's torn tail (a whole record has a non-zero body and end marker), so a flip of any
    header, payload or end-marker byte raises, naming the damaged record's first byte; or, for a
    marker byte flipped to zero at the very end, keeps every record (its body is proven).

    Every byte with two masks on the segment reader; through `ReplayTable.open` (which must also
    write nothing over what it refused), every framing byte and every 16th body byte."""
    directory = tmp_path / "t"
    segment, starts = written_log(directory)
    clean = segment.read_bytes()
    rng = np.random.default_rng(0)
    framing_bytes = set(framing(starts))
    through_open = framing_bytes | set(range(0, len(clean), 16))
    for position in range(len(clean)):
        record = record_of(starts, position)
        framed = position in framing_bytes
        for mask in (0xFF, 1 << int(rng.integers(8)), int(clean[position]) if framed else 0):
            if mask == 0:
                continue
            damaged = bytearray(clean)
            damaged[position] ^= mask
            segment.write_bytes(damaged)
            try:
                kept = read_back(segment)
            except CheckpointError as error:
                message = str(error)
                assert message.startswith(f"{segment}: "), message
                assert message.endswith(f" at byte {starts[record]}"), (position, message)
            else:
                assert kept == INSERTS and damaged[position] == 0, (position, mask)
                assert position >= len(clean) - len(END), position
            if mask == 0xFF and position in through_open:
                before = files(directory)
                with pytest.raises(CheckpointError, match=rf"at byte {starts[record]}$"):
                    ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
                assert files(directory) == before
    segment.write_bytes(clean)
    assert inserted(directory) == list(range(INSERTS))


def test_a_flipped_length_in_an_earlier_record_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    """The issue's reproduction: the flip used to read as a torn tail, dropping four inserts and
    making the loss permanent with a recovery checkpoint."""
    directory = tmp_path / "t"
    segment, starts = written_log(directory)
    data = bytearray(segment.read_bytes())
    data[starts[1] + 20] ^= 0xFF  # the second record's data length
    segment.write_bytes(data)
    before = files(directory)
    with pytest.raises(CheckpointError, match=rf"\.seg: .* at byte {starts[1]}$"):
        ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    assert files(directory) == before, "a refused log is left as it was"


@pytest.mark.parametrize("tail", ["truncated", "zero_filled"])
def test_every_cut_of_the_last_record_is_a_torn_tail_dropped(tmp_path: Path, tail: str) -> None:
    """A crash leaves the last record as a prefix of itself, cut off or followed by zeros, at any
    byte: the read drops exactly that record and keeps every one before (a cut inside the end
    marker keeps it: its body is whole and checks). Every cut on the segment reader; through a
    read of the table, every cut in the framing and every 16th in the body."""
    directory = tmp_path / "t"
    segment, starts = written_log(directory)
    clean = segment.read_bytes()
    start, end = starts[-2], starts[-1]
    through_table = set(framing(starts[-2:])) | set(range(start, end, 16))
    proven = end - len(END)  # past here the body is whole
    if tail == "zero_filled":  # zeros past here rewrite the body as it was
        proven = len(clean[:proven].rstrip(b"\0"))
    for k in range(start, end):
        torn = clean[:k] if tail == "truncated" else clean[:k] + bytes(end - k)
        segment.write_bytes(torn)
        kept = INSERTS if k >= proven else INSERTS - 1
        assert read_back(segment) == kept, k
        if k in through_table:
            assert inserted(directory) == list(range(kept)), k
    segment.write_bytes(clean)
    assert inserted(directory) == list(range(INSERTS))


@pytest.mark.parametrize("written", [0, 1, 3, 4, 8, 12, 13, 17, 27, 31, 32, 40, 200])
def test_opening_cuts_a_zero_filled_tail_off_for_good(tmp_path: Path, written: int) -> None:
    """What the issue saw (k = 1-3 no marker, 4-12 an uncaught JSONDecodeError, 13-17 a
    checksum error) now reopens with the four whole inserts, cuts the file at the last one, and
    goes on logging."""
    directory = tmp_path / "t"
    segment, starts = written_log(directory)
    data = segment.read_bytes()
    segment.write_bytes(data[: starts[-2] + written] + bytes(len(data) - starts[-2] - written))
    table = ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    assert table.counters.insert_calls == INSERTS - 1
    table.insert(numbered_batch(99))
    table.close()
    assert inserted(directory) == [*range(INSERTS - 1), 99]


def test_several_unsynced_records_zero_filled_are_one_torn_tail(tmp_path: Path) -> None:
    """Under fsync="never" a power cut can zero several records: from the middle of the first
    of them, everything is zeros, and the tail is dropped back to it."""
    segment, starts = written_log(tmp_path / "t")
    data = segment.read_bytes()
    cut = starts[2] + 50
    segment.write_bytes(data[:cut] + bytes(len(data) - cut))
    assert inserted(tmp_path / "t") == [0, 1]


def test_a_torn_middle_record_followed_by_a_whole_one_is_damage(tmp_path: Path) -> None:
    """Zeros inside a record that a valid record follows are not a tear: only the end can be."""
    segment, starts = written_log(tmp_path / "t")
    data = bytearray(segment.read_bytes())
    data[starts[2] + 40 : starts[3]] = bytes(starts[3] - starts[2] - 40)
    segment.write_bytes(data)
    with pytest.raises(CheckpointError, match=rf"at byte {starts[2]}$"):
        inserted(tmp_path / "t")


def test_a_missing_record_names_the_byte_where_the_gap_is(tmp_path: Path) -> None:
    segment, starts = written_log(tmp_path / "t")
    records = list(read_segment(segment, last=True))
    gap = records[:2] + records[3:]  # the third record is gone, the rest checksum fine
    segment.write_bytes(b"".join(encode_record(r.lsn, r.op, r.fields) for r in gap))
    second_end = starts[2]
    with pytest.raises(
        CheckpointError,
        match=rf"\.seg: record {records[3].lsn} at byte {second_end} follows record "
        rf"{records[1].lsn} \(a record is missing\)",
    ):
        inserted(tmp_path / "t")


def test_records_round_trip_with_their_positions(tmp_path: Path) -> None:
    segment, starts = written_log(tmp_path / "t", inserts=2)
    records = list(read_segment(segment, last=True))
    assert [(r.start, r.end, r.op) for r in records] == [
        (starts[0], starts[1], "insert"),
        (starts[1], starts[2], "insert"),
    ]
    record = segment.read_bytes()[: starts[1]]
    assert record[:4] == MAGIC and record[-len(END) :] == END
    head_crc = struct.unpack_from("<I", record, HEAD.size - 4)[0]
    assert head_crc == zlib.crc32(record[: HEAD.size - 4])
    np.testing.assert_array_equal(records[1].fields["batch"].rewards, numbered_batch(1).rewards)


def first_open(directory: Path) -> None:
    ReplayTable.open(directory, max_rollouts=100, sampler=Uniform())


def test_a_first_open_killed_at_any_step_leaves_a_directory_that_opens(tmp_path: Path) -> None:
    """Killed at each file-system step of creating a durable table, the directory opens as a new
    empty table (nothing was acknowledged) and keeps what is inserted next."""
    steps = count_steps(lambda: first_open(tmp_path / "count"))
    assert steps >= 4
    for k in range(steps):
        directory = tmp_path / f"k{k}"
        killed, _ = kill_at_step(k, lambda directory=directory: first_open(directory))
        assert killed
        table = ReplayTable.open(directory, max_rollouts=100, sampler=Uniform())
        assert table.size == 0, k
        table.insert(numbered_batch(0))
        table.close()
        assert ReplayTable.open(directory, max_rollouts=100, sampler=Uniform()).size == 4, k


def test_a_damaged_snapshot_is_refused_not_started_over(tmp_path: Path) -> None:
    """After compaction the snapshot holds everything and the log is empty: a snapshot that is
    there but incomplete must raise, never pass for an unfinished first open."""
    directory = tmp_path / "t"
    table = ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    table.insert(numbered_batch(0))
    table.checkpoint()
    table.close()
    manifest = directory / SNAPSHOT / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:-5])
    before = files(directory)
    with pytest.raises(CheckpointError, match="refusing to start the table over"):
        ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    assert files(directory) == before


def test_log_records_without_a_snapshot_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    written_log(directory, inserts=1)
    for path in (directory / SNAPSHOT).rglob("*"):
        if path.is_file():
            path.unlink()
    with pytest.raises(CheckpointError, match=r"bytes of log \(refusing to start"):
        ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())


def test_reopening_with_another_rate_limiter_is_refused_by_name(tmp_path: Path) -> None:
    limiter = SampleToInsertRatio(2.0, 4, 20.0, max_insert_batch=4, max_sample_batch=4)
    ReplayTable.open(tmp_path / "t", max_rollouts=64, rate_limiter=limiter).close()
    with pytest.raises(ValueError, match=r"^rate_limiter = .*holds a table with rate_limiter"):
        ReplayTable.open(tmp_path / "t", max_rollouts=64)
    other = SampleToInsertRatio(4.0, 4, 20.0, max_insert_batch=4, max_sample_batch=4)
    with pytest.raises(ValueError, match=r"samples_per_insert': 2\.0"):
        ReplayTable.open(tmp_path / "t", max_rollouts=64, rate_limiter=other)
    same = SampleToInsertRatio(2.0, 4, 20.0, max_insert_batch=4, max_sample_batch=4)
    table = ReplayTable.open(tmp_path / "t", max_rollouts=64, rate_limiter=same)
    table.insert(numbered_batch(0))
    table.close()
    changed = ReplayTable.read(tmp_path / "t")  # the documented way to change it
    changed.rate_limiter = other
    changed.make_durable(tmp_path / "t", replace=True).close()
    reopened = ReplayTable.open(tmp_path / "t", max_rollouts=64, rate_limiter=other)
    assert reopened.size == 4 and reopened.rate_limiter.samples_per_insert == 4.0


def encode_legacy(record: Record) -> bytes:
    """A format-1 record, as llm-replay wrote them before the head CRC and end marker."""
    whole = encode_record(record.lsn, record.op, record.fields)
    body = whole[HEAD.size : -len(END)]
    _, lsn, head_len, data_len, crc, _ = HEAD.unpack_from(whole)
    return LEGACY_HEAD.pack(LEGACY_MAGIC, lsn, head_len, data_len, crc) + body


def test_a_format_1_log_opens_its_torn_tail_is_cut_and_it_is_rewritten(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    segment, _ = written_log(directory)
    legacy = b"".join(encode_legacy(r) for r in read_segment(segment, last=True))
    segment.write_bytes(legacy)
    assert inserted(directory) == list(range(INSERTS))
    segment.write_bytes(legacy[:-7])  # torn in its last record
    assert inserted(directory) == list(range(INSERTS - 1))
    damaged = bytearray(legacy)
    damaged[60] ^= 0xFF  # the first record's body, with records after it
    segment.write_bytes(damaged)
    with pytest.raises(CheckpointError, match="checksum does not match at byte 0"):
        inserted(directory)
    segment.write_bytes(legacy)
    table = ReplayTable.open(directory, max_rollouts=64, sampler=Fifo())
    table.close()
    for path in (directory / LOG).glob("*.seg"):
        assert LEGACY_MAGIC not in path.read_bytes()
    assert inserted(directory) == list(range(INSERTS))
