"""Checkpoints: exact resumption, refusal of incomplete or crafted directories, atomic replace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_replay.buffer import (
    CheckpointError,
    Groups,
    PositiveRetention,
    Prioritized,
    Recency,
    ReplayTable,
    SampleToInsertRatio,
    TaskBalanced,
    TaskCapacity,
    Uniform,
)
from llm_replay.buffer.checkpoint import _write_done
from tests.conftest import make_batch

SAMPLERS = [  # the table's sampler, or its sampler and remover
    lambda: Uniform(),
    lambda: Uniform(replacement=False),
    lambda: Prioritized(alpha=0.6, beta=0.4),
    lambda: Recency(half_life=3),
    lambda: (Uniform(), PositiveRetention(delta=0.5)),
    lambda: Groups(),
    lambda: (TaskBalanced(weights={"test": 2.0}), TaskCapacity(share=0.5)),
]


def busy_table(sampler: Any, rng: np.random.Generator) -> ReplayTable:
    sampler, remover = sampler if isinstance(sampler, tuple) else (sampler, None)
    table = ReplayTable(
        96,
        sampler=sampler,
        remover=remover,
        max_tokens=3000,
        max_age=4,
        max_times_sampled=6,
        seed=11,
    )
    for step in range(14):
        table.insert(make_batch(rng, 12, version=step, first_group=12 * step))
        table.set_policy_version(step)
        table.sample(8)
        if step == 5:
            table.remove(table.storage.keys_of(table.storage.live_slots()[:3]))
    return table


@pytest.mark.parametrize("make_sampler", SAMPLERS)
def test_samples_after_load_equal_the_original(make_sampler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    original = busy_table(make_sampler(), rng)
    original.save(tmp_path / "ckpt")
    restored = ReplayTable.load(tmp_path / "ckpt")
    assert restored.stats().to_dict() == original.stats().to_dict()
    future = np.random.default_rng(99)
    for step in range(14, 20):
        batch = make_batch(future, 12, version=step, first_group=12 * step)
        assert np.array_equal(original.insert(batch), restored.insert(batch))
        original.set_policy_version(step)
        restored.set_policy_version(step)
        a, b = original.sample(8), restored.sample(8)
        for field in (
            "keys",
            "input_ids",
            "behaviour_logprobs",
            "loss_mask",
            "ages",
            "times_sampled",
            "probabilities",
            "importance_weights",
        ):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert restored.stats().to_dict() == original.stats().to_dict()


def test_rate_limiter_and_counters_survive(tmp_path: Path, rng: np.random.Generator) -> None:
    limiter = SampleToInsertRatio(2.0, 8, error_buffer=40, max_insert_batch=8, max_sample_batch=8)
    table = ReplayTable(100, rate_limiter=limiter)
    table.insert(make_batch(rng, 8))
    table.sample(8)
    restored = ReplayTable.load(table.save(tmp_path / "t"))
    assert restored.rate_limiter == table.rate_limiter
    assert restored.stats().samples == 8


def test_missing_done_marker_is_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    table = busy_table(Uniform(), rng)
    path = table.save(tmp_path / "ckpt")
    (path / "DONE").unlink()
    with pytest.raises(CheckpointError, match="no DONE marker"):
        ReplayTable.load(path)
    with pytest.raises(CheckpointError, match="no checkpoint directory"):
        ReplayTable.load(tmp_path / "nowhere")


class Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("touch pwned-by-pickle",))


def test_crafted_pickle_payload_is_never_executed(
    tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = busy_table(Uniform(), rng).save(tmp_path / "ckpt")
    target = path / "arrays" / "storage.dense.npy"
    np.save(target, np.array([Exploit()], dtype=object), allow_pickle=True)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["arrays"]["storage.dense"] = {"dtype": "|O", "shape": [1]}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"truncated or replaced|checksum"):
        ReplayTable.load(path)
    reseal(path)  # an attacker who also forges DONE gets no further
    with pytest.raises(CheckpointError, match="would hold objects"):
        ReplayTable.load(path)
    manifest["arrays"]["storage.dense"] = {"dtype": "<i4", "shape": [1]}
    (path / "manifest.json").write_text(json.dumps(manifest))
    reseal(path)
    with pytest.raises(CheckpointError, match="cannot load as a plain array"):
        ReplayTable.load(path)
    assert not (tmp_path / "pwned-by-pickle").exists()


def reseal(path: Path) -> None:
    """Recompute DONE after tampering, as an attacker who knows the format would."""
    (path / "DONE").unlink()
    _write_done(path)


def test_tampered_shapes_and_formats_are_refused(tmp_path: Path, rng: np.random.Generator) -> None:
    path = busy_table(Uniform(), rng).save(tmp_path / "ckpt")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["arrays"]["storage.dense"]["shape"] = [1]
    (path / "manifest.json").write_text(json.dumps(manifest))
    reseal(path)
    with pytest.raises(CheckpointError, match="dtype/shape"):
        ReplayTable.load(path)
    manifest["format_version"] = 99
    (path / "manifest.json").write_text(json.dumps(manifest))
    reseal(path)
    with pytest.raises(CheckpointError, match="format_version"):
        ReplayTable.load(path)
    (path / "manifest.json").write_text("{not json")
    reseal(path)
    with pytest.raises(CheckpointError, match="unreadable manifest"):
        ReplayTable.load(path)


def test_save_replaces_atomically_and_leaves_no_temporaries(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    table = busy_table(Uniform(), rng)
    table.save(tmp_path / "ckpt")
    table.insert(make_batch(rng, 4, first_group=10_000))
    table.save(tmp_path / "ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert ReplayTable.load(tmp_path / "ckpt").stats().inserts == table.stats().inserts


def test_a_positive_biased_table_saved_before_removers_loads_as_uniform_plus_retention(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    """tests/buffer/data/positive_biased_v1 was saved by the release whose "positive_biased"
    sampler was also the retention rule (16 rollouts, δ = 0.5, after 32 inserts and a sample)."""
    legacy = ReplayTable.load(Path(__file__).parent / "data" / "positive_biased_v1")
    assert type(legacy.sampler) is Uniform and isinstance(legacy.remover, PositiveRetention)
    assert legacy.remover.delta == 0.5
    assert sorted(legacy.storage.keys_of(legacy.storage.live_slots()).tolist()) == [
        8, 11, 14, 15, 16, 17, 19, 20, 21, 23, 25, 29, 34, 38, 42, 44
    ]  # fmt: skip
    assert (legacy.remover._fresh_live, legacy.remover._kept_live) == (8, 8)
    assert legacy.stats().evictions["retention"] == 16
    again = ReplayTable.load(legacy.save(tmp_path / "new"))  # now saved with a remover
    batch = make_batch(rng, 8, version=4, first_group=100)
    assert legacy.insert(batch).tolist() == again.insert(batch).tolist()
    assert legacy.stats().to_dict() == again.stats().to_dict()
    assert (again.remover._fresh_live, again.remover._kept_live) == (8, 8)  # type: ignore[union-attr]
