"""`ReplayGRPOTrainer`: TRL's `GRPOTrainer` with any llm-replay method deciding what is trained.

It wraps TRL and copies none of it. Five methods are overridden, each calling `super()`:

- `_calculate_rewards` keeps the rewards TRL gathered (TRL's output carries only advantages, and
  positive-biased replay, RLEP and zero-variance replacement need rewards);
- `_generate_and_score_completions` adds the behaviour log-probs when TRL skipped them (TRL only
  computes `old_per_token_logps` when it expects the weights to move before the rows are trained;
  a replayed row's ratio must be against the policy that generated it, never 1 by accident);
- `_prepare_inputs` runs a round through the method: TRL generates and scores (its own code,
  shuffled as TRL shuffles), the round is gathered whole from every process, the method turns it
  into micro-batches, and each micro-step trains the next one. TRL's loss reads them unchanged;
- `_compute_loss` and `_get_per_token_logps_and_entropies` apply the token controls (Clip-Cov,
  KL-Cov, a weight on replayed successes; `integrations.trl.token_control`) and log the
  covariance of log-probs and advantages on fresh and reused rows, as our learner does.

Replay ratio in TRL's terms: a micro-batch is `per_device_train_batch_size × processes` rows (B/GA),
so a round of R = `generation_batch_size` rollouts feeds y·R/B optimizer steps. With the on-policy
method this is exactly `GRPOTrainer` (tested on losses and weights); prompts that the dataloader
hands over while a round is still being trained are not used, as in TRL between generations.

AsymRE (`replay_loss="asymre"`) needs no loss of its own: its gradient −(A − δV)∇log π is TRL's
loss with advantages A − δV and no `old_per_token_logps` (ratio 1 with the gradient of log π).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict

from llm_replay.algorithms.advantages import group_advantages
from llm_replay.algorithms.token_control import clip_cov_generator
from llm_replay.buffer import Sample
from llm_replay.checks import integer
from llm_replay.data.batch import RolloutBatch
from llm_replay.frontend.checkpoint import TrainerCheckpoints, load_front_end, save_front_end
from llm_replay.frontend.meter import count_generated, count_metrics, count_trained, draw_metrics
from llm_replay.frontend.stages import TrainerStages
from llm_replay.frontend.tasks import TaskColumn
from llm_replay.frontend.token_control import (
    BEHAVIOUR_KEY,
    RAW_ADVANTAGES_KEY,
    REUSED_KEY,
    WEIGHTS_KEY,
    ControlledMicroBatch,
    weighted_advantages,
)
from llm_replay.integrations.trl.callbacks import StepTimer
from llm_replay.integrations.trl.config import ReplayGRPOConfig
from llm_replay.integrations.trl.rounds import (
    behaviour_logprobs,
    behaviour_or_zeros,
    gather_round,
    local_round,
    one_input_per_prompt,
    process_rows,
    shuffled,
    step_major,
    to_rollouts,
    to_trl_inputs,
)
from llm_replay.integrations.trl.token_control import trl_aggregate
from llm_replay.learner import CovarianceSums, reused_rows
from llm_replay.methods.host import ReplayHost, RunShape
from llm_replay.metrics import ComputeMeter
from llm_replay.runtime.adaptive_rollouts import AdaptiveRollouts

STATE_FILE = "replay_state.json"
BUFFER_METRICS = frozenset(
    {"buffer/size", "buffer/tokens", "buffer/stored_age_mean", "buffer/stored_reuse_mean"}
)


class ReplayGRPOTrainer(TrainerCheckpoints, GRPOTrainer):  # type: ignore[misc]
    """`trl.GRPOTrainer` whose trained batches come from an llm-replay method (module docstring)."""

    num_generations: int  # TRL's; a stage of adaptive rollouts sets it for its call
    state_file = STATE_FILE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, ReplayGRPOConfig):
            raise TypeError(f"args: expected ReplayGRPOConfig, got {type(self.args).__name__}")
        if self.tools:
            raise ValueError("tools: replay of tool-calling rollouts is not supported yet")
        a = self.args
        self.micro_rows = a.per_device_train_batch_size * self.accelerator.num_processes
        shape = RunShape(
            batch_size=self.micro_rows,
            rollouts_per_step=a.generation_batch_size,
            group_size=self.num_generations,
            seed=a.seed,
            advantage=a.advantage_estimator,
            tasks=a.replay.tasks.parts(),
        )
        self.tasks = (
            None
            if a.replay_task_column is None
            else TaskColumn(a.replay_task_column, self.train_dataset)
        )
        self.host = ReplayHost.build(a.replay.method, a.replay.settings, a.replay.options, shape)
        self.host.refuse_restarts(
            "replay_method",
            a.replay_method,
            "ReplayGRPOTrainer does not do; collect its pool in a native run and pass "
            "replay_knobs.pool_path (phase I is then skipped)",
        )
        self.pipeline = self.host.pipeline
        self.meter = ComputeMeter(parameters=sum(p.numel() for p in self.model.parameters()))
        self.adaptive: AdaptiveRollouts | None = None
        if a.adaptive.enabled:
            if self.accelerator.num_processes > 1:
                raise ValueError(
                    f"replay_adaptive.enabled: one process only ({self.accelerator.num_processes} "
                    "here): each stage's size depends on what the last one solved, so processes "
                    "would disagree on the sizes of TRL's collectives" + a.recipe_adaptive_hint()
                )
            self.adaptive = AdaptiveRollouts(a.adaptive)
        self.token_control = a.token_control
        if a.replay.init_from is not None:  # after the settings _needs_behaviour reads
            self.host.preload(
                a.replay.init_from, "replay_knobs.init_from", reads_behaviour=self._needs_behaviour
            )
        self._controlled: ControlledMicroBatch | None = None
        self._covariance = CovarianceSums()
        self._treated: list[float] = []
        self._control_generator: tuple[int, torch.Generator] | None = None
        self.last_round_reward = float("nan")
        self.rounds = 0
        self._round: Iterator[Sample] | None = None
        self._rewards: torch.Tensor | None = None
        self._generation_seconds = 0.0
        self.last_draw: dict[str, float] = {}
        self.last_sample: Sample | None = None
        self.progress_override: float | None = None  # set by a front end that owns the budget
        self.reward_version = 0
        self.add_callback(StepTimer(self))

    def budget_progress(self) -> float | None:
        """How far through training the run is, for the method's signals: what the front end
        driving the trainer says (llm-replay's TRL runner, whose budget is on compute), else
        `global_step / max_steps` as TRL plans it."""
        if self.progress_override is not None:
            return self.progress_override
        max_steps = getattr(self.state, "max_steps", 0)
        return self.state.global_step / max_steps if max_steps and max_steps > 0 else None

    def set_reward_version(self, version: int) -> None:
        """Say that the reward functions changed (a reward model in `reward_funcs` was retrained
        or swapped): rollouts scored from now on carry `version`, and the `stale_rewards` option
        treats those scored before as stale. Versions never go back."""
        integer("version", version, minimum=0)
        if version < self.reward_version:
            raise ValueError(
                f"version = {version}: the reward version is already {self.reward_version} and "
                "never goes back"
            )
        self.reward_version = version

    # ------------------------------------------------------------------ TRL hooks (each calls super)
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, ids: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, ids)
        weights = self.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        self._rewards = total
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out: dict[str, Any] = super()._generate_and_score_completions(inputs)
        if self.model.training and behaviour_logprobs(out) is None and self._needs_behaviour:
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
            mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
            with torch.no_grad():
                out["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    ids,
                    mask,
                    out["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
        return out

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        controlled, self._controlled = self._controlled, None
        if controlled is not None and torch.is_grad_enabled():  # the loss's forward pass
            controlled.treat(out[0])  # before TRL reads the advantages
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        if REUSED_KEY not in inputs or not self.model.training:
            return super()._compute_loss(model, inputs)
        controlled = ControlledMicroBatch(self.token_control, inputs, self._clip_cov_generator())
        self._controlled = controlled
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._controlled = None
        if controlled.logprobs is None:
            raise RuntimeError("TRL's loss computed no log-probs through the trainer's hook")
        self._record_control(controlled)
        term = controlled.kl_term()
        return loss if term is None else loss + self._reduce_like_trl(term, controlled)

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)  # type: ignore[no-any-return]
        while True:
            if self._round is not None:
                self.host.set_policy_version(self.state.global_step)
                sample = next(self._round, None)
                if sample is not None:
                    return self._micro_batch(sample)
            fresh = self._fresh_round(generation_batch)
            self._round = self.host.round(fresh, mu=self.meter.mu, progress=self.budget_progress())

    def save_replay_state(self, target: Path) -> None:
        state: dict[str, Any] = {"rounds": self.rounds, "reward_version": self.reward_version}
        if self.adaptive is not None:
            state["adaptive"] = self.adaptive.state()
        save_front_end(
            self.host,
            target,
            state,
            meter=self.meter,
            behaviour_stored=self._needs_behaviour,
            state_file=STATE_FILE,
        )

    def load_replay_state(self, directory: Path) -> None:
        reader = self._behaviour_reader() if self._needs_behaviour else None
        state = load_front_end(
            self.host, directory, meter=self.meter, reader=reader, state_file=STATE_FILE
        )
        self.rounds = int(state["rounds"])
        self.reward_version = int(state.get("reward_version", 0))
        if self.adaptive is not None:
            if "adaptive" not in state:
                self.args.refuse_missing_adaptive(directory)
            self.adaptive.load_state(state["adaptive"])
        self._round = None
        self._control_generator = None

    # ------------------------------------------------------------------ rounds and micro-batches
    def _clip_cov_generator(self) -> torch.Generator | None:
        """One generator per optimizer step, seeded by the step: a resumed run picks the tokens
        an unbroken one does."""
        if not self.token_control.chooses_at_random:
            return None
        step = int(self.state.global_step)
        if self._control_generator is None or self._control_generator[0] != step:
            self._control_generator = (step, clip_cov_generator(self.args.seed, step))
        return self._control_generator[1]

    def _record_control(self, controlled: ControlledMicroBatch) -> None:
        assert controlled.logprobs is not None
        inputs = controlled.inputs
        self._covariance.add(
            controlled.logprobs.detach(),
            inputs[RAW_ADVANTAGES_KEY],
            controlled.mask,
            inputs[REUSED_KEY],
        )
        if self.token_control.chooses_tokens:
            self._treated.append(controlled.treated_share())

    def _reduce_like_trl(self, term: torch.Tensor, controlled: ControlledMicroBatch) -> Any:
        a = self.args
        return trl_aggregate(
            term,
            controlled.mask,
            loss_type=str(self.loss_type),
            accumulation=int(self.current_gradient_accumulation_steps),
            max_completion_length=int(self.max_completion_length),
            items=controlled.inputs.get("num_items_in_batch"),
            processes=self.accelerator.num_processes,
            steps_per_generation=int(a.steps_per_generation),
        )

    def _behaviour_reader(self) -> str:
        """What in this run reads the stored behaviour log-probs, for a refusal."""
        if self.token_control.reads_behaviour:
            return f"replay_token_control ({self.token_control.mode})"
        return f"replay_loss = {self.args.replay_loss!r} (its ratio)"

    @property
    def _needs_behaviour(self) -> bool:
        """The host's rule (`ReplayHost.reads_behaviour`): False where nothing reads them, AsymRE
        without KL-Cov and the on-policy queue, where every row is trained once before the
        weights move (TRL's shortcut). Adaptive rounds of any size carry rows of one round into
        the next step, after the weights moved."""
        return self.host.reads_behaviour(
            ratio=self.args.replay_loss != "asymre",
            control=self.token_control.reads_behaviour,
            carries_rows=self.adaptive is not None,
        )

    def _fresh_round(self, generation_batch: Any) -> RolloutBatch:
        """One round generated and scored by TRL (plain, or AR3PO's stages), timed as generation."""
        start = time.perf_counter()
        if self.adaptive is None:
            fresh, reward = self._plain_round(generation_batch)
        else:
            fresh, reward = self._adaptive_round(generation_batch)
        self.rounds += 1
        self.last_round_reward = reward
        seconds = time.perf_counter() - start
        self._generation_seconds += seconds
        self.meter.add_seconds("generation", seconds)
        return fresh

    def _plain_round(self, generation_batch: Any) -> tuple[RolloutBatch, float]:
        out, rewards = self._scored(generation_batch)
        rows = out["completion_ids"].shape[0]
        rank, processes = self.accelerator.process_index, self.accelerator.num_processes
        first = self.rounds * self.args.generation_batch_size + rank * rows
        out["replay_rewards"] = rewards[rank * rows : (rank + 1) * rows]
        out["replay_groups"] = (
            torch.arange(first, first + rows, device=out["completion_ids"].device)
            // self.num_generations
        )
        if self.tasks is not None:
            device = out["completion_ids"].device
            out["replay_tasks"] = self.tasks.codes(generation_batch, device)
        out = shuffle_sequence_dict(out)  # TRL shuffles each generation batch before splitting
        behaviour = behaviour_or_zeros(out)
        local = local_round(
            out, out["replay_rewards"], out["replay_groups"], behaviour, out.get("replay_tasks")
        )
        gathered = gather_round(self.accelerator, local, self._tokenizer.pad_token_id)
        total = gathered["completion_ids"].shape[0]
        order = step_major(total, processes, self.args.per_device_train_batch_size)
        fresh = self._as_rollouts(gathered, order)
        count_generated(self.meter, fresh, prompts=total // self.num_generations)
        return fresh, float(fresh.rewards.mean())

    def _adaptive_round(self, generation_batch: Any) -> tuple[RolloutBatch, float]:
        """AR3PO's round (`runtime.adaptive_rollouts`): stages through TRL's generate-and-score,
        reuse, then each group's advantage over the group as it ends up."""
        assert self.adaptive is not None
        group_size = self.num_generations
        inputs = one_input_per_prompt(generation_batch, group_size)
        stages = TrainerStages(inputs, group_size, self._stage, self.reward_version)
        indices = np.arange(len(inputs), dtype=np.int64)
        first_group = self.rounds * (self.args.generation_batch_size // group_size)
        batch, _ = self.adaptive.sample(stages, indices, first_group, self.meter)
        batch = self.adaptive.reuse(batch, indices, first_group, stages)
        advantages = group_advantages(batch.rewards, batch.group_ids, self.args.advantage_estimator)
        generated = ~self.adaptive.reused_rows
        return shuffled(batch.with_advantages(advantages)), float(batch.rewards[generated].mean())

    def _stage(self, rows: list[Any], n: int, group_ids: np.ndarray) -> RolloutBatch:
        """One stage: TRL generates and scores `rows` (each prompt `n` times in a row) as groups
        of `n`; its advantages are dropped (the round computes them)."""
        saved = self.num_generations
        self.num_generations = n  # TRL groups rewards (and asks vLLM for n) by this
        try:
            out, rewards = self._scored(rows)
        finally:
            self.num_generations = saved
        device = out["completion_ids"].device
        groups = torch.as_tensor(group_ids, device=device)
        tasks = None if self.tasks is None else self.tasks.codes(rows, device)
        local = local_round(out, rewards, groups, behaviour_or_zeros(out), tasks)
        return self._as_rollouts(local)

    def _scored(self, inputs: Any) -> tuple[dict[str, Any], torch.Tensor]:
        """TRL's generate-and-score on `inputs`, and the total rewards it gathered."""
        self._rewards = None
        out = self._generate_and_score_completions(inputs)
        if self._rewards is None:
            raise RuntimeError("TRL returned completions without calling _calculate_rewards")
        return out, self._rewards

    def _as_rollouts(self, round_: dict[str, Any], order: np.ndarray | None = None) -> RolloutBatch:
        return to_rollouts(
            round_,
            policy_version=self.state.global_step,
            correct_threshold=self.args.replay_correct_threshold,
            eos_token_ids=self.eos_token_ids,
            order=order,
            reward_version=self.reward_version,
            task_names=("",) if self.tasks is None else self.tasks.names,
        )

    def _micro_batch(self, sample: Sample) -> dict[str, Any]:
        a = self.args
        advantages = sample.advantages.astype(np.float64)
        asymre = a.replay_loss == "asymre"
        if asymre:
            advantages = advantages - a.replay_delta_v
        if a.replay_sampling_weights:  # a weight on the row's whole loss, as our learner's
            advantages = advantages * sample.importance_weights
        rows = process_rows(
            len(sample), self.accelerator.num_processes, self.accelerator.process_index
        )
        inputs = to_trl_inputs(
            sample,
            rows,
            pad_id=self._tokenizer.pad_token_id,
            device=self.accelerator.device,
            tokens_scale=a.steps_per_generation,
            advantages=advantages,
        )
        behaviour = inputs.pop("old_per_token_logps")
        if self._needs_behaviour and not asymre:
            inputs["old_per_token_logps"] = behaviour
        weights = sample.importance_weights if a.replay_sampling_weights else None
        self._add_control_inputs(inputs, sample, rows, behaviour, weights)
        if self.use_vllm and self.vllm_importance_sampling_correction:
            # the stored behaviour is the engine's own log-probs: the ratio already corrects for it
            inputs["importance_sampling_ratio"] = torch.ones_like(
                inputs["completion_mask"], dtype=torch.float32
            )
        count_trained(self.meter, sample)
        self.last_sample = sample
        self.last_draw = draw_metrics(sample)
        for key, value in self.last_draw.items():
            self._metrics["train"][key].append(value)
        return inputs

    def _add_control_inputs(
        self,
        inputs: dict[str, Any],
        sample: Sample,
        rows: slice,
        behaviour: torch.Tensor,
        weights: np.ndarray | None,
    ) -> None:
        """What the loss hooks read (`integrations.trl.token_control`), under keys TRL ignores."""
        device = inputs["advantages"].device
        reused = torch.from_numpy(reused_rows(sample)[rows]).to(device)
        raw = torch.from_numpy(sample.advantages[rows].astype(np.float32)).to(device)
        inputs[REUSED_KEY], inputs[RAW_ADVANTAGES_KEY] = reused, raw
        inputs["advantages"] = weighted_advantages(
            self.token_control, inputs["advantages"], raw, reused
        )
        if self.token_control.reads_behaviour:
            inputs[BEHAVIOUR_KEY] = behaviour
            if weights is not None:  # the term is weighted as the row's loss is
                inputs[WEIGHTS_KEY] = torch.from_numpy(weights[rows].astype(np.float32)).to(device)

    def replay_metrics(self) -> dict[str, float]:
        """The method's metrics (buffer size, …) and the compute counts, for TRL's logs."""
        out = {
            f"replay/{k}": float(v)
            for k, v in self.host.metrics().items()
            if not k.startswith("buffer/") or k in BUFFER_METRICS or k.startswith("buffer/task/")
        }
        if self.adaptive is not None:
            out.update({f"replay/{k}": v for k, v in self.adaptive.metrics().items()})
        out["replay/rounds"] = float(self.rounds)
        out.update(count_metrics(self.meter, "replay/"))
        out.update(self._covariance.metrics())  # loss/cov_fresh, loss/cov_replayed: the last step
        if self._treated:
            out["loss/cov_treated"] = float(np.mean(self._treated))
        return out
