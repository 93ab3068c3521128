"""Atomic, pickle-free checkpoints of replay tables.

Layout of a checkpoint directory::

    manifest.json        format version, table configuration, counters, RNG state, array index
    arrays/NAME.npy      one plain numpy array per entry (loaded with allow_pickle=False)
    DONE                 written last; a directory without it is refused

`save` writes everything into a sibling temporary directory, fsyncs every file and the directory,
then renames it into place (an existing checkpoint is moved aside first and removed after), so a
crash leaves either the old checkpoint or the new one, never a mixture. Nothing is unpickled on
load: object arrays are refused by numpy, and the manifest is JSON. Each array's dtype and shape
are checked against the manifest before use.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llm_replay.buffer.table import ReplayTable

FORMAT = "llm-replay.table"
VERSION = 1
DONE = "DONE"
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, from another format, or malformed."""


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        _fsync(path)
    _fsync(root)


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success fsync it, add DONE and rename it to `target`.

    An existing `target` is moved aside first and removed after, so a crash leaves either the old
    directory or the new one. On error the temporary directory is removed and `target` untouched.
    """
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        (tmp / DONE).write_text("ok\n")
        _fsync_tree(tmp)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        _fsync(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_atomic_dir(target: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """Write manifest + arrays as a checkpoint directory at `target`, atomically."""
    with atomic_directory(target) as tmp:
        (tmp / "arrays").mkdir()
        index = {}
        for name, array in arrays.items():
            if array.dtype.hasobject:
                raise CheckpointError(f"array {name!r} holds Python objects; refusing to save")
            np.save(tmp / "arrays" / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            index[name] = {"dtype": array.dtype.str, "shape": list(array.shape)}
        body = dict(manifest, format=FORMAT, format_version=VERSION, arrays=index)
        (tmp / MANIFEST).write_text(json.dumps(body, indent=1, sort_keys=True))
    return target.resolve()


def read_checkpoint_dir(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and verify a checkpoint directory written by `write_atomic_dir`."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: no checkpoint directory there")
    if not (path / DONE).is_file():
        raise CheckpointError(
            f"{path}: no {DONE} marker; the checkpoint is incomplete (interrupted save?)"
        )
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path / MANIFEST}: unreadable manifest ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an llm-replay table checkpoint")
    if manifest.get("format_version") != VERSION:
        raise CheckpointError(
            f"{path}: format_version = {manifest.get('format_version')!r}, expected {VERSION}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, spec in manifest.get("arrays", {}).items():
        if "/" in name or name.startswith("."):
            raise CheckpointError(f"{path}: bad array name {name!r}")
        file = path / "arrays" / f"{name}.npy"
        try:
            array = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{file}: cannot load as a plain array ({error})") from None
        if array.dtype.str != spec["dtype"] or list(array.shape) != spec["shape"]:
            raise CheckpointError(
                f"{file}: dtype/shape {array.dtype.str}{list(array.shape)} != manifest "
                f"{spec['dtype']}{spec['shape']}"
            )
        arrays[name] = array
    return manifest, arrays


def save_table(table: ReplayTable, path: Path) -> Path:
    meta, arrays = table.state()
    return write_atomic_dir(path, {"table": meta}, arrays)


def load_table(path: Path) -> ReplayTable:
    from llm_replay.buffer.table import ReplayTable

    manifest, arrays = read_checkpoint_dir(path)
    try:
        return ReplayTable.from_state(manifest["table"], arrays)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise CheckpointError(f"{path}: inconsistent checkpoint ({error!r})") from None
