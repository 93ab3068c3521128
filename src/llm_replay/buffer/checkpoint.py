"""Atomic, verified, pickle-free checkpoint directories (replay tables, and training checkpoints).

Layout of a table checkpoint::

    manifest.json        format version, table configuration, counters, RNG state, array index
    arrays/NAME.npy      one plain numpy array per entry (loaded with allow_pickle=False)
    DONE                 written last: JSON listing every other file with its size and CRC-32

**Saving** (`atomic_directory`) writes into a sibling `.NAME.tmp-*` directory, fsyncs every file,
then writes and fsyncs `DONE`, moves an existing checkpoint aside to a uniquely named
`.NAME.old-*`, renames the new one into place, and removes the old one (its `DONE` first, so a
half-removed directory is never mistaken for a complete one). An error or Ctrl-C on the way puts
the old checkpoint back.

**A crash at any step leaves a complete checkpoint**, though not always at the path itself: a
kill between moving the old one aside and renaming the new one in leaves only the two siblings.
So readers go through `resolve_checkpoint`, which takes the path if it is complete and otherwise
the newest complete sibling (both are complete there); the next save repairs the directory.

**Loading never trusts the bytes.** `DONE` is checked first (every listed file present with its
size and CRC-32; a nested directory with a `DONE` of its own, such as the replay table inside a
training checkpoint, is covered by that one and checked when it is read), so truncation, bit
flips or a swapped file are caught before anything is parsed; the manifest is JSON checked field
by field; arrays load with `allow_pickle=False` and must match
the manifest's dtype and shape. Every failure is a `CheckpointError` naming the file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "llm-replay.table"
VERSION = 1
DONE = "DONE"
DONE_FORMAT = "llm-replay.done"
MANIFEST = "manifest.json"
_CHUNK = 1 << 22


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, from another format, or malformed."""


# ----------------------------------------------------------------------------- files
def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory: so a new or renamed entry in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _files(root: Path) -> list[Path]:
    """The files `root`'s DONE covers: not DONE itself, and nothing inside a nested directory
    sealed with its own DONE (a table inside a training checkpoint): that one is verified when
    it is read, so no byte is checksummed twice."""
    sealed = [p.parent for p in root.rglob(DONE) if p.parent != root]
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name != DONE and not any(d in p.parents for d in sealed)
    )


def _write_done(root: Path) -> None:
    """fsync every file and folder, then write and fsync DONE with each file's size and CRC."""
    files = _files(root)
    for path in files:
        fsync_path(path)
    for folder in sorted({p.parent for p in files}, key=lambda p: len(p.parts), reverse=True):
        fsync_path(folder)
    listing = {
        str(p.relative_to(root)): {"size": p.stat().st_size, "crc32": _crc32(p)} for p in files
    }
    body = {"format": DONE_FORMAT, "saved_ns": time.time_ns(), "files": listing}
    (root / DONE).write_text(json.dumps(body, sort_keys=True))
    fsync_path(root / DONE)
    fsync_path(root)


def _read_done(root: Path) -> dict[str, Any]:
    """DONE's content, checked against the files' sizes (cheap); CheckpointError if unusable."""
    path = root / DONE
    if not path.is_file():
        raise CheckpointError(
            f"{root}: no {DONE} marker; the checkpoint is incomplete (interrupted save?)"
        )
    try:
        body = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    files = body.get("files") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or body.get("format") != DONE_FORMAT
        or not isinstance(body.get("saved_ns"), int)
        or not isinstance(files, dict)
    ):
        raise CheckpointError(
            f"{path}: not an llm-replay completion marker (an older or foreign checkpoint?)"
        )
    for name, spec in files.items():
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("size"), int)
            or not isinstance(spec.get("crc32"), int)
            or Path(name).is_absolute()
            or ".." in Path(name).parts
        ):
            raise CheckpointError(f"{path}: malformed entry {name!r}")
        file = root / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing from the checkpoint")
        if file.stat().st_size != spec["size"]:
            raise CheckpointError(
                f"{file}: {file.stat().st_size} bytes, the checkpoint recorded {spec['size']} "
                "(truncated or replaced)"
            )
    return body


def verify_checkpoint(root: Path) -> None:
    """Raise CheckpointError unless every file DONE lists is there with its size and CRC-32."""
    body = _read_done(root)
    for name, spec in body["files"].items():
        if _crc32(root / name) != spec["crc32"]:
            raise CheckpointError(f"{root / name}: checksum mismatch (the file is corrupt)")


def _saved_ns(root: Path) -> int | None:
    try:
        return int(_read_done(root)["saved_ns"])
    except (CheckpointError, OSError):
        return None


def _siblings(target: Path) -> list[Path]:
    """Leftovers of interrupted saves of `target`: `.NAME.tmp-*` and `.NAME.old-*`."""
    if not target.parent.is_dir():
        return []
    prefixes = (f".{target.name}.tmp-", f".{target.name}.old-")
    return sorted(p for p in target.parent.iterdir() if p.is_dir() and p.name.startswith(prefixes))


def resolve_checkpoint(target: Path) -> Path:
    """Where to read `target` from: itself if complete, else its newest complete leftover.

    Read-only (a writer may be saving concurrently); the next save puts things back in place.
    """
    if _saved_ns(target) is not None:
        return target
    complete = [(ns, p) for p in _siblings(target) if (ns := _saved_ns(p)) is not None]
    if complete:
        return max(complete)[1]
    if target.is_dir():
        _read_done(target)  # raises the precise reason
    raise CheckpointError(f"{target}: no complete checkpoint there (no checkpoint directory)")


def _discard(root: Path) -> None:
    """Remove a checkpoint directory, its DONE first so that a partial removal is incomplete."""
    with suppress(OSError):
        (root / DONE).unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)


def _repair(target: Path) -> None:
    """Finish what an interrupted save left: the newest complete copy at `target`, no leftovers."""
    leftovers = _siblings(target)
    if not leftovers:
        return
    if _saved_ns(target) is None:
        complete = [(ns, p) for p in leftovers if (ns := _saved_ns(p)) is not None]
        if complete:
            if target.exists():
                _discard(target)
            os.replace(max(complete)[1], target)
            fsync_path(target.parent)
    for path in _siblings(target):
        _discard(path)


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success seal it with DONE and rename it to `target`.

    A complete checkpoint exists at every moment (at `target`, or as a sibling that readers and
    the next save recover); on error or Ctrl-C the previous checkpoint is back at `target`.
    """
    target = Path(os.path.abspath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    _repair(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    aside: Path | None = None
    try:
        yield tmp
        _write_done(tmp)
        if target.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, aside)  # an empty directory is replaced atomically
        os.replace(tmp, target)
        fsync_path(target.parent)
    except BaseException:
        if aside is not None and not target.exists():
            os.replace(aside, target)
            aside = None
        _discard(tmp)
        raise
    finally:
        if aside is not None:
            _discard(aside)


# ----------------------------------------------------------------------------- tables
def write_atomic_dir(target: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write manifest + arrays as a checkpoint directory at `target`, atomically."""
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise CheckpointError(f"array {name!r} holds Python objects; refusing to save")
    with atomic_directory(target) as tmp:
        (tmp / "arrays").mkdir()
        index = {}
        for name, array in arrays.items():
            np.save(tmp / "arrays" / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            index[name] = {"dtype": array.dtype.str, "shape": list(array.shape)}
        body = dict(manifest, format=FORMAT, format_version=VERSION, arrays=index)
        (tmp / MANIFEST).write_text(json.dumps(body, indent=1, sort_keys=True))
    return Path(os.path.abspath(target))


def _array_index(
    path: Path, manifest: dict[str, Any]
) -> dict[str, tuple[np.dtype[Any], list[int]]]:
    index = manifest.get("arrays")
    if not isinstance(index, dict):
        raise CheckpointError(f"{path / MANIFEST}: 'arrays' must be a mapping")
    out = {}
    for name, spec in index.items():
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise CheckpointError(f"{path / MANIFEST}: bad array name {name!r}")
        ok = isinstance(spec, dict) and isinstance(spec.get("dtype"), str)
        shape = spec.get("shape") if ok else None
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise CheckpointError(f"{path / MANIFEST}: malformed entry for array {name!r}")
        try:
            dtype = np.dtype(spec["dtype"])
        except TypeError:
            raise CheckpointError(f"{path / MANIFEST}: bad dtype for array {name!r}") from None
        if dtype.hasobject:
            raise CheckpointError(f"{path / MANIFEST}: array {name!r} would hold objects")
        out[name] = (dtype, shape)
    return out


def read_checkpoint_dir(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and verify a checkpoint directory written by `write_atomic_dir`."""
    path = resolve_checkpoint(Path(path))
    verify_checkpoint(path)
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path / MANIFEST}: unreadable manifest ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an llm-replay table checkpoint")
    if manifest.get("format_version") != VERSION:
        raise CheckpointError(
            f"{path}: format_version = {manifest.get('format_version')!r}, expected {VERSION}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, (dtype, shape) in _array_index(path, manifest).items():
        file = path / "arrays" / f"{name}.npy"
        try:
            array = np.load(file, allow_pickle=False)
        except Exception as error:  # truncated, foreign or pickled content: never executed
            raise CheckpointError(
                f"{file}: cannot load as a plain array ({type(error).__name__}: {error})"
            ) from None
        if array.dtype != dtype or list(array.shape) != shape:
            raise CheckpointError(
                f"{file}: dtype/shape {array.dtype.str}{list(array.shape)} != manifest "
                f"{dtype.str}{shape}"
            )
        arrays[name] = array
    return manifest, arrays
