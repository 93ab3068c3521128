"""AR3PO's adaptive rollouts inside TRL: the stages are calls to TRL's own generate-and-score.

TRL samples `num_generations` completions for every prompt of a generation batch. With
`replay_adaptive` on, `ReplayGRPOTrainer` hands the batch to the same `AdaptiveRollouts` that the
native loop uses (`runtime.adaptive_rollouts`), through `TRLStages`: each stage is one call to
`GRPOTrainer._generate_and_score_completions` on the stage's prompts, each repeated `stage_size`
times, with the trainer's `num_generations` set to `stage_size` for that call so that TRL's own
grouping (its reward statistics, vLLM's `n`) matches what it is given. TRL's advantages of a
stage are discarded: the trainer computes each group's advantage over the group as it ends up,
as the native loop does.

One process only: every stage's size depends on what the previous stage solved, so processes
would disagree on the sizes of TRL's collectives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from llm_replay.data.batch import RolloutBatch
from llm_replay.metrics import ComputeMeter

StageFn = Callable[[list[Any], int, npt.NDArray[np.int64]], RolloutBatch]


class TRLStages:
    """The `StagedSampler` that `AdaptiveRollouts` drives, over one TRL generation batch.

    `inputs` holds one TRL input (a dataset row) per prompt; `stage(rows, n, group_ids)` generates
    and scores `rows` (each prompt repeated `n` times) through TRL and returns them as rollouts with
    the given group ids. A prompt's token ids are known once its first stage is generated (TRL
    tokenizes), which is before reuse asks for them.
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
                raise RuntimeError(f"group {group}: TRL returned its rows out of order")
            self.prompts[int(indices[group - first_group])] = prompt.tolist()
        meter.add(
            prompts_generated=len(positions) if new_prompts else 0,
            rollouts_generated=len(batch),
            tokens_generated=int(batch.completion_lengths.sum()),
            prompt_tokens=int(batch.prompt_lengths.sum()),
            reward_calls=len(batch),
        )
        return batch, np.zeros(0, dtype=np.float32)


def one_input_per_prompt(generation_batch: Sequence[Any], group_size: int) -> list[Any]:
    """TRL's generation batch repeats each prompt `group_size` times in a row (its
    `RepeatSampler`): one input per prompt, checked."""
    if len(generation_batch) % group_size:
        raise ValueError(
            f"a generation batch of {len(generation_batch)} rows is not whole groups of "
            f"{group_size}"
        )
    firsts = list(generation_batch[::group_size])
    for g, first in enumerate(firsts):
        for row in generation_batch[g * group_size : (g + 1) * group_size]:
            if row.get("prompt") != first.get("prompt"):
                raise ValueError(
                    f"generation batch row {g * group_size}: the rows of a group do not share a "
                    "prompt (expected TRL's RepeatSampler order)"
                )
    return firsts


def shuffled(batch: RolloutBatch) -> RolloutBatch:
    """The round in a random order drawn from torch's generator, as TRL shuffles each generation
    batch before splitting it into micro-steps."""
    return batch.select(torch.randperm(len(batch)).numpy())
