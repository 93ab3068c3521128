"""Where the sampler's state lives beside verl's checkpoints, and what a resume must mend.

The state goes into `global_step_N/llm_replay/` (`checkpoint.py` writes it after verl's save);
a resumed sampler finds it where verl found the weights (`ReplaySampler._resumed_from`). Two
things a resume cannot take for granted are here: a checkpoint verl resumes from may lack the
state (verl writes its tracker before its callbacks run), and in the async modes the restored
TransferQueue still holds the rows the sampler had put for the checkpointed step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transfer_queue as tq

from llm_replay.frontend.checkpoint import load_front_end, save_front_end
from llm_replay.frontend.clock import UpdateClock
from llm_replay.frontend.payloads import TrajectoryStore
from llm_replay.frontend.settings import lookup
from llm_replay.integrations.verl.advantages import UID_PREFIX
from llm_replay.methods.host import ReplayHost
from llm_replay.metrics.compute import ComputeMeter

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


class SamplerCheckpoints:
    """`ReplaySampler`'s save, load and the search for the checkpoint verl resumed from (mixed
    in): its counters, meter and clock beside the host's tables and the kept trajectories."""

    root: Any
    checkpoint_dir: Path | None
    pending: list[Any]
    step: StepTally
    settings: Any
    replays: bool
    meter: ComputeMeter
    store: TrajectoryStore
    clock: UpdateClock
    prompts_per_step: int | None
    group_size: int | None
    next_uid: int
    next_group: int
    steps: int
    started: bool

    def _host(self) -> ReplayHost:
        raise NotImplementedError

    def _resumed_from(self, step: int) -> Path | None:
        """The checkpoint folder verl resumed from, found as verl's `_load_checkpoint` finds it:
        `trainer.resume_from_path` in `resume_path` mode (anywhere, not only under
        `default_local_dir`), else `global_step_<step>` under `sampler_kwargs.checkpoint_dir`
        or `trainer.default_local_dir` (relative paths from the working directory)."""
        if str(lookup(self.root, "trainer.resume_mode") or "") == "resume_path":
            given = lookup(self.root, "trainer.resume_from_path")
            if given:
                return Path(str(given)).absolute()
        if self.checkpoint_dir is None:
            return None
        return self.checkpoint_dir.absolute() / f"global_step_{step}"

    def save(self, directory: Path) -> None:
        """Write the sampler's whole state to `directory` atomically (through the host)."""
        if self.pending:  # verl saves between steps, when every composed batch was handed out
            raise RuntimeError(
                f"saving in the middle of step {self.step.number}: {len(self.pending)} composed "
                "batches not yet handed to verl"
            )
        state = {
            "prompts_per_step": self.prompts_per_step,
            "group_size": self.group_size,
            "next_uid": self.next_uid,
            "next_group": self.next_group,
            "steps": self.steps,
            "clock": self.clock.state_dict(),
        }
        save_front_end(
            self._host(),
            directory,
            state,
            meter=self.meter,
            behaviour_stored=self.replays,
            pipeline_dir=PIPELINE_DIR,
            state_file=STATE_FILE,
            also=lambda staging: self.store.save(staging / TRAJECTORIES_DIR),
        )

    def load(self, directory: Path) -> None:
        state = json.loads((directory / STATE_FILE).read_text())
        if state["method"] != self.settings.replay.method:
            raise ValueError(
                f"{directory}: saved by method {state['method']!r}, not "
                f"{self.settings.replay.method!r}"
            )
        self.prompts_per_step = int(state["prompts_per_step"])
        self.group_size = int(state["group_size"])
        reader = "replayed rows' ratio (the method replays)" if self.replays else None
        load_front_end(
            self._host(),
            directory,
            meter=self.meter,
            reader=reader,
            pipeline_dir=PIPELINE_DIR,
            state_file=STATE_FILE,
        )
        self.store = TrajectoryStore.load(directory / TRAJECTORIES_DIR)
        self.next_uid = int(state["next_uid"])
        self.next_group = int(state["next_group"])
        self.steps = int(state["steps"])
        if "clock" in state:  # older saves counted ages in verl steps
            self.clock.load_state_dict(state["clock"])
        self.started = True
        clear_issued_rows()
