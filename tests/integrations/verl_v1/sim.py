"""verl's sync trainer, step by step, as far as its sampler and TransferQueue see it.

Each step puts a generation's prompt keys and trajectories into TransferQueue the way verl's
agent loop does (`agent_loop_tq.py`: keys `{uid}_{session}_0`, jagged tensors, tags with the
weight versions), calls the sampler, computes the advantages with verl's own
`compute_advantage_for_multi_trajectories` as `_compute_advantage` does, and clears the trained
keys as `fit` does after the step. Every trajectory carries a `trajectory_id` so a test can find
the original of any row it gets back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from verl import DataProto
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from llm_replay.integrations.verl.trajectories import split_rows

TRAIN = "train"


def token_fields(
    prompt_ids: torch.Tensor, response: torch.Tensor, reward: float, rng: np.random.Generator
) -> dict[str, Any]:
    """A trajectory's tensor fields as verl's agent loop writes them: tokens, masks, positions,
    behaviour log-probs (drawn from `rng`) and `rm_scores` with the reward on the last token."""
    scores = torch.zeros(len(response), dtype=torch.float32)
    scores[-1] = reward
    input_ids = torch.cat([prompt_ids, response])
    return {
        "prompts": prompt_ids,
        "responses": response,
        "response_mask": torch.ones_like(response),
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "position_ids": torch.arange(len(input_ids)),
        "rollout_log_probs": -torch.tensor(rng.random(len(response)), dtype=torch.float32),
        "rm_scores": scores,
    }


@dataclass
class Step:
    keys: list[str]
    tags: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    advantages: np.ndarray
    metrics: dict[str, Any]


class SimulatedVerl:
    def __init__(self, sampler: Any, *, prompts: int = 4, n: int = 4, seed: int = 0) -> None:
        self.sampler = sampler
        self.prompts = prompts
        self.n = n
        self.seed = seed
        self.generated: dict[str, dict[str, Any]] = {}
        self.refills: list[int] = []
        self.current_step = 0
        sampler.refill_fn = self.refill

    def refill(self, count: int) -> None:
        """verl's `_add_prompts_to_generate`: `count` more prompts for this step, generated."""
        self.refills.append(count)
        self.generate(self.current_step, prompts=count, round_=len(self.refills))

    def pass_rate(self, prompt: int) -> float:
        return (0.0, 0.25, 0.5, 1.0)[prompt % 4]

    def trajectory(
        self, step: int, prompt: int, session: int, round_: int = 0
    ) -> tuple[dict[str, Any], dict]:
        rng = np.random.default_rng([self.seed, step, prompt, round_ + 100])
        prompt_ids = torch.tensor(rng.integers(3, 60, size=int(rng.integers(3, 7))))
        rng = np.random.default_rng([self.seed, step, prompt, round_ + 100, session])
        response = torch.tensor(rng.integers(3, 60, size=int(rng.integers(2, 7))))
        reward = float(rng.random() < self.pass_rate(prompt))
        uid = f"s{step}r{round_}p{prompt}" if round_ else f"s{step}p{prompt}"
        fields = {
            **token_fields(prompt_ids, response, reward, rng),
            "uid": uid,
            "session_id": session,
            "global_steps": step,
            "raw_prompt": [{"role": "user", "content": f"prompt {step}-{prompt}"}],
            "data_source": "sim",
            "reward_model": {"ground_truth": str(prompt)},
            "extra_fields": {"min_global_steps": step - 1, "max_global_steps": step - 1},
            "trajectory_id": f"t{step}-{prompt}-{session}" + (f"-r{round_}" if round_ else ""),
        }
        tag = {
            "status": "success",
            "prompt_len": len(prompt_ids),
            "response_len": len(response),
            "seq_len": len(fields["input_ids"]),
            "global_steps": step,
            "min_global_steps": step - 1,
            "max_global_steps": step - 1,
        }
        return fields, tag

    def generate(
        self,
        step: int,
        failed: dict[int, int] | None = None,
        prompts: int | None = None,
        round_: int = 0,
    ) -> list[str]:
        """One generation round finished: prompt keys and trajectories in TransferQueue. A prompt
        in `failed` ends with status "failure" and only that many of its sessions delivered."""
        failed = failed or {}
        count = self.prompts if prompts is None else prompts
        prefix = f"s{step}r{round_}" if round_ else f"s{step}"
        uids = [f"{prefix}p{p}" for p in range(count)]
        tags_of_prompts = [
            {
                "is_prompt": True,
                "status": "failure" if p in failed else "finished",
                "global_steps": step,
            }
            for p in range(count)
        ]
        tq.kv_batch_put(keys=uids, partition_id=TRAIN, tags=tags_of_prompts)
        keys, fields, tags = [], [], []
        for p in range(count):
            for s in range(failed.get(p, self.n)):
                row, tag = self.trajectory(step, p, s, round_)
                keys.append(f"{prefix}p{p}_{s}_0")
                fields.append(row)
                tags.append(tag)
                self.generated[row["trajectory_id"]] = row
        tq.kv_batch_put(
            keys=keys, partition_id=TRAIN, fields=list_of_dict_to_tensordict(fields), tags=tags
        )
        return keys

    def step(self, step: int, failed: dict[int, int] | None = None) -> Step:
        self.current_step = step
        self.generate(step, failed)
        meta, metrics = self.sampler.sample(step, TRAIN, self.prompts)
        keys = list(meta.keys)
        data = tq.kv_batch_get(keys=keys, partition_id=TRAIN)
        rows = split_rows(data, len(keys))
        advantages = self.advantages(keys)
        tq.kv_clear(keys=keys, partition_id=TRAIN)
        return Step(keys, list(meta.tags), rows, advantages, metrics)

    @staticmethod
    def advantages(keys: list[str]) -> np.ndarray:
        """verl's `_compute_advantage` with `algorithm.adv_estimator=llm_replay`: one per row."""
        fields = ["uid", "response_mask", "rm_scores"]
        data = tq.kv_batch_get(keys=keys, partition_id=TRAIN, select_fields=fields)
        proto = DataProto(batch=data.to_padded_tensor())
        proto.batch["token_level_scores"] = proto.batch["rm_scores"]
        proto.batch["token_level_rewards"] = proto.batch["rm_scores"]
        proto.non_tensor_batch["uid"] = np.array(proto.batch.pop("uid").tolist(), dtype=object)
        proto = compute_advantage_for_multi_trajectories(
            proto, batch_keys=keys, adv_estimator="llm_replay"
        )
        return proto.batch["advantages"][:, 0].numpy().astype(np.float64)
