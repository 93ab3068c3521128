"""A front end's checkpoint: the host's state, the μ meter and the front end's own counters, saved
and resumed together, and what a resume under other settings must refuse.

A checkpoint is resumed under the settings the user gives now, which may not be the ones it was
written under. Rows stored without behaviour log-probs (a front end's shortcut when nothing reads
them: TRL's on-policy queue, verl without replay) reaching a run whose ratio or KL-Cov term reads
them would train on zeros read as a behaviour policy certain of every token: the checkpoint says
whether its run stored them (`behaviour_stored`), and such a resume is refused with the setting
to change. One written before that flag existed is read for all-zero rows instead.

`TrainerCheckpoints` is the same for a Hugging Face `Trainer` subclass (TRL's trainers): its state
goes into each `checkpoint-N/` the trainer writes and comes back when the trainer resumes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from llm_replay.buffer import ReplayTable
from llm_replay.methods.host import HOST_FILE, ReplayHost, refuse_zero_behaviour
from llm_replay.metrics import ComputeMeter

BEHAVIOUR_STORED = "behaviour_stored"


def save_front_end(
    host: ReplayHost,
    target: Path,
    state: Mapping[str, Any],
    *,
    meter: ComputeMeter,
    behaviour_stored: bool,
    pipeline_dir: str = ".",
    state_file: str = HOST_FILE,
    also: Callable[[Path], None] | None = None,
) -> None:
    """The host's pipeline, the front end's `state`, its meter and whether its rows carry
    behaviour log-probs, all at `target` at once (`ReplayHost.save`)."""
    host.save(
        target,
        {**state, "meter": meter.state_dict(), BEHAVIOUR_STORED: behaviour_stored},
        pipeline_dir=pipeline_dir,
        state_file=state_file,
        also=also,
    )


def state_directory(checkpoint: Any, state_dir: str, state_file: str, writer: str) -> Path:
    """Where a trainer checkpoint keeps the front end's state (`checkpoint/state_dir`), or a
    FileNotFoundError saying it holds none and which trainer writes it."""
    directory = Path(checkpoint) / state_dir
    if not (directory / state_file).is_file():
        raise FileNotFoundError(
            f"{directory}: no llm-replay state in this checkpoint (was it written by {writer}?)"
        )
    return directory


def load_front_end(
    host: ReplayHost,
    source: Path,
    *,
    meter: ComputeMeter,
    reader: str | None,
    pipeline_dir: str = ".",
    state_file: str = HOST_FILE,
) -> dict[str, Any]:
    """The front end's state saved by `save_front_end`, after the host's pipeline and the meter
    are loaded; `reader`: what in this run reads the stored behaviour log-probs (None: nothing),
    for the refusal of a checkpoint whose rows carry none."""
    state = host.load(source, pipeline_dir=pipeline_dir, state_file=state_file)
    check_behaviour(state, source, reader=reader, table=getattr(host.method, "table", None))
    if "meter" in state:  # saves from before the kit may have none
        meter.load_state_dict(state["meter"])
    return state


def check_behaviour(
    state: Mapping[str, Any],
    directory: Path,
    *,
    reader: str | None,
    table: ReplayTable | None,
) -> None:
    """Refuse rows stored without behaviour log-probs for a run in which `reader` reads them
    (module docstring)."""
    if reader is None:
        return
    stored = state.get(BEHAVIOUR_STORED)
    if stored is False:
        raise ValueError(
            f"{directory}: the run that wrote this checkpoint stored no behaviour log-probs "
            f"(AsymRE without KL-Cov, or the on-policy queue, never reads them), and this run's "
            f"{reader} does; resume it with the settings it was started with, or start a new run"
        )
    if stored is None and table is not None:
        refuse_zero_behaviour(table, f"{directory} (resumed under {reader})")


class TrainerCheckpoints:
    """Mixed in before a Hugging Face `Trainer` class: after the trainer's own save the front
    end's state goes to `checkpoint-N/llm_replay/` (`save_replay_state`), and when the trainer
    resumes a checkpoint it is read back from there (`load_replay_state`), or refused where the
    checkpoint holds none (`state_file` marks it)."""

    state_dir = "llm_replay"
    state_file: str
    args: Any
    state: Any

    def save_replay_state(self, target: Path) -> None:
        raise NotImplementedError

    def load_replay_state(self, directory: Path) -> None:
        raise NotImplementedError

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        if self.args.should_save:
            output = Path(self._get_output_dir(trial=trial))  # type: ignore[attr-defined]
            self.save_replay_state(output / f"checkpoint-{self.state.global_step}" / self.state_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        if checkpoint is not None:
            writer = type(self).__name__
            self.load_replay_state(
                state_directory(checkpoint, self.state_dir, self.state_file, writer)
            )
