"""Where the sampler's state lives beside verl's checkpoints, and what a resume must mend.

The state goes into `global_step_N/llm_replay/` (`checkpoint.py` writes it after verl's save);
a resumed sampler finds it where verl found the weights (`ReplaySampler._resumed_from`). Two
things a resume cannot take for granted are here: a checkpoint verl resumes from may lack the
state (verl writes its tracker before its callbacks run), and in the async modes the restored
TransferQueue still holds the rows the sampler had put for the checkpointed step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import transfer_queue as tq

from llm_replay.integrations.verl.advantages import UID_PREFIX

STATE_DIR = "llm_replay"
STATE_FILE = "sampler.json"
PIPELINE_DIR = "pipeline"
TRAJECTORIES_DIR = "trajectories"
TRAIN = "train"


def missing_state_message(step: int, folder: Path | None) -> str:
    """Why a resumed run has no sampler state, and the fix. verl writes its tracker
    (`latest_checkpointed_iteration.txt`) before its checkpoint callbacks run, so a run stopped
    in between leaves a checkpoint that verl resumes from and the sampler cannot: the newest
    earlier checkpoint that has the sampler's state is named, to resume from instead."""
    if folder is None:
        return (
            f"resuming at step {step}: the sampler cannot find verl's checkpoint folder; set "
            "sampler_kwargs.checkpoint_dir to trainer.default_local_dir"
        )
    earlier = [
        p
        for p in folder.parent.glob("global_step_*")
        if (p / STATE_DIR / STATE_FILE).is_file()
        and p.name.removeprefix("global_step_").isdigit()
        and int(p.name.removeprefix("global_step_")) < step
    ]
    fix = "set trainer.checkpoint_callback_class=llm_replay.integrations.verl.ReplayCheckpointCallback"
    if earlier:
        newest = max(earlier, key=lambda p: int(p.name.removeprefix("global_step_")))
        fix = (
            f"resume from {newest.name} instead (trainer.resume_mode=resume_path "
            f"trainer.resume_from_path={newest}), or {fix} if the run did not"
        )
    elif (folder / "actor").is_dir():
        fix += " so that checkpoints carry the sampler's state"
    return (
        f"resuming at step {step}: verl's checkpoint {folder} has no llm-replay sampler state "
        f"({STATE_DIR}/{STATE_FILE}); verl writes its latest_checkpointed_iteration.txt before "
        "the sampler's save, so a run stopped between the two leaves this: " + fix
    )


def clear_issued_rows() -> None:
    """Clear the rows this sampler put for a step that a restored TransferQueue still holds:
    verl's async checkpoint is written before the step's keys are cleared, and no prompt key
    refers to them. Left there, they would collide with the rows the resumed sampler issues under
    the same keys (its uid counter resumes too)."""
    listed = tq.kv_list(TRAIN) or {}
    keys = [key for key in listed.get(TRAIN, {}) if key.startswith(UID_PREFIX)]
    if keys:
        tq.kv_clear(keys=keys, partition_id=TRAIN)


@dataclass
class StepTally:
    """One verl step as the sampler sees it: its number, the updates (`sample` calls) still to
    come, and what it composed, counted over all of them (verl averages a step's updates'
    metrics, so a count is reported once, on the step's last update)."""

    number: int = 0
    calls_left: int = 0
    first_fresh_group: int = -1
    composed: bool = False
    fresh: int = 0
    refilled: int = 0
    trained: int = 0
    replayed: int = 0
