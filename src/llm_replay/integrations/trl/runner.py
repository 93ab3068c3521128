"""`backend: trl` for `llm-replay compare`: one of our run configs trained by `ReplayGRPOTrainer`.

The run uses the same task, model, held-out split, evaluator, budget basis and evaluation points
as the native backend, and writes the same `metrics.jsonl` and `summary.json`, so TRL rows sit in
the same tables and plots as ours. The HF training loop drives itself, so the run loop's
bookkeeping (`RunRecords`: evaluation records, budget, summary) is called from a `TrainerCallback`
after every optimizer step instead of after every iteration; an iteration here is a generation
round. What maps where:

| llm-replay config | TRL |
|---|---|
| generation.group_size, prompts_per_step × group_size | num_generations, generation_batch_size |
| train.batch_size (one gradient step) | per_device_train_batch_size (one process, no accumulation) |
| generation.max_new_tokens, temperature, top_k, top_p | max_completion_length, temperature, top_k, top_p |
| algorithm.advantage grpo / dr_grpo | scale_rewards "group" / "none" (TRL divides by std(n−1) + 1e-4) |
| algorithm.loss grpo (token_mean) / asymre | loss_type "dapo", epsilon(_high) / replay_loss "asymre" |
| optim.lr, beta1, beta2, weight_decay | learning_rate, adam_beta1/2, weight_decay (constant, adamw_torch) |
| optim.grad_clip | max_grad_norm |
| replay.method and knobs | replay_method, replay_knobs |
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PrinterCallback, TrainerCallback

from llm_replay.algorithms.losses import LOSSES
from llm_replay.algorithms.losses.asymre import AsymREConfig
from llm_replay.config import Config, ConfigError
from llm_replay.integrations.trl.config import ReplayGRPOConfig
from llm_replay.integrations.trl.trainer import ReplayGRPOTrainer
from llm_replay.metrics import ComputeMeter, MetricsLogger
from llm_replay.runtime.components import Policy
from llm_replay.runtime.layout import SUMMARY_FILE, TRL_DIR
from llm_replay.runtime.loop import RunRecords
from llm_replay.runtime.task_builder import build_scorer, build_verifier
from llm_replay.tasks import SafeScorer, task_tag

TASK_COLUMN = "task"  # the dataset column naming a mixture row's member (replay_task_column)
ADVANTAGES = {"grpo": "group", "dr_grpo": "none"}
PREFERENCE_REFUSED = (
    "preference.enabled = true: backend 'trl' runs TRL's GRPOTrainer; pairs replayed inside TRL's "
    "online DPO trainer are llm_replay.integrations.trl.online_dpo.ReplayOnlineDPOTrainer, which "
    "compare does not drive yet; run preference replay here in our loop (backend: native)"
)


def trl_arguments(
    config: Config, output_dir: Path, *, correct_threshold: float = 1.0
) -> ReplayGRPOConfig:
    """The `ReplayGRPOConfig` equivalent of one of our run configs (module docstring's table);
    a `ConfigError` naming the setting TRL cannot run, before anything is loaded."""
    a, g, o, t = config.algorithm, config.generation, config.optim, config.train
    if config.preference.enabled:
        raise ConfigError(PREFERENCE_REFUSED)
    loss = a.build_loss()
    if loss.trl_loss is None:
        runs = sorted(n for n, c in LOSSES.items() if c.trl_loss is not None)
        raise ConfigError(
            f"algorithm.loss = {a.loss!r}: backend 'trl' runs {runs} (TRL's PPO-clip loss or "
            "AsymRE)"
        )
    epsilon, epsilon_high = loss.clip_epsilons() if loss.default_clip else (0.2, 0.2)
    knobs = loss.settings
    loss_knobs: dict[str, Any] = (
        {"replay_delta_v": knobs.delta_v} if isinstance(knobs, AsymREConfig) else {}
    )
    if a.advantage not in ADVANTAGES:
        raise ConfigError(
            f"algorithm.advantage = {a.advantage!r}: backend 'trl' supports {sorted(ADVANTAGES)}"
        )
    if a.aggregation != "token_mean":
        raise ConfigError(
            f"algorithm.aggregation = {a.aggregation!r}: backend 'trl' runs token_mean (loss_type "
            "'dapo')"
        )
    if a.head_gate:
        raise ConfigError("algorithm.head_gate: not with backend 'trl' (TRL takes its own steps)")
    if g.dynamic_sampling:
        raise ConfigError("generation.dynamic_sampling: not with backend 'trl'")
    if g.skip.enabled:
        raise ConfigError("generation.skip.enabled: not with backend 'trl' (TRL picks the prompts)")
    if g.adaptive.enabled and t.steps_per_round not in (None, 1):
        raise ConfigError(
            f"train.steps_per_round = {t.steps_per_round}: backend 'trl' with adaptive rollouts "
            "trains one step a generation (steps_per_generation=1); set train.steps_per_round=1 "
            "(`auto_steps1` is `auto` so)"
        )
    if config.task.reward == "model":
        raise ConfigError(
            "task.reward = 'model': backend 'trl' takes a reward model in ReplayGRPOTrainer's "
            "reward_funcs instead; the run's own reward model (and its refreshes) is runtime=sync"
        )
    if config.model.device != "cpu":
        raise ConfigError(f"model.device = {config.model.device!r}: backend 'trl' runs on CPU here")
    replay = config.replay.to_dict()
    replay.pop("method")
    return ReplayGRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=t.batch_size,
        generation_batch_size=g.rollouts_per_step,
        num_generations=g.group_size,
        max_completion_length=g.max_new_tokens,
        temperature=g.temperature,
        top_k=g.top_k,
        top_p=g.top_p,
        learning_rate=o.lr,
        adam_beta1=o.beta1,
        adam_beta2=o.beta2,
        weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        loss_type="dapo",
        scale_rewards=ADVANTAGES[a.advantage],
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        beta=a.kl_coef,
        bf16=False,
        activation_checkpointing=False,
        use_cpu=True,
        seed=t.seed,
        max_steps=10**9,
        save_strategy="no",
        report_to=[],
        logging_steps=10**9,
        disable_tqdm=True,
        dataloader_num_workers=0,
        replay_method=config.replay.method,
        replay_knobs=replay,
        replay_loss=loss.trl_loss,
        **loss_knobs,
        replay_sampling_weights=a.use_sampling_weights,
        replay_correct_threshold=correct_threshold,
        replay_adaptive=dataclasses.asdict(g.adaptive),
        replay_token_control=dataclasses.asdict(a.token_controls()),
        replay_task_column=TASK_COLUMN if config.task.kind == "mixture" else None,
    )


class TRLRun(RunRecords):
    """One run config trained by `ReplayGRPOTrainer`, logged like a native run."""

    def __init__(self, config: Config) -> None:
        from datasets import Dataset

        if config.preference.enabled:
            raise ConfigError(PREFERENCE_REFUSED)
        self._init_loop(config, None)
        self.policy = Policy.load(config)
        self.scorer = build_scorer(config, self.policy.task)
        problems = list(self.policy.task.train)
        columns: dict[str, list[Any]] = {
            "prompt": [p.prompt for p in problems],
            "problem": list(range(len(problems))),
        }
        if config.task.kind == "mixture":  # each row's member tags its rollouts
            columns[TASK_COLUMN] = [task_tag(p) for p in problems]
        dataset = Dataset.from_dict(columns)

        def reward(completions: list[str], problem: list[int], **_: Any) -> list[float]:
            scores = self.scorer.score(completions, [problems[i] for i in problem])
            return [float(s) for s in np.asarray(scores)]

        args = trl_arguments(
            config, self.run_dir / TRL_DIR, correct_threshold=self.policy.task.correct_threshold
        )
        self.trainer = ReplayGRPOTrainer(
            model=self.policy.model,
            reward_funcs=reward,
            args=args,
            train_dataset=dataset,
            processing_class=self.policy.tokenizer,
        )
        self.trainer.remove_callback(PrinterCallback)  # the run's own lines replace TRL's dicts
        self.meter: ComputeMeter = self.trainer.meter
        verifier = (
            self.scorer
            if isinstance(self.scorer, SafeScorer)
            else build_verifier(config, self.policy.task)
        )
        self.evaluator = self.policy.evaluator(self.policy.generator(config.train.seed), verifier)

    @property
    def steps(self) -> int:
        return int(self.trainer.state.global_step)

    def evaluate(self) -> dict[str, Any]:
        model = self.trainer.model
        was_training = model.training
        model.eval()
        try:
            return self.evaluator(self.iteration)
        finally:
            model.train(was_training)

    def reward_failures(self) -> dict[str, int]:
        return dict(vars(self.scorer.counts))

    def extra_summary(self) -> dict[str, Any]:
        return {"backend": "trl"}

    def close(self) -> None:
        self.scorer.close()

    def run(self, *, resume: bool = False, on_iteration: Any = None) -> dict[str, Any]:
        if resume:
            raise ConfigError("backend 'trl' runs are not resumed by compare; they restart")
        self._prepare(False)
        (self.run_dir / "trl_args.json").write_text(self.trainer.args.to_json_string())
        logger = MetricsLogger(self.run_dir, tensorboard=self.config.log.tensorboard)
        try:
            self.record_evaluation(logger)
            self.trainer.add_callback(_RunLoopCallback(self, logger, on_iteration))
            self.trainer.train()
            if (
                self.evals[-1]["iteration"] != self.iteration
                or self.evals[-1]["steps"] != self.steps
            ):
                self.record_evaluation(logger)
            summary = self.summary()
        finally:
            logger.close()
            self.close()
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
        return summary


class _RunLoopCallback(TrainerCallback):
    """After each optimizer step: a train record, an evaluation when due, the budget check."""

    def __init__(self, run: TRLRun, logger: MetricsLogger, on_iteration: Any) -> None:
        self.run, self.logger, self.on_iteration = run, logger, on_iteration
        self.spent_before = 0.0
        self.last_eval_iteration = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.spent_before = self.run.schedule.spent(self.run.meter)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        run = self.run
        run.iteration = run.trainer.rounds
        schedule, meter = run.schedule, run.meter
        run.trainer.progress_override = schedule.progress(run.iteration, meter)
        evaluations = len(run.evals)
        record = run.log_iteration(
            {
                "reward/mean": run.trainer.last_round_reward,
                "train/age_mean": run.trainer.last_draw.get("replay/age_mean"),
                **run.trainer.replay_metrics(),
                "wall_seconds": time.perf_counter() - run.wall_start,
            },
            self.spent_before,
            self.logger,
            evaluated_at=self.last_eval_iteration,  # several optimizer steps train one round
        )
        if len(run.evals) > evaluations:
            self.last_eval_iteration = run.iteration
        if self.on_iteration is not None:
            self.on_iteration(run, record)
        if schedule.done(run.iteration, meter):
            control.should_training_stop = True


def run_trl(config: Config, *, show_progress: bool = True) -> dict[str, Any]:
    """Train `config` through TRL with a live line per evaluation; returns the summary."""
    from llm_replay.terminal import console

    def report(run: TRLRun, record: dict[str, Any]) -> None:
        if show_progress and "eval/accuracy" in record:
            console.print(
                f"  step {run.steps:>5}  round {run.iteration:>4}  "
                f"acc {100 * record['eval/accuracy']:.1f}%  "
                f"{record['compute/seconds']:.0f}s compute"
            )

    return TRLRun(config).run(on_iteration=report)
