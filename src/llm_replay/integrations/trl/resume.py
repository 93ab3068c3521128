"""What a resumed `ReplayGRPOTrainer` refuses to read from its checkpoint, and why.

A checkpoint is resumed under the config the user gives now, which may not be the one it was
written under. Two mismatches would train on something other than what the run claims:
rows stored without behaviour log-probs (TRL's shortcut when nothing reads them) reaching a run
whose KL-Cov term or ratio reads them, and a run with adaptive rollouts resuming a checkpoint
written without them. Both are refused with the setting to change; where a recipe (`auto`) turned
the part on by itself, the refusal says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llm_replay.buffer import ReplayTable
from llm_replay.methods.host import refuse_zero_behaviour


def check_behaviour(
    state: dict[str, Any],
    directory: Path,
    *,
    reader: str | None,
    table: ReplayTable | None,
) -> None:
    """`reader`: what in this run reads the stored behaviour log-probs (None: nothing). A
    checkpoint says whether its run stored them (`behaviour_stored`); one written before that
    flag existed is read for all-zero rows instead."""
    if reader is None:
        return
    stored = state.get("behaviour_stored")
    if stored is False:
        raise ValueError(
            f"{directory}: the run that wrote this checkpoint stored no behaviour log-probs "
            f"(AsymRE without KL-Cov, or the on-policy queue, never reads them), and this run's "
            f"{reader} does; resume it with the settings it was started with, or start a new run"
        )
    if stored is None and table is not None:
        refuse_zero_behaviour(table, f"{directory} (resumed under {reader})")


def refuse_missing_adaptive(directory: Path, args: Any) -> None:
    """A run with adaptive rollouts (`args`: its `ReplayGRPOConfig`) resuming a checkpoint
    written without them; where a recipe turned them on, a run of the earlier `auto` resumes
    under `positive_schedule`."""
    hint = args.recipe_adaptive_hint(
        ", or replay_method='positive_schedule' to resume a run of 'auto' from before issue #38"
    )
    raise ValueError(
        f"{directory}: the checkpoint has no adaptive rollout state (it was written without "
        f"replay_adaptive){hint}"
    )
