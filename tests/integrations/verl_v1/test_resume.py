"""Resuming the sampler where verl resumes: from any `resume_from_path`, with a loud error where a
checkpoint lacks the sampler's state, and the state pruned with the weights it belongs to."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.integrations.verl_v1.test_fit import (
    build,
    logged,  # noqa: F401 (autouse: a fresh TransferQueue and fit's log per test)
    trained,
)
from tests.integrations.verl_v1.workers import clear_transfer_queue

from llm_replay.integrations.verl.checkpoint import prune_orphaned_states

pytestmark = pytest.mark.usefixtures("transfer_queue")


def test_resume_from_a_path_outside_default_local_dir_finds_the_state_beside_it(
    tmp_path: Path,
) -> None:
    a, loop_a, workers_a = build(tmp_path / "a", "sync", "positive")
    a.fit(loop_a)
    moved = tmp_path / "elsewhere" / "global_step_2"
    shutil.copytree(tmp_path / "a" / "checkpoints" / "global_step_2", moved)
    clear_transfer_queue()
    b, loop_b, workers_b = build(
        tmp_path / "b",  # default_local_dir is tmp_path/b/checkpoints, which holds nothing
        "sync",
        "positive",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={moved}",
    )
    assert b.global_steps == 2
    b.fit(loop_b)
    assert trained(workers_b) == trained(workers_a)[2:]


def test_a_checkpoint_without_the_samplers_state_fails_loudly_naming_the_one_to_resume_from(
    tmp_path: Path,
) -> None:
    """verl writes its tracker before the sampler's save: a run killed in between resumes
    verl's weights from step 4 and must not train on without the table."""
    a, loop_a, _ = build(tmp_path, "sync", "positive")
    a.fit(loop_a)
    shutil.rmtree(tmp_path / "checkpoints" / "global_step_4" / "llm_replay")
    clear_transfer_queue()
    b, loop_b, _ = build(tmp_path, "sync", "positive", steps=6)  # resume_mode=auto: step 4
    assert b.global_steps == 4
    with pytest.raises(FileNotFoundError) as error:
        b.fit(loop_b)
    message = str(error.value)
    assert "global_step_4 has no llm-replay sampler state" in message
    assert f"trainer.resume_from_path={tmp_path / 'checkpoints' / 'global_step_2'}" in message


def test_the_samplers_state_goes_where_verl_pruned_the_weights(tmp_path: Path) -> None:
    for step, has_actor in ((1, True), (2, False), (3, False)):
        folder = tmp_path / f"global_step_{step}"
        (folder / "llm_replay").mkdir(parents=True)
        if has_actor:
            (folder / "actor").mkdir()
    keep = tmp_path / "global_step_3"  # being written now: its actor may be saved async
    removed = prune_orphaned_states(tmp_path, keep=keep)
    assert removed == [tmp_path / "global_step_2" / "llm_replay"]
    assert (tmp_path / "global_step_1" / "llm_replay").is_dir()
    assert (keep / "llm_replay").is_dir()
