"""AR3PO's adaptive rollouts inside another trainer: the stages are calls to its own generate-and-score.

A trainer samples a fixed number of completions for every prompt of a round. With adaptive
rollouts on, the front end hands the round's prompts to the same `AdaptiveRollouts` that the
native loop uses (`runtime.adaptive_rollouts`), through `TrainerStages`: each stage is one call
of the front end's `stage(rows, n, group_ids)`, which runs the trainer's own generation and
scoring on the stage's prompts, each repeated n times, and returns them as rollouts (TRL: one
call to `GRPOTrainer._generate_and_score_completions` with its `num_generations` set to n). The
trainer's advantages of a stage are discarded: the front end computes each group's advantage
over the group as it ends up, as the native loop does.

One process only: every stage's size depends on what the previous stage solved, so processes
would disagree on the sizes of the trainer's collectives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_replay.data.batch import RolloutBatch
from llm_replay.frontend.meter import count_generated
from llm_replay.metrics import ComputeMeter

StageFn = Callable[[list[Any], int, npt.NDArray[np.int64]], RolloutBatch]


class TrainerStages:
    """The `StagedSampler` that `AdaptiveRollouts` drives, over one round of a trainer's prompts.

    `inputs` holds one trainer input (a dataset row) per prompt; `stage(rows, n, group_ids)`
    generates and scores `rows` (each prompt repeated `n` times) through the trainer and returns
    them as rollouts with the given group ids. A prompt's token ids are known once its first stage
    is generated (the trainer tokenizes), which is before reuse asks for them.
    """

    def __init__(
        self, inputs: Sequence[Any], group_size: int, stage: StageFn, reward_version: int
    ) -> None:
        self.inputs = list(inputs)
        self.group_size = group_size
        self.prompts: list[list[int]] = [[] for _ in self.inputs]
        self._stage = stage
        self._reward_version = reward_version

    @property
    def reward_version(self) -> int:
        return self._reward_version

    def sample(
        self,
        indices: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        n: int,
        first_group: int,
        meter: ComputeMeter,
        *,
        new_prompts: bool,
    ) -> tuple[RolloutBatch, npt.NDArray[np.float32]]:
        rows = [self.inputs[int(indices[p])] for p in positions for _ in range(n)]
        groups = first_group + np.repeat(np.asarray(positions, dtype=np.int64), n)
        batch = self._stage(rows, n, groups)
        if len(batch) != len(rows):
            raise RuntimeError(f"a stage of {len(rows)} rows came back as {len(batch)}")
        for row, group in zip(range(0, len(batch), n), groups[::n], strict=True):
            prompt = batch[row].prompt_ids
            if any(not np.array_equal(batch[r].prompt_ids, prompt) for r in range(row, row + n)):
                raise RuntimeError(f"group {group}: the trainer returned its rows out of order")
            self.prompts[int(indices[group - first_group])] = prompt.tolist()
        count_generated(meter, batch, prompts=len(positions) if new_prompts else 0)
        return batch, np.zeros(0, dtype=np.float32)
