"""The workers around verl's real v1 trainer, as its own code sees them, for the real-step tests.

verl's trainer (`PPOTrainer.fit`, `step`, `_step_once`, its hooks, checkpointing and resume) runs
unchanged; what it talks to is replaced by the smallest objects that keep its contract:

- `AgentLoop`: verl's agent-loop manager as TransferQueue sees it. Each submitted prompt's N
  trajectories go in under `{uid}_{session}_0` with verl's tags, then the prompt's status. With
  `lag`, a prompt runs until the next submission (async generation: a group finishes a step
  later, under newer weights, so its trajectory spans two versions, `min_global_steps` <
  `max_global_steps`); without, it finishes at once (sync). A trajectory's tokens and reward
  depend only on its prompt and session, so a prompt generated again after a restart (verl
  re-issues in-flight prompts) gives the same rows;
- `Prompts`: the stateful dataloader verl fetches prompts from and checkpoints (`data.pt`);
- `Weights`: the checkpoint-engine managers (weights published, replicas slept, aborted, woken),
  whose published version the agent loop generates with;
- `ActorWorkers`: the actor worker group at `dp` data-parallel ranks, recording each update
  (keys, padding, uids, the advantages verl wrote, the rows' responses) and reporting the
  metrics an actor reports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tests.integrations.verl_v1.actor_metrics import FIELDS, actor_config, train_metrics
from tests.integrations.verl_v1.sim import token_fields
from verl.trainer.ppo.v1.trainer_separate_async import HybridEngineMode
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

TRAIN = "train"
N = 4  # rollouts per prompt
PROMPTS = 4  # train_batch_size, in prompts


class Prompts:
    """verl's train dataloader: chunks of `gen` prompts, each with an `index`, from a position
    that `state_dict` / `load_state_dict` save and restore."""

    def __init__(self, gen: int) -> None:
        self.gen = gen
        self.position = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            first = self.position * self.gen
            self.position += 1
            indices = list(range(first, first + self.gen))
            yield {
                "raw_prompt": np.array(
                    [[{"role": "user", "content": f"p{i}"}] for i in indices], dtype=object
                ),
                "index": torch.tensor(indices),
            }

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def trajectory(index: int, session: int) -> dict[str, Any]:
    """Prompt `index`'s session `session`: tokens, behaviour log-probs and a reward whose pass
    rate depends on the prompt (0, ¼, ½, 1 by index mod 4)."""
    rng = np.random.default_rng([index, session, 7])
    prompt = torch.tensor(np.random.default_rng([index, 7]).integers(3, 60, size=4))
    response = torch.tensor(rng.integers(3, 60, size=int(rng.integers(2, 7))))
    reward = float(rng.random() < (0.0, 0.25, 0.5, 1.0)[index % 4])
    return {
        **token_fields(prompt, response, reward, rng),
        "num_turns": 2,
        "session_id": session,
        "data_source": "sim",
        "reward_model": {"ground_truth": str(index)},
    }


class Weights:
    """The checkpoint-engine managers: `update_weights(step)` publishes version `step` to the
    replicas the agent loop generates with."""

    def __init__(self, loop: AgentLoop) -> None:
        self.loop = loop
        self.calls: list[str] = []
        self.sync_seconds = 0.0

    def update_weights(self, step: int) -> dict[str, float]:
        self.calls.append(f"update_weights({step})")
        time.sleep(self.sync_seconds)  # what a weight transfer to the replicas takes
        self.loop.version = int(step)
        self.loop.asleep = False  # verl wakes the replicas to load the weights
        return {}

    def sleep_replicas(self) -> None:
        self.calls.append("sleep")
        self.loop.asleep = True

    def abort_replicas(self, reject_request: bool = False) -> None:
        self.calls.append("abort")

    def resume_generation_replicas(self) -> None:
        self.calls.append("resume")


class AgentLoop:
    """verl's agent-loop manager, as TransferQueue sees it (module docstring)."""

    def __init__(self, trainer: Any, *, lag: bool, version: int = 0, fail_every: int = 0) -> None:
        self.trainer = trainer
        self.lag = lag
        self.version = version
        self.fail_every = fail_every  # every this many prompts, a session fails (0: none)
        self.asleep = False
        self.running: list[tuple[str, int, int, int]] = []  # uid, index, started at, step
        self.submitted: list[int] = []
        self.submitted_at: list[int] = []  # the trainer's step at each submission

    def generate_sequences(self, batch: Any) -> None:
        uids = [str(u) for u in batch["uid"]]
        indices = [int(i) for i in batch["index"]]
        if self.asleep and not self.lag:
            # verl's sync trainer puts the replicas to sleep after each update's sampling
            # (`on_sample_end`) and wakes them only with the next step's weights: a prompt
            # submitted in between is never generated, and the sampler would wait forever
            raise RuntimeError("prompts submitted to sleeping replicas: they would never finish")
        self.submitted.append(len(uids))
        step = int(self.trainer.global_steps)
        self.submitted_at.append(step)
        entries = [(uid, i, self.version, step) for uid, i in zip(uids, indices, strict=True)]
        if not self.lag:
            self._finish(entries)
            return
        self.finish_running()
        status = {"is_prompt": True, "status": "running", "global_steps": step}
        tq.kv_batch_put(keys=uids, partition_id=TRAIN, tags=[dict(status) for _ in uids])
        self.running.extend(entries)

    def finish_running(self) -> None:
        running, self.running = self.running, []
        self._finish(running)

    def _finish(self, entries: list[tuple[str, int, int, int]]) -> None:
        if not entries:
            return
        keys, fields, tags = [], [], []
        failed = set()
        for uid, index, started, step in entries:
            for session in range(N):
                if self.fail_every and index % self.fail_every == 0 and session == N - 1:
                    failed.add(uid)  # verl keeps the sessions that finished: a short group
                    continue
                row = trajectory(index, session)
                row["uid"] = uid
                row["global_steps"] = step
                row["extra_fields"] = {
                    "min_global_steps": started,
                    "max_global_steps": self.version,
                }
                keys.append(f"{uid}_{session}_0")
                fields.append(row)
                tags.append(
                    {
                        "status": "success",
                        "prompt_len": len(row["prompts"]),
                        "response_len": len(row["responses"]),
                        "seq_len": len(row["input_ids"]),
                        "global_steps": step,
                        "min_global_steps": started,
                        "max_global_steps": self.version,
                    }
                )
        tq.kv_batch_put(
            keys=keys, partition_id=TRAIN, fields=list_of_dict_to_tensordict(fields), tags=tags
        )
        uids = [uid for uid, *_ in entries]
        steps = [step for *_, step in entries]
        tq.kv_batch_put(
            keys=uids,
            partition_id=TRAIN,
            tags=[
                {
                    "is_prompt": True,
                    "status": "failure" if uid in failed else "finished",
                    "global_steps": s,
                }
                for uid, s in zip(uids, steps, strict=True)
            ],
        )


class ActorWorkers:
    """The actor worker group at `dp` data-parallel ranks (module docstring)."""

    def __init__(self, dp: int) -> None:
        self._dispatch_info = {"actor": list(range(dp))}
        self.updates: list[dict[str, Any]] = []
        self.saved: list[str] = []

    def update_actor(self, batch: Any) -> dict[str, Any]:
        """verl's `update_actor`: the metrics its engine worker returns, keys and values
        (`actor_metrics.py`: verl's own `ppo_loss` with the configured loss, per mini-batch)."""
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=[*FIELDS, "uid"]
        )
        dp = len(self._dispatch_info["actor"])
        metrics, token_entropy = train_metrics(self.actor_config, data, batch.extra_info, dp)
        advantages = [float(a.sum()) if a.numel() else 0.0 for a in data["advantages"].unbind(0)]
        self.updates.append(
            {
                "keys": list(batch.keys),
                "padding": [bool(t.get("is_padding", False)) for t in batch.tags],
                "uids": [str(u) for u in data["uid"]],
                "advantage_sums": advantages,
                "responses": [tuple(r.tolist()) for r in data["responses"].unbind(0)],
                "min_global_steps": [t.get("min_global_steps") for t in batch.tags],
                "metrics": metrics,
                "token_entropy": token_entropy,  # each mini-batch's, the plain token mean
            }
        )
        return {"metrics": {key: list(values) for key, values in metrics.items()}}

    def save_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        Path(local_path).mkdir(parents=True, exist_ok=True)
        self.saved.append(local_path)

    def load_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        if not Path(local_path).is_dir():
            raise FileNotFoundError(local_path)


def wire(
    trainer: Any, *, dp: int, lag: bool, fail_every: int = 0
) -> tuple[AgentLoop, ActorWorkers]:
    """Give a verl trainer built from its config (`PPOTrainer.__init__`, which builds our
    sampler through `_build_replay_buffer`) the stub workers in place of `init()`'s."""
    trainer.replay_buffer.poll_interval = 0.01
    trainer.tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    workers = ActorWorkers(dp)
    workers.actor_config = actor_config(trainer.config)  # as verl's worker builds its loss's
    trainer.actor_rollout_wg = workers
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[])
    loop = AgentLoop(trainer, lag=lag, fail_every=fail_every)
    trainer.agent_loop_manager = loop
    weights = Weights(loop)
    trainer.checkpoint_manager = weights
    if trainer.trainer_mode == "separate_async":
        trainer.standalone_checkpoint_manager = weights  # its standalone rollout replicas
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: dp)
    trainer.curr_step_profile = False
    trainer.timing_raw = {}
    trainer.train_dataloader = Prompts(trainer.config.data.get("gen_batch_size") or PROMPTS)
    trainer.train_dataloader_it = None
    trainer.total_training_steps = int(trainer.config.trainer.total_training_steps)
    trainer.steps_per_epoch = 10_000
    if trainer.trainer_mode == "separate_async":  # as its _setup sets with hybrid_engine=false
        trainer.current_mode = HybridEngineMode.TRAINER
    trainer._init_dump_executor()
    trainer._load_checkpoint()  # the end of verl's `_setup`: from scratch, or resume
    trainer.on_init_end()  # publishes the (resumed) weights
    return loop, workers


def clear_transfer_queue() -> None:
    """A fresh TransferQueue, as a restarted job has."""
    listed = tq.kv_list(TRAIN) or {}
    keys = list(listed.get(TRAIN, {}))
    if keys:
        tq.kv_clear(keys=keys, partition_id=TRAIN)
