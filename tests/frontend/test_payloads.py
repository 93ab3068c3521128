"""The trainer's own fields of each row, kept beside the table by row id and saved without pickle;
a store kept by content key (before row ids) is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from llm_replay.frontend.payloads import ROWS_FILE, Trajectory, TrajectoryStore


def test_trajectories_are_saved_without_pickle_and_read_back_identical(tmp_path: Path) -> None:
    store = TrajectoryStore()
    fields = {
        "responses": torch.tensor([5, 6, 7]),
        "rollout_log_probs": torch.tensor([-0.1, -0.2, -0.3], dtype=torch.float32),
        "rm_scores": torch.tensor([0.0, 0.0, 1.0], dtype=torch.bfloat16),
        "raw_prompt": [{"role": "user", "content": "é"}],
        "extra_fields": {"min_global_steps": np.int64(3)},
        "uid": "abc",
    }
    same = store.add(7, Trajectory(fields, {"status": "old"}))
    row_id = store.add(7, Trajectory(fields, {"status": "success", "min_global_steps": 3}))
    assert (same, row_id) == (0, 1)  # the same content twice is two rows, each found by its id
    store.save(tmp_path)
    assert not list(tmp_path.glob("*.pkl"))
    loaded = TrajectoryStore.load(tmp_path)
    back = loaded.get(row_id)
    assert loaded.get(same).tag == {"status": "old"} and loaded.add(7, back) == 2
    assert list(back.fields) == list(fields)
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            assert back.fields[name].dtype == value.dtype
            assert torch.equal(back.fields[name], value)
    assert back.fields["extra_fields"] == {"min_global_steps": 3}
    assert back.tag == {"status": "success", "min_global_steps": 3}
    assert store.prune({8}) == 2 and len(store) == 0
    with pytest.raises(LookupError, match="row id 1"):
        store.get(1)
    (tmp_path / ROWS_FILE).write_text(json.dumps([]))
    with pytest.raises(ValueError, match="kept by content key"):
        TrajectoryStore.load(tmp_path)


def test_a_field_json_cannot_hold_is_refused_by_name(tmp_path: Path) -> None:
    store = TrajectoryStore()
    store.add(0, Trajectory({"odd": object()}, {}))
    with pytest.raises(ValueError, match="trajectory field odd"):
        store.save(tmp_path)
