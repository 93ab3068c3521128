"""Conversions between TRL's tensors and rollouts: lossless, in TRL's layout, behaviour chosen right."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from llm_replay.buffer import Sample
from llm_replay.integrations.trl.rounds import (
    behaviour_logprobs,
    local_round,
    process_rows,
    step_major,
    to_rollouts,
    to_trl_inputs,
)

PAD = 0


def trl_output() -> dict[str, torch.Tensor]:
    """Three rows as GRPOTrainer returns them: prompts left-padded, completions right-padded."""
    return {
        "prompt_ids": torch.tensor([[0, 5, 6], [7, 8, 9], [0, 0, 4]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]]),
        "completion_ids": torch.tensor([[11, 12, 1], [13, 1, 0], [14, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]]),
        "advantages": torch.tensor([0.5, -0.25, 1.0]),
        "old_per_token_logps": torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -0.2, 0], [-3.0, 0, 0]]),
    }


def test_a_round_goes_to_rollouts_and_back_unchanged() -> None:
    out = trl_output()
    local = local_round(
        out, torch.tensor([1.0, 0.0, 1.0]), torch.tensor([4, 4, 5]), behaviour_logprobs(out)
    )
    batch = to_rollouts(local, policy_version=3, correct_threshold=1.0, eos_token_ids=[1])
    assert batch.prompt_lengths.tolist() == [2, 3, 1]
    assert batch.completion_lengths.tolist() == [3, 2, 1]
    assert batch.correct.tolist() == [1, 0, 1]
    assert [batch.finish_reasons[i] for i in range(3)] == [0, 0, 1]  # stop, stop, length
    assert batch.policy_versions.tolist() == [3, 3, 3]
    sample = Sample.from_batch(batch, current_version=3, pad_id=PAD)
    back = to_trl_inputs(sample, slice(0, 3), pad_id=PAD, device="cpu")
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        torch.testing.assert_close(back[key], out[key], msg=key)
    torch.testing.assert_close(back["old_per_token_logps"], out["old_per_token_logps"])
    torch.testing.assert_close(back["advantages"], out["advantages"])
    assert int(back["num_items_in_batch"]) == 6


def test_with_vllm_the_engine_log_probs_are_the_behaviour() -> None:
    out = trl_output()
    engine = out["old_per_token_logps"] - 0.05
    engine[0, 1] = float("nan")  # a token the engine could not score
    out["sampling_per_token_logps"] = engine
    chosen = behaviour_logprobs(out)
    assert chosen is not None
    assert chosen[0, 1] == out["old_per_token_logps"][0, 1]
    assert chosen[0, 0] == pytest.approx(-1.05) and chosen[1, 0] == pytest.approx(-0.15)
    del out["old_per_token_logps"]
    assert behaviour_logprobs({"advantages": out["advantages"]}) is None


def test_step_major_order_gives_each_process_its_own_micro_batches() -> None:
    # 2 processes × 2 micro-steps × 3 rows: process-major in, step-major out
    order = step_major(12, processes=2, per_step=3)
    assert order.tolist() == [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11]
    first_micro = order[:6]
    assert first_micro[process_rows(6, 2, 1)].tolist() == [6, 7, 8]  # process 1's first slice
    with pytest.raises(ValueError, match="do not split"):
        step_major(10, processes=2, per_step=3)


def test_refusals_name_the_problem() -> None:
    out = trl_output()
    out["tool_mask"] = torch.ones(3, 3)
    with pytest.raises(ValueError, match="tool_mask"):
        local_round(out, torch.zeros(3), torch.zeros(3), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="rewards: 2 rows for 3"):
        local_round(trl_output(), torch.zeros(2), torch.zeros(3), torch.zeros(3, 3))
    batch = to_rollouts(
        local_round(trl_output(), torch.zeros(3), torch.arange(3), torch.zeros(3, 3)),
        policy_version=0,
        correct_threshold=1.0,
        eos_token_ids=[1],
    )
    sample = dataclasses.replace(
        Sample.from_batch(batch, current_version=0), advantages=np.full(3, np.nan)
    )
    with pytest.raises(ValueError, match="no advantage"):
        to_trl_inputs(sample, slice(0, 3), pad_id=PAD, device="cpu")


def test_task_codes_travel_with_their_rows_into_the_task_column() -> None:
    from datasets import Dataset

    from llm_replay.frontend.tasks import TaskColumn

    column = TaskColumn("task", Dataset.from_dict({"prompt": ["a", "b"], "task": ["lcm", "gcd"]}))
    assert column.names == ("gcd", "lcm")  # sorted: the same codes on every process
    rows = [{"task": "lcm"}, {"task": "gcd"}, {"task": "lcm"}]
    codes = column.codes(rows, "cpu")
    out = trl_output()
    local = local_round(out, torch.ones(3), torch.tensor([0, 0, 1]), behaviour_logprobs(out), codes)
    order = np.array([2, 0, 1])
    batch = to_rollouts(
        local,
        policy_version=0,
        correct_threshold=1.0,
        eos_token_ids=[1],
        order=order,
        task_names=column.names,
    )
    assert batch.tasks == ("lcm", "lcm", "gcd")
    untagged = to_rollouts(
        local_round(out, torch.ones(3), torch.tensor([0, 0, 1]), behaviour_logprobs(out)),
        policy_version=0,
        correct_threshold=1.0,
        eos_token_ids=[1],
    )
    assert untagged.tasks == ("", "", "")
    with pytest.raises(ValueError, match=r"row task 'sums' is not in"):
        column.codes([{"task": "sums"}], "cpu")
    with pytest.raises(ValueError, match=r"replay_task_column = 'member': the train dataset has"):
        TaskColumn("member", Dataset.from_dict({"prompt": ["a"], "task": ["gcd"]}))
    with pytest.raises(ValueError, match=r"every row needs a non-empty task name"):
        TaskColumn("task", Dataset.from_dict({"prompt": ["a"], "task": [""]}))
