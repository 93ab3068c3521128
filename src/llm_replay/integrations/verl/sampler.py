"""`ReplaySampler`: verl v1's custom sampler, with an llm-replay method composing each step's batch.

verl's own sampler hands each finished prompt group out once and the trainer clears every key it
trained on from TransferQueue. This one wraps it (every waiting, eviction and refill decision is
verl's, through `super().sample`) and then:

1. reads the fresh groups' trajectories whole and turns them into llm-replay rollouts (rewards
   are the summed `rm_scores`, behaviour log-probs the stored `rollout_log_probs`, the policy
   version the weights that started the trajectory, `min_global_steps`);
2. runs them through the method (`ReplayPipeline`: its table, options and signals), which
   returns the step's rows, fresh and replayed, as it would in llm-replay's own loop;
3. puts every returned row back into TransferQueue under a key of its own (`llmreplay-N_0_0`,
   its `uid` field the same), clears the fresh keys it read, and books each row's advantage
   for verl's advantage step (`advantages.py`).

So what verl clears after the step is exactly what was put for it, and a replayed trajectory
survives in the sampler (`trajectories.py`) for as long as the method's tables hold its group.
A verl step with replay ratio y trains on y·R rows (R = train_batch_size × rollout.n), in
y·R / (ppo_mini_batch_size × n) optimizer steps, as `replay_ratio` means in llm-replay.

Modes: verl's `sync` trainer builds `ReplaySampler` on verl's `ReplayBuffer`; its async trainers
(`colocate_async`, `separate_async`) get `AsyncReplaySampler` from the same configured name, on
verl's `ReplayBufferAsync`, so verl's own staleness control (`max_off_policy_threshold`, drop or
wait), failure eviction, refills and `wait_for_sampleable` / `get_sampleable_count` decide which
fresh groups arrive, and the method decides what is replayed: the threshold bounds a fresh
group's age when it is first trained, the method's `max_age` (counted from the same
`min_global_steps`) how long a stored row is replayed; a fresh group older than `max_age` is
trained once and never stored (the table evicts it on insert). Validation batches pass through
verl's own sampler unchanged. The learner-side signals and μ come from verl's actor
(`observer.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from llm_replay.buffer import Sample
from llm_replay.config.parse import ConfigError
from llm_replay.data.batch import RolloutBatch
from llm_replay.frontend.clock import UpdateClock
from llm_replay.frontend.hooks import time_methods
from llm_replay.frontend.payloads import TrajectoryStore
from llm_replay.frontend.settings import lookup, lookup_int
from llm_replay.integrations.verl.advantages import BOOK, UID_PREFIX, AdvantageBook
from llm_replay.integrations.verl.observer import (
    entropy_is_token_mean,
    missing_signals,
    observe_updates,
    step_statistics,
    trainer_of,
)
from llm_replay.integrations.verl.settings import (
    SamplerSettings,
    run_length,
    startup_problems,
    verl_root,
)
from llm_replay.integrations.verl.startup import MODES, mode_named
from llm_replay.integrations.verl.state import (
    STATE_DIR,
    STATE_FILE,
    SamplerCheckpoints,
    StepTally,
    missing_state_message,
)
from llm_replay.integrations.verl.trajectories import read_rollouts, split_rows
from llm_replay.methods.host import ReplayHost, RunShape, reads_behaviour
from llm_replay.metrics.compute import ComputeMeter

log = logging.getLogger(__name__)
TRAIN = "train"
MAX_REFILLS = 8  # refills one step may ask for before the sampler stops the run
# verl's own sampler polls TransferQueue every 2 s (and the trainer passes none): the wait for a
# step's rollouts is μ's generation time, so a coarse poll would round it up by up to 2 s
POLL_SECONDS = 0.05


class ReplaySampler(SamplerCheckpoints, ReplayBuffer):  # type: ignore[misc]
    """verl v1's `ReplayBuffer` whose training batches an llm-replay method composes (module
    docstring). verl builds it from `trainer.v1.sampler.custom_sampler` with `sampler_kwargs`;
    in verl's async modes the same name builds an `AsyncReplaySampler`."""

    def __new__(cls, trainer_mode: str = "sync", *args: Any, **kwargs: Any) -> ReplaySampler:
        mode = MODES.get(str(trainer_mode))
        if cls is ReplaySampler and mode is not None and mode.asynchronous:
            cls = AsyncReplaySampler
        return super().__new__(cls)  # type: ignore[no-any-return]

    def __init__(
        self,
        trainer_mode: str,
        trainer_config: Any,
        max_off_policy_threshold: int | None,
        max_off_policy_strategy: str,
        sampler_kwargs: Any,
        poll_interval: float = POLL_SECONDS,
        refill_fn: Any = None,
        book: AdvantageBook = BOOK,
        **kwargs: Any,
    ) -> None:
        self.mode = mode_named(trainer_mode)
        if isinstance(self, AsyncReplaySampler) != self.mode.asynchronous:
            raise ValueError(
                f"trainer.v1.trainer_mode = {trainer_mode!r}: name ReplaySampler in "
                "custom_sampler.name (it builds the class the mode needs)"
            )
        super().__init__(
            trainer_mode,
            trainer_config,
            max_off_policy_threshold,
            max_off_policy_strategy,
            sampler_kwargs,
            poll_interval=poll_interval,
            refill_fn=refill_fn,
            **kwargs,
        )
        try:
            self.settings = SamplerSettings.from_kwargs(sampler_kwargs)
        except ConfigError as error:
            raise ValueError(str(error)) from None
        root = verl_root(sampler_kwargs)
        replay = self.settings.replay
        self.replays = reads_behaviour(replay.method, replay.options, ratio=True)
        problems = startup_problems(
            root, self.replays, self.settings.advantage, self.settings.recipe
        )
        self.group_size = self.settings.group_size or lookup_int(
            root, "actor_rollout_ref.rollout.n"
        )
        self.mini_batch_prompts = self.settings.mini_batch_prompts or lookup_int(
            root, "actor_rollout_ref.actor.ppo_mini_batch_size"
        )
        problems += missing_signals(root, replay)
        if problems:
            raise ValueError("; ".join(problems))
        self.root = root
        self.calls_per_step = lookup_int(trainer_config, "parameter_sync_step") or 1
        self.total_steps = self.settings.total_steps or run_length(root, self.calls_per_step)
        directory = self.settings.checkpoint_dir or lookup(root, "trainer.default_local_dir")
        self.checkpoint_dir = None if directory is None else Path(str(directory))
        self.measures_mu = self.mode.waits_for_rollouts
        mode_problems = list(self.mode.refusals(replay.method, replay.settings))
        if mode_problems:
            raise ValueError("; ".join(mode_problems))
        if max_off_policy_threshold is not None and self.replays:
            log.info(
                "llm-replay sampler: verl's max_off_policy_threshold (%s, %s) %s; replayed rows "
                "age as the method's own knobs say (max_age where it has one)",
                max_off_policy_threshold,
                max_off_policy_strategy,
                "is a no-op in sync mode" if self.measures_mu else "bounds first-trained age",
            )
        self.behaviour_statistics = bool(lookup(root, "algorithm.rollout_correction.bypass_mode"))
        self.token_mean_entropy = entropy_is_token_mean(root)
        self.meter = ComputeMeter()
        self.step_samples: list[Sample] = []
        trainer = trainer_of(refill_fn)
        if trainer is not None:
            observe_updates(trainer, self._after_update)
            if self.measures_mu:
                time_methods(trainer, ("on_sample_end", "on_step_end"), self._generation_overhead)
        self.book = book
        self.store = TrajectoryStore()
        self.host: ReplayHost | None = None
        self.prompts_per_step: int | None = None
        self.next_uid = 0
        self.next_group = 0
        self.steps = 0
        self.issued: list[str] = []
        self.pending: list[Sample] = []
        self.step = StepTally()
        self.clock = UpdateClock()
        self.started = False

    # ---------------------------------------------------------------- verl's entry point
    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:  # type: ignore[type-arg]
        if partition_id != TRAIN:
            return super().sample(global_steps, partition_id, batch_size)  # type: ignore[no-any-return]
        if not self.started:
            self._start(global_steps, batch_size)
        if batch_size != self.prompts_per_step:
            raise ValueError(
                f"batch_size = {batch_size}: this sampler was built for {self.prompts_per_step} "
                "prompts a step"
            )
        self.book.forget(self.issued)
        if global_steps != self.step.number:
            self.step = StepTally(global_steps, calls_left=self.calls_per_step)
            self.clock.publish(global_steps - 1)
        metrics: dict[str, Any] = {}
        if self.measures_mu:  # sync: the step's prompts were all generated by one version
            if not self.step.composed:
                metrics = self._fill(global_steps, batch_size * self.calls_per_step, batch_size)
            share = -(-len(self.pending) // max(1, self.step.calls_left))
        else:
            metrics = self._fill(global_steps, batch_size, batch_size)
            share = len(self.pending)
        samples, self.pending = self.pending[:share], self.pending[share:]
        out_keys, out_rows, out_tags, advantages = self._compose(samples)
        tq.kv_batch_put(
            keys=out_keys,
            partition_id=partition_id,
            fields=list_of_dict_to_tensordict(out_rows),
            tags=out_tags,
        )
        uids = [key.split("_", 1)[0] for key in out_keys]
        self.book.write(uids, advantages)
        self.issued = uids
        self.step_samples = list(samples)
        self.step.trained += len(out_keys)
        mini_rows = (self.mini_batch_prompts or batch_size) * (self.group_size or 1)
        self.clock.advance(-(-len(out_keys) // mini_rows))  # the optimizer steps verl takes on them
        self.step.replayed += sum(
            int(np.sum(s.group_ids < self.step.first_fresh_group)) for s in samples
        )
        self.step.calls_left -= 1
        if self.step.calls_left <= 0:  # verl averages a step's updates' metrics: counts go once
            metrics.update(self._step_metrics())
        return KVBatchMeta(partition_id=partition_id, keys=out_keys, tags=out_tags), metrics

    def _fill(self, global_steps: int, prompts: int, refill_for: int) -> dict[str, Any]:
        """Rounds of fresh groups through the method until it has composed a batch for each of
        the step's updates still to come (sync: the step's `prompts`, all of them; async: this
        update's): verl's finished groups first, then, while the method composes too few, a
        refill of `refill_size(refill_for)` prompts, taken whole in the next round so that none
        waits in TransferQueue (sync mode never evicts a group, and verl hands out the oldest
        first). Bounded: a method that composes nothing after `MAX_REFILLS` refills stops the
        run with what it had."""
        needed = max(1, self.step.calls_left) if self.measures_mu else 1
        if self.step.first_fresh_group < 0:
            self.step.first_fresh_group = self.next_group
        metrics: dict[str, Any] = {}
        take = prompts
        for refills in range(MAX_REFILLS + 1):
            samples, fresh_count, round_metrics = self._round(global_steps, take)
            self.pending.extend(samples)
            self.step.fresh += fresh_count
            metrics.update(round_metrics)
            if len(self.pending) >= needed:
                break
            if self.refill_fn is None:
                raise RuntimeError(
                    "the method composed no batch from this step's rollouts and verl gave the "
                    "sampler no refill_fn to ask for more"
                )
            if refills == MAX_REFILLS:
                raise RuntimeError(
                    f"sampler_kwargs.method = {self.settings.replay.method!r}: composed "
                    f"{len(self.pending)} of the {needed} batches step {global_steps} needs "
                    f"after {MAX_REFILLS} refills ({self.step.refilled} prompts); check the "
                    "method's batch against verl's (ppo_mini_batch_size × rollout.n rows) and "
                    "its fill knobs"
                )
            take = self.refill_size(refill_for)
            log.info(
                "llm-replay sampler: step %d: the method composed %d of %d batches; asking "
                "verl for %d more prompts",
                global_steps,
                len(self.pending),
                needed,
                take,
            )
            self.refill_fn(take)
            self.step.refilled += take
        self.step.composed = True
        return metrics

    def _step_metrics(self) -> dict[str, float]:
        host = self._host()
        self.store.prune(host.stored_groups())
        self.steps += 1
        return {
            **{f"llm_replay/{k}": float(v) for k, v in host.metrics().items()},
            "llm_replay/fresh_rows": float(self.step.fresh),
            "llm_replay/refilled_prompts": float(self.step.refilled),
            "llm_replay/trained_rows": float(self.step.trained),
            "llm_replay/replayed_rows": float(self.step.replayed),
            "llm_replay/trajectories_kept": float(len(self.store)),
            **self._meter_metrics(),
        }

    def refill_size(self, batch_size: int) -> int:
        """How many prompts to ask verl for when the method composed no batch: at least this
        call's `batch_size` (train_batch_size / parameter_sync_step), rounded up to a multiple of
        the `gen_batch_size` verl fetches prompts in (`data.gen_batch_size`, else
        `train_batch_size`; verl sets it to 1 in its async modes), which its refill requires."""
        gen = lookup_int(self.root, "data.gen_batch_size") or lookup_int(
            self.root, "data.train_batch_size"
        )
        if not gen or gen <= 0:
            return batch_size
        return max(1, -(-batch_size // gen)) * gen

    # ---------------------------------------------------------------- the actor's step
    def _after_update(self, metrics: Mapping[str, Any], seconds: float, rows: int) -> None:
        """verl's `_update_actor` trained this step's rows (`observer.py`): its time to the
        meter, its statistics to the method, one host step per sample composed for it."""
        if self.measures_mu and rows:
            self.meter.add_seconds("training", seconds)
            self.meter.add(rollouts_trained=rows)
        statistics = step_statistics(
            metrics, behaviour=self.behaviour_statistics, token_mean=self.token_mean_entropy
        )
        if self.host is not None:
            for sample in self.step_samples:
                self.host.after_step(sample, statistics, policy_version=self.clock.updates)
        self.step_samples = []

    def _generation_overhead(self, seconds: float) -> None:
        """Draining the replicas and publishing weights to them (sync mode), charged to
        generation: nothing else a step does pays for them."""
        self.meter.add_seconds("generation", seconds)

    def _meter_metrics(self) -> dict[str, float]:
        if not self.measures_mu:
            return {}
        seconds = self.meter.seconds
        out = {
            "llm_replay/generation_seconds": seconds["generation"],
            "llm_replay/training_seconds": seconds["training"],
        }
        mu = self.meter.mu
        if mu is not None:
            out["llm_replay/mu"] = mu
        return out

    # ---------------------------------------------------------------- fresh rows in
    def _round(
        self, global_steps: int, batch_size: int
    ) -> tuple[list[Sample], int, dict[str, Any]]:
        """verl's next `batch_size` finished groups, read whole, cleared from TransferQueue and
        run through the method: the samples it returns, how many fresh rows, verl's metrics."""
        started = time.perf_counter()
        fresh_meta, metrics = super().sample(global_steps, TRAIN, batch_size)
        waited = time.perf_counter() - started
        keys = list(fresh_meta.keys)
        if self.measures_mu and keys:  # sync: the step waited for its own rollouts
            self.meter.add_seconds("generation", waited)
            self.meter.add(rollouts_generated=len(keys))
        rows = split_rows(tq.kv_batch_get(keys=keys, partition_id=TRAIN), len(keys)) if keys else []
        fresh = self._to_rollouts(keys, list(fresh_meta.tags), rows, global_steps)
        if keys:
            tq.kv_clear(keys=keys, partition_id=TRAIN)
        progress = min(1.0, (global_steps - 1) / self.total_steps) if self.total_steps else None
        batches = self._host().round(
            fresh, policy_version=self.clock.updates, mu=self.meter.mu, progress=progress
        )
        return list(batches), len(keys), metrics

    def _to_rollouts(
        self, keys: list[str], tags: list[dict[str, Any]], rows: list[dict[str, Any]], step: int
    ) -> RolloutBatch:
        groups: dict[str, int] = {}

        def group_of(uid: str) -> int:
            if uid not in groups:
                groups[uid] = self.next_group
                self.next_group += 1
            return groups[uid]

        return read_rollouts(
            keys,
            tags,
            rows,
            group_of=group_of,
            store=self.store,
            needs_behaviour=self.replays,
            advantage=self.settings.advantage,
            correct_threshold=self.settings.correct_threshold,
            current_version=self.clock.at(step - 1),
            version_of=self.clock.at,
        )

    # ---------------------------------------------------------------- the step's rows out
    def _compose(
        self, samples: Sequence[Sample]
    ) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]], list[float]]:
        keys: list[str] = []
        rows: list[dict[str, Any]] = []
        tags: list[dict[str, Any]] = []
        advantages: list[float] = []
        for sample in samples:
            values = sample.advantages
            if self.settings.sampling_weights:
                values = values * sample.importance_weights
            if not np.all(np.isfinite(values)):
                raise ValueError("advantages: a row the method returned has no advantage (NaN)")
            for b in range(len(sample)):
                trajectory = self.store.get(int(sample.row_ids[b]))
                uid = f"{UID_PREFIX}{self.next_uid}"
                self.next_uid += 1
                keys.append(f"{uid}_0_0")
                rows.append({**trajectory.fields, "uid": uid})
                tags.append(dict(trajectory.tag))
                advantages.append(float(values[b]))
        return keys, rows, tags, advantages

    # ---------------------------------------------------------------- building, saving, resuming
    def _host(self) -> ReplayHost:
        if self.host is None:
            assert self.prompts_per_step is not None and self.group_size is not None
            mini = self.mini_batch_prompts or self.prompts_per_step
            calls = self.calls_per_step if self.measures_mu else 1  # sync: one round a step
            shape = RunShape(
                batch_size=mini * self.group_size,
                rollouts_per_step=self.prompts_per_step * calls * self.group_size,
                group_size=self.group_size,
                seed=self.settings.seed,
                advantage=self.settings.advantage,
            )
            replay = self.settings.replay
            host = ReplayHost.build(replay.method, replay.settings, replay.options, shape)
            host.refuse_restarts(
                "sampler_kwargs.method", replay.method, "verl's trainer does not do"
            )
            self.host = host
        return self.host

    def _start(self, global_steps: int, batch_size: int) -> None:
        self.started = True
        self.prompts_per_step = batch_size
        if self.group_size is None:
            raise ValueError(
                "sampler_kwargs.group_size: not given and verl's actor_rollout_ref.rollout.n "
                "is not reachable from sampler_kwargs"
            )
        self.total_steps = self.total_steps or run_length(self.root, self.calls_per_step)
        if self.settings.follows_progress() and not self.total_steps:
            recipe = self.settings.recipe
            raise ValueError(
                "sampler_kwargs.total_steps: the anneal schedule (replay.anneal.mode=schedule"
                + (f", part of method {recipe!r}" if recipe else "")
                + ") follows the run's progress, and neither trainer.total_training_steps nor "
                "the optimizer's total_training_steps verl derives from the data is reachable; "
                "set one"
            )
        if global_steps <= 1:
            return
        folder = self._resumed_from(global_steps - 1)
        state = None if folder is None else folder / STATE_DIR
        if state is None or not (state / STATE_FILE).is_file():
            raise FileNotFoundError(missing_state_message(global_steps, folder))
        self.load(state)


class AsyncReplaySampler(ReplaySampler, ReplayBufferAsync):  # type: ignore[misc]
    """`ReplaySampler` in verl's async trainers (`colocate_async`, `separate_async`): verl's
    `ReplayBufferAsync` waits for, evicts (stale by `max_off_policy_threshold`, failed) and
    refills the fresh groups and answers `get_sampleable_count` / `wait_for_sampleable`; the
    method composes each step's batch from what it hands over, as in sync mode. Built when
    `custom_sampler.name=ReplaySampler` meets an async `trainer_mode`."""
