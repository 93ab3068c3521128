"""The trainer's own fields of each row, kept beside the table and saved without pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from llm_replay.frontend.payloads import Trajectory, TrajectoryStore, content_key


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
    key = content_key(7, fields["responses"])
    store.add(key, Trajectory(fields, {"status": "success", "min_global_steps": 3}))
    store.save(tmp_path)
    assert not list(tmp_path.glob("*.pkl"))
    back = TrajectoryStore.load(tmp_path).get(key)
    assert list(back.fields) == list(fields)
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            assert back.fields[name].dtype == value.dtype
            assert torch.equal(back.fields[name], value)
    assert back.fields["extra_fields"] == {"min_global_steps": 3}
    assert back.tag == {"status": "success", "min_global_steps": 3}
    assert store.prune({8}) == 1 and len(store) == 0


def test_a_field_json_cannot_hold_is_refused_by_name(tmp_path: Path) -> None:
    store = TrajectoryStore()
    store.add(content_key(0, [1]), Trajectory({"odd": object()}, {}))
    with pytest.raises(ValueError, match="trajectory field odd"):
        store.save(tmp_path)
