"""llm-replay's verl sampler against a real TransferQueue, with verl's sync trainer simulated
step by step (`sim.py`), as verl's own `test_replay_buffer_on_cpu.py` tests its sampler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tests.integrations.verl_v1.sim import TRAIN, SimulatedVerl

from llm_replay.algorithms.advantages import grpo
from llm_replay.integrations.verl import ReplayCheckpointCallback, ReplaySampler

pytestmark = pytest.mark.usefixtures("transfer_queue")


def make_sampler(checkpoint_dir: Path | None = None, **kwargs: Any) -> ReplaySampler:
    knobs = {"group_size": 4, **kwargs}
    if checkpoint_dir is not None:
        knobs["checkpoint_dir"] = str(checkpoint_dir)
    return ReplaySampler(
        "sync",
        OmegaConf.create({}),
        None,
        "drop",
        OmegaConf.create(knobs),
        poll_interval=0.01,
    )


def run(sampler: ReplaySampler, steps: range, **sim: Any) -> tuple[SimulatedVerl, list[Any]]:
    verl = SimulatedVerl(sampler, **sim)
    return verl, [verl.step(g) for g in steps]


def same_trajectory(row: dict[str, Any], original: dict[str, Any]) -> None:
    assert set(row) == set(original)
    for name, value in original.items():
        if name == "uid":
            continue
        got = row[name]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype, name
            assert torch.equal(got, value), name
        else:
            assert got == value, name


def test_on_policy_trains_every_fresh_trajectory_once_with_verl_grpo_advantages() -> None:
    sampler = make_sampler(method="on_policy")
    verl, steps = run(sampler, range(1, 5))
    for g, step in enumerate(steps, start=1):
        ids = sorted(row["trajectory_id"] for row in step.rows)
        assert ids == sorted(f"t{g}-{p}-{s}" for p in range(4) for s in range(4))
        by_prompt: dict[str, list[tuple[float, float]]] = {}
        for row, advantage in zip(step.rows, step.advantages, strict=True):
            same_trajectory(row, verl.generated[row["trajectory_id"]])
            reward = float(row["rm_scores"].sum())
            by_prompt.setdefault(row["trajectory_id"].rsplit("-", 1)[0], []).append(
                (reward, advantage)
            )
        for members in by_prompt.values():  # verl's GRPO on the group, hand-computed
            rewards = np.array([r for r, _ in members])
            np.testing.assert_allclose([a for _, a in members], grpo(rewards), atol=1e-6)
    assert tq.kv_list(TRAIN) == {TRAIN: {}}


@pytest.mark.parametrize(
    "knobs",
    [
        {"method": "uniform", "capacity": 48, "replay_ratio": 2},
        {"method": "positive", "capacity": 64},
        {"method": "prioritized", "capacity": 64, "max_age": 2},
        {"method": "freshper", "capacity": 64},
        {"method": "exgrpo"},
        {"method": "prioritized", "capacity": 64, "zero_variance": {"enabled": True}},
        {"method": "positive", "capacity": 64, "anneal": {"enabled": True, "mode": "schedule"}},
        {"method": "positive", "capacity": 64, "anneal": {"enabled": True}},
        {"method": "positive", "capacity": 64, "retire": {"enabled": True}},
        {"method": "positive_schedule", "capacity": 64},
    ],
    ids=[
        "uniform",
        "positive",
        "prioritized",
        "freshper",
        "exgrpo",
        "zero_variance",
        "anneal_schedule",
        "anneal_controller",
        "retire",
        "schedule_recipe",
    ],
)
def test_replayed_rows_come_back_identical_and_nothing_leaks(knobs: dict[str, Any]) -> None:
    sampler = make_sampler(total_steps=8, **knobs)
    verl, steps = run(sampler, range(1, 9))
    seen: set[str] = set()
    replayed = 0
    for g, step in enumerate(steps, start=1):
        assert len(set(step.keys)) == len(step.keys)
        assert not seen & set(step.keys), "a key was used twice"
        seen |= set(step.keys)
        for row, tag, key, advantage in zip(
            step.rows, step.tags, step.keys, step.advantages, strict=True
        ):
            original = verl.generated[row["trajectory_id"]]
            same_trajectory(row, original)
            assert row["uid"] == key.split("_")[0]
            assert tag["min_global_steps"] == original["extra_fields"]["min_global_steps"]
            assert np.isfinite(advantage)
            if original["global_steps"] < g:
                replayed += 1
                if "max_age" in knobs:
                    assert (g - 1) - tag["min_global_steps"] <= knobs["max_age"]
        assert tq.kv_list(TRAIN) == {TRAIN: {}}, "TransferQueue holds keys after the step"
        kept = sampler.store.groups()
        assert kept == sampler._host().stored_groups()
    assert replayed > 0
    if "capacity" in knobs:
        assert sampler.host is not None
        assert sampler.host.pipeline.method.table.size <= knobs["capacity"]


def test_advantages_are_the_methods_own() -> None:
    """Each row's advantage in verl is the one the method's sample gave it (with the sampling
    weight when `sampling_weights` is on)."""
    drawn: list[np.ndarray] = []
    sampler = make_sampler(method="prioritized", capacity=64, sampling_weights=True)
    original = sampler._compose

    def spy(samples: Any) -> Any:
        for sample in samples:
            drawn.append(sample.advantages * sample.importance_weights)
        return original(samples)

    sampler._compose = spy  # type: ignore[method-assign]
    _, steps = run(sampler, range(1, 5))
    for step, expected in zip(steps, _per_step(drawn, steps), strict=True):
        np.testing.assert_allclose(step.advantages, expected, rtol=1e-6, atol=1e-6)


def _per_step(drawn: list[np.ndarray], steps: list[Any]) -> list[np.ndarray]:
    flat = np.concatenate(drawn)
    out, start = [], 0
    for step in steps:
        out.append(flat[start : start + len(step.keys)].astype(np.float32))
        start += len(step.keys)
    return out


def test_a_failed_group_trains_the_sessions_it_delivered() -> None:
    """verl's sync matrix: a failed group stays sampleable, with the sessions it delivered; its
    advantages are over those. A method that cannot fill a batch from what came asks verl for
    more prompts (`refill_fn`) and keeps the rows for the next round."""
    sampler = make_sampler(method="on_policy")
    verl = SimulatedVerl(sampler)
    step = verl.step(1, failed={1: 2, 3: 0})  # 10 rows: not the 16 the on-policy queue needs
    assert verl.refills == [4]
    firsts = [f"t1-{p}-{s}" for p, n in ((0, 4), (1, 2), (2, 4)) for s in range(n)]
    ids = [row["trajectory_id"] for row in step.rows]
    assert sorted(ids[: len(firsts)]) == sorted(firsts)  # oldest first, then the refill's
    assert all(i.endswith("-r1") for i in ids[len(firsts) :]) and len(ids) == 16
    partial = [
        (float(r["rm_scores"].sum()), a)
        for r, a in zip(step.rows, step.advantages, strict=True)
        if r["trajectory_id"] in ("t1-1-0", "t1-1-1")
    ]
    rewards = np.array([r for r, _ in partial])
    np.testing.assert_allclose([a for _, a in partial], grpo(rewards), atol=1e-6)
    assert step.metrics["llm_replay/refilled_prompts"] == 4
    verl.step(2)  # the refill's leftover rows come first, then this step's
    assert tq.kv_list(TRAIN) == {TRAIN: {}}


def test_a_resumed_sampler_composes_the_same_batches(tmp_path: Path) -> None:
    knobs = {"method": "positive", "capacity": 64}
    first = make_sampler(tmp_path, **knobs)
    verl = SimulatedVerl(first)
    callback = ReplayCheckpointCallback(config=None)
    uninterrupted = []
    for g in range(1, 7):
        uninterrupted.append(verl.step(g))
        if g == 3:
            checkpoint = tmp_path / f"global_step_{g}"
            checkpoint.mkdir()
            callback.on_save(trainer=_Trainer(first), global_step=g, checkpoint_dir=str(checkpoint))
    resumed = make_sampler(tmp_path, **knobs)
    _, after = run(resumed, range(4, 7))
    for a, b in zip(uninterrupted[3:], after, strict=True):
        assert a.keys == b.keys
        assert [r["trajectory_id"] for r in a.rows] == [r["trajectory_id"] for r in b.rows]
        np.testing.assert_array_equal(a.advantages, b.advantages)


def test_resuming_without_saved_state_names_the_callback(tmp_path: Path) -> None:
    sampler = make_sampler(tmp_path, method="positive")
    verl = SimulatedVerl(sampler)
    with pytest.raises(FileNotFoundError, match="checkpoint_callback_class"):
        verl.step(5)
    tq.kv_clear(keys=list(tq.kv_list(TRAIN)[TRAIN]), partition_id=TRAIN)


class _Trainer:
    def __init__(self, sampler: ReplaySampler) -> None:
        self.replay_buffer = sampler
