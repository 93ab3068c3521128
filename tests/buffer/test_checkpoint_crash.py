"""A crash at any step of a table save leaves a complete checkpoint, and the next save repairs.

Also the two windows the acceptance suite found: a kill between moving the old checkpoint aside
and renaming the new one in (nothing at the path), and Ctrl-C while the old one is being removed
(a second save used to fail with "Directory not empty").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from llm_replay.buffer import CheckpointError, ReplayTable
from llm_replay.buffer import checkpoint as ckpt
from tests.conftest import make_batch
from tests.crash import count_steps, kill_at_step

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def two_states(tmp_path: Path) -> tuple[ReplayTable, ReplayTable, Path]:
    rng = np.random.default_rng(0)
    table = ReplayTable(64, seed=3)
    table.insert(make_batch(rng, 16))
    old = ReplayTable.load(table.save(tmp_path / "table"))
    table.insert(make_batch(rng, 8, first_group=16))
    table.sample(4)
    return old, table, tmp_path / "table"


def inserts(path: Path) -> int:
    return ReplayTable.load(path).stats().inserts


def test_sigkill_at_every_step_of_a_save_leaves_a_complete_checkpoint(tmp_path: Path) -> None:
    old, new, target = two_states(tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(target, pristine)
    steps = count_steps(lambda: new.save(target))
    assert steps > 20
    seen = set()
    for k in range(steps):
        shutil.rmtree(target, ignore_errors=True)
        for leftover in ckpt._siblings(target):
            shutil.rmtree(leftover)
        shutil.copytree(pristine, target)
        killed, _ = kill_at_step(k, lambda: new.save(target))
        assert killed
        found = inserts(target)  # resolves to what the crash left complete
        assert found in (old.stats().inserts, new.stats().inserts), k
        seen.add(found)
        new.save(target)  # the next save repairs and leaves only the checkpoint
        assert sorted(p.name for p in target.parent.iterdir()) == ["pristine", "table"]
        assert inserts(target) == new.stats().inserts
    assert seen == {old.stats().inserts, new.stats().inserts}, "both windows were hit"


def test_nothing_at_the_path_recovers_the_newest_complete_sibling(tmp_path: Path) -> None:
    old, new, target = two_states(tmp_path)
    aside = tmp_path / ".table.old-123"
    os.replace(target, aside)  # the old checkpoint was moved aside ...
    staged = new.save(tmp_path / "staged")
    os.replace(staged, tmp_path / ".table.tmp-abc")  # ... and the sealed new one not renamed in
    assert not target.exists()
    assert inserts(target) == new.stats().inserts
    (tmp_path / ".table.tmp-abc" / "DONE").unlink()  # an unsealed new one is never used
    assert inserts(target) == old.stats().inserts


def test_interrupt_while_removing_the_old_checkpoint_then_save_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, new, target = two_states(tmp_path)
    real_rmtree = shutil.rmtree
    calls = []

    def interrupted(path: object, *args: object, **kwargs: object) -> None:
        calls.append(path)
        if ".old-" in str(path) and len(calls) == 1:
            (Path(str(path)) / "manifest.json").unlink()  # half removed ...
            raise KeyboardInterrupt  # ... when Ctrl-C lands
        real_rmtree(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ckpt.shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        new.save(target)
    assert inserts(target) == new.stats().inserts
    new.insert(make_batch(np.random.default_rng(1), 4, first_group=99))
    new.save(target)  # used to fail: OSError Directory not empty
    assert inserts(target) == new.stats().inserts
    assert [p.name for p in tmp_path.iterdir()] == ["table"]


def test_failed_save_puts_the_old_checkpoint_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new, target = two_states(tmp_path)
    real_replace = os.replace

    def fail_second(src: object, dst: object) -> None:
        if ".tmp-" in str(src):
            raise KeyboardInterrupt  # between moving the old aside and renaming the new in
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(ckpt.os, "replace", fail_second)
    with pytest.raises(KeyboardInterrupt):
        new.save(target)
    monkeypatch.undo()
    assert inserts(target) == old.stats().inserts
    assert [p.name for p in tmp_path.iterdir()] == ["table"]


@pytest.mark.parametrize(
    "damage",
    ["truncate_npy", "empty_npy", "flip_byte", "pickle_manifest", "delete_array", "done_garbage"],
)
def test_every_corruption_is_a_checkpoint_error(tmp_path: Path, damage: str) -> None:
    _, new, target = two_states(tmp_path)
    new.save(target)
    array = target / "arrays" / "storage.prompt_ids.npy"
    if damage == "truncate_npy":
        array.write_bytes(array.read_bytes()[:40])
    elif damage == "empty_npy":
        array.write_bytes(b"")
    elif damage == "flip_byte":
        data = bytearray(array.read_bytes())
        data[-1] ^= 0xFF
        array.write_bytes(bytes(data))
    elif damage == "pickle_manifest":
        import pickle

        (target / "manifest.json").write_bytes(pickle.dumps({"format": "x"}))
    elif damage == "delete_array":
        array.unlink()
    else:
        (target / "DONE").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CheckpointError):
        ReplayTable.load(target)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("counters", "not a dict"),
        ("eviction", {"max_rollouts": "64"}),
        ("rng", {"bit_generator": "PCG64", "state": "x"}),
        ("evictions", {"surprise": 3}),
        ("sampler", {"name": "nope", "config": {}}),
        ("storage", {"capacity": 64, "fresh_slot": 999}),
        ("seed", -4),
        ("rate_limiter", None),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_a_checkpoint_error(
    tmp_path: Path, field: str, value: object
) -> None:
    import json

    _, new, target = two_states(tmp_path)
    new.save(target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["table"][field] = value
    (target / "manifest.json").write_text(json.dumps(manifest))
    (target / "DONE").unlink()
    ckpt._write_done(target)  # forged so the checksum passes: the parser must refuse it
    with pytest.raises(CheckpointError, match=r"inconsistent checkpoint|manifest"):
        ReplayTable.load(target)
