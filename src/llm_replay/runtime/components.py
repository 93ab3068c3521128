"""The one place that builds a run's parts from its `Config`.

Task, reward scorer, model and tokenizer, generator, learner, evaluator and replay pipeline are
each made by one function here; the sync, threaded and Ray runtimes, `llm-replay eval` and the Ray
learner actor compose what they need from these and nothing else builds them. `Policy` bundles
what every consumer of a model needs (the model, its tokenizer, the task and the encoded prompts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from llm_replay.buffer.kernels import warm as warm_kernels
from llm_replay.config import Config
from llm_replay.evaluation import Evaluator
from llm_replay.generation import HFGenerator, SamplingParams
from llm_replay.learner import Learner, LearnerSettings
from llm_replay.methods import MethodContext
from llm_replay.methods.host import ReplayHost, RunShape
from llm_replay.methods.table_spec import TableSpec
from llm_replay.models import encode_prompts, load_policy
from llm_replay.runtime.rollouts import RolloutMaker
from llm_replay.runtime.task_builder import build_scorer, build_task, build_verifier
from llm_replay.tasks import SafeScorer, Task


@dataclass
class Policy:
    """A loaded model with its tokenizer, the task and the task's train prompts, encoded."""

    config: Config
    model: Any
    tokenizer: Any
    task: Task
    train_prompts: list[list[int]]

    @classmethod
    def load(cls, config: Config, *, device: str | None = None, task: Task | None = None) -> Policy:
        task = task if task is not None else build_task(config)
        model, tokenizer = load_policy(
            config.model.path, device=device or config.model.device, dtype=config.model.dtype
        )
        prompts = encode_prompts(
            tokenizer, [p.prompt for p in task.train], config.model.chat_template
        )
        return cls(config, model, tokenizer, task, prompts)

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def generator(self, seed: int, model: Any = None) -> HFGenerator:
        return HFGenerator(
            self.model if model is None else model,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            seed=seed,
        )

    def rollout_maker(self, generator: HFGenerator) -> RolloutMaker:
        """Generation + scoring of train prompts with `generator` and a scorer of its own."""
        g, config = self.config.generation, self.config
        return RolloutMaker(
            generator=generator,
            tokenizer=self.tokenizer,
            problems=self.task.train,
            prompts=self.train_prompts,
            scorer=build_scorer(config, self.task),
            sampling=sampling_params(config),
            group_size=g.group_size,
            advantage=config.algorithm.advantage,
            correct_threshold=(
                config.reward_model.success_threshold
                if config.task.reward == "model"
                else self.task.correct_threshold
            ),
        )

    def evaluator(self, generator: HFGenerator, scorer: SafeScorer | None = None) -> Evaluator:
        e = self.config.eval
        problems = list(self.task.eval[: e.size])
        prompts = encode_prompts(
            self.tokenizer, [p.prompt for p in problems], self.config.model.chat_template
        )
        return Evaluator(
            generator,
            self.tokenizer,
            prompts,
            problems,
            scorer if scorer is not None else build_verifier(self.config, self.task),
            sampling=sampling_params(self.config),
            pass_k=e.pass_k,
            pass_size=e.pass_size,
            seed=self.config.train.seed,
        )


def sampling_params(config: Config) -> SamplingParams:
    g = config.generation
    return SamplingParams(g.max_new_tokens, g.temperature, g.top_k, g.top_p)


def build_optimizer(config: Config, model: Any) -> torch.optim.Optimizer:
    o = config.optim
    return torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
    )


def learner_settings(config: Config) -> LearnerSettings:
    a, g = config.algorithm, config.generation
    return LearnerSettings(
        loss=a.build_loss(),
        aggregation=a.aggregation,
        temperature=g.temperature,
        top_k=g.top_k,
        top_p=g.top_p,
        kl_coef=a.kl_coef,
        entropy_coef=a.entropy_coef,
        grad_clip=config.optim.grad_clip,
        micro_batch_size=config.train.micro_batch_size,
        use_sampling_weights=a.use_sampling_weights,
        sum_norm_length=g.max_new_tokens,
        control=a.token_controls(),
        seed=config.train.seed,
        head_gate=a.head_gate,
        head_gate_warmup=a.head_gate_warmup,
        replay_gradient=reads_replay_gradient(config),
    )


def reads_replay_gradient(config: Config) -> bool:
    """Whether an enabled option reads the replayed rows' gradient (`replay.anneal.guard`), which
    the learner then measures."""
    return config.replay.knob_reading("replay_cosine") is not None


def build_learner(config: Config, model: Any) -> Learner:
    return Learner(model, build_optimizer(config, model), learner_settings(config))


def run_shape(config: Config) -> RunShape:
    return RunShape(
        batch_size=config.train.batch_size,
        rollouts_per_step=config.generation.rollouts_per_step,
        group_size=config.generation.group_size,
        seed=config.train.seed,
        advantage=config.algorithm.advantage,
        tasks=config.replay.tasks.parts(),
    )


def method_context(config: Config) -> MethodContext:
    return run_shape(config).context()


@dataclass
class LearnerParts:
    """The learner's side of a run, built the same way by every runtime (the sync loop, the
    threaded trainer, the Ray learner actor): the policy, its learner, the learner-side generator
    (evaluation's; the sync loop also generates with it, through `maker`), the evaluator and the
    replay host."""

    policy: Policy
    learner: Learner
    generator: HFGenerator
    evaluator: Evaluator
    replay: ReplayHost
    maker: RolloutMaker | None = None


def build_learner_parts(
    config: Config, *, threads: float | None, generates: bool = False
) -> LearnerParts:
    """Seed, load and build the learner's side. `generates`: the learner also generates (the
    sync loop), so it gets a rollout maker whose scorer the evaluator shares."""
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    torch.manual_seed(config.train.seed)
    policy = Policy.load(config)
    learner = build_learner(config, policy.model)
    generator = policy.generator(config.train.seed)
    maker = policy.rollout_maker(generator) if generates else None
    verifier = maker.scorer if maker and isinstance(maker.scorer, SafeScorer) else None
    evaluator = policy.evaluator(generator, scorer=verifier)
    warm_kernels()  # numba's start is paid here, not in the first training step it times
    return LearnerParts(policy, learner, generator, evaluator, build_replay(config), maker)


def table_spec(config: Config) -> TableSpec:
    """What the configured method's table is, without building the method."""
    return config.replay.method_class.resolved_spec(config.replay.settings, method_context(config))


def build_replay(config: Config) -> ReplayHost:
    """The replay method named by `config.replay`, with the options turned on for it, started
    from `replay.init_from`'s rollouts when given (a resumed run then loads its own state over
    it)."""
    r = config.replay
    return ReplayHost.build(
        r.method,
        r.settings,
        r.options,
        run_shape(config),
        init_from=r.init_from,
        reads_behaviour=config.algorithm.reads_behaviour(),
    )
