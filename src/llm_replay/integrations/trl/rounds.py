"""Between TRL's tensors and llm-replay's rollouts: one generation round in, one micro-batch out.

TRL hands its trainer a dict of padded tensors per process (prompts left-padded, completions
right-padded, advantages computed on rewards gathered over every process). Replay needs whole
groups, so a round is gathered from every process into one `RolloutBatch` that every process
inserts into its own copy of the table; the tables stay identical because every process sees the
same rows in the same order and draws with the same seed. A drawn `Sample` goes back to TRL's
layout, and each process keeps its own rows of it (`process_rows`).

Row order: TRL gives process p the slices of its own generation batch, one per micro-step. The
gathered round is put in *step-major* order (micro-step, then process), so the on-policy queue,
drawing a micro-batch of `per_device_train_batch_size × processes` rows at a time, gives each
process exactly the rows TRL would have given it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from llm_replay.buffer import Sample
from llm_replay.data.batch import RolloutBatch
from llm_replay.frontend.padded import pad_rows, sample_rows, unpad

# the padded fields of a round: (pad with the pad token, pad on the left), as TRL lays them out
PADDED = {
    "prompt_ids": (True, True),
    "prompt_mask": (False, True),
    "completion_ids": (True, False),
    "completion_mask": (False, False),
    "behaviour": (False, False),
}


def behaviour_logprobs(out: Mapping[str, Any]) -> Tensor | None:
    """The log-probs of the policy that sampled each completion token, from TRL's output.

    With vLLM (`sampling_per_token_logps`) the engine's own log-probs are the behaviour; a token
    the engine could not score (NaN) takes the trainer's recomputation at generation
    (`old_per_token_logps`). Without vLLM the trainer's recomputation is the behaviour. None when
    TRL computed neither (the caller computes them).
    """
    old = out.get("old_per_token_logps")
    sampled = out.get("sampling_per_token_logps")
    if sampled is None:
        return old
    if old is None:
        return torch.nan_to_num(sampled, nan=0.0)
    return torch.where(torch.isnan(sampled), old, sampled)


def behaviour_or_zeros(out: Mapping[str, Any]) -> Tensor:
    """`behaviour_logprobs`, or zeros where TRL computed none because nothing reads them
    (`ReplayGRPOTrainer._needs_behaviour`)."""
    behaviour = behaviour_logprobs(out)
    if behaviour is None:
        return torch.zeros_like(out["completion_ids"], dtype=torch.float32)
    return behaviour


def local_round(
    out: Mapping[str, Any],
    rewards: Tensor,
    group_ids: Tensor,
    behaviour: Tensor,
    task_codes: Tensor | None = None,
) -> dict[str, Tensor]:
    """This process's rows of one round, as the tensors `gather_round` gathers; `task_codes`:
    each row's task (`tasks.TaskColumn`), or none (code 0 for every row)."""
    for key in ("tool_mask", "pixel_values"):
        if key in out:
            raise ValueError(
                f"{key}: replay of tool-calling or multimodal rollouts is not supported yet"
            )
    rows = out["completion_ids"].shape[0]
    device = out["advantages"].device
    if task_codes is None:
        task_codes = torch.zeros(rows, dtype=torch.int64, device=device)
    for name, value in (("rewards", rewards), ("group_ids", group_ids), ("tasks", task_codes)):
        if value.shape[0] != rows:
            raise ValueError(f"{name}: {value.shape[0]} rows for {rows} completions")
    return {
        "prompt_ids": out["prompt_ids"],
        "prompt_mask": out["prompt_mask"],
        "completion_ids": out["completion_ids"],
        "completion_mask": out["completion_mask"],
        "behaviour": behaviour.to(torch.float32),
        "advantages": out["advantages"].reshape(rows).to(torch.float64),
        "rewards": rewards.to(device=out["advantages"].device, dtype=torch.float64),
        "group_ids": group_ids.to(device=out["advantages"].device, dtype=torch.int64),
        "task_codes": task_codes.to(device=device, dtype=torch.int64),
    }


def gather_round(accelerator: Any, local: dict[str, Tensor], pad_id: int) -> dict[str, Tensor]:
    """Every process's rows, in process order, padded to common widths (tensors only)."""
    if accelerator.num_processes == 1:
        return dict(local)
    padded = {
        key: accelerator.pad_across_processes(
            local[key], dim=1, pad_index=pad_id if token else 0, pad_first=left
        )
        for key, (token, left) in PADDED.items()
    }
    return {k: accelerator.gather(padded.get(k, v)) for k, v in local.items()}


def step_major(rows: int, processes: int, per_step: int) -> np.ndarray:
    """The permutation from process-major rows (p, step, i) to step-major (step, p, i)."""
    if rows % (processes * per_step):
        raise ValueError(f"{rows} rows do not split into {processes} × micro-batches of {per_step}")
    steps = rows // (processes * per_step)
    return np.arange(rows).reshape(processes, steps, per_step).transpose(1, 0, 2).reshape(-1)


def to_rollouts(
    round_: Mapping[str, Tensor],
    *,
    policy_version: int,
    correct_threshold: float,
    eos_token_ids: Sequence[int],
    order: np.ndarray | None = None,
    reward_version: int = 0,
    task_names: Sequence[str] = ("",),
) -> RolloutBatch:
    """The gathered round as validated rollouts (advantages as TRL computed them), their rewards
    from reward-model version `reward_version`, tagged by `task_names[task code]`."""
    data = {k: v.detach().cpu().numpy() for k, v in round_.items()}
    if order is not None:
        data = {k: v[order] for k, v in data.items()}
    completions = unpad(data["completion_ids"], data["completion_mask"])
    rewards = np.nan_to_num(data["rewards"], nan=0.0)
    eos = set(int(t) for t in eos_token_ids)
    return RolloutBatch.from_ragged(
        prompt_ids=unpad(data["prompt_ids"], data["prompt_mask"]),
        completion_ids=completions,
        behaviour_logprobs=unpad(data["behaviour"], data["completion_mask"]),
        rewards=rewards,
        advantages=data["advantages"],
        group_ids=data["group_ids"],
        policy_versions=np.full(len(rewards), policy_version, dtype=np.int64),
        correct=rewards >= correct_threshold,
        finish_reasons=["stop" if len(c) and int(c[-1]) in eos else "length" for c in completions],
        allow_empty=True,
        reward_versions=np.full(len(rewards), reward_version, dtype=np.int64),
        tasks=[task_names[int(c)] for c in data["task_codes"]] if len(task_names) > 1 else "",
    )


def process_rows(sample_rows: int, processes: int, rank: int) -> slice:
    """The rows of a drawn micro-batch that process `rank` trains on."""
    if sample_rows % processes:
        raise ValueError(f"a batch of {sample_rows} rows does not split over {processes} processes")
    per = sample_rows // processes
    return slice(rank * per, (rank + 1) * per)


def to_trl_inputs(
    sample: Sample,
    rows: slice,
    *,
    pad_id: int,
    device: torch.device | str,
    tokens_scale: float = 1.0,
    advantages: np.ndarray | None = None,
) -> dict[str, Tensor]:
    """Rows `rows` of a drawn sample in the layout `GRPOTrainer._compute_loss` reads.

    `num_items_in_batch` is the completion tokens of the whole drawn batch (every process's rows)
    times `tokens_scale` (TRL rescales it by gradient_accumulation_steps / steps_per_generation
    for the DAPO/CISPO normalisers). `advantages` overrides the stored ones (AsymRE's shift,
    sampling weights). `old_per_token_logps` is always filled; a caller whose loss takes the ratio
    against the current policy (AsymRE: exactly 1) removes it.
    """
    prompts, completions, behaviour = sample_rows(sample, rows)
    padded = pad_rows(prompts, completions, pad_id, behaviour)
    adv = sample.advantages[rows] if advantages is None else advantages[rows]
    if not np.all(np.isfinite(adv)):
        raise ValueError("advantages: a drawn row has no advantage (NaN)")
    tokens = int(sample.completion_lengths.sum())
    out = {k: torch.from_numpy(v).to(device) for k, v in padded.items() if k != "behaviour"}
    out["advantages"] = torch.from_numpy(np.asarray(adv, dtype=np.float32)).to(device)
    out["num_items_in_batch"] = torch.tensor(round(tokens * tokens_scale), device=device)
    out["old_per_token_logps"] = torch.from_numpy(padded["behaviour"]).to(device)
    return out


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
