"""The plain sections of a run's config: `model`, `task`, `generation`, `optim`, `train`, `eval`,
`log`. (`algorithm` and `replay` are read from the loss and method registries, in `config/__init__`.)

Every field carries its help once (`setting(default, help)`): `llm-replay train --help` and the
generated configuration reference read it, and a test checks no field is without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from llm_replay.config.mixture import check_mixture_fields, parse_members
from llm_replay.config.parse import ConfigError, check_positive, did_you_mean, setting
from llm_replay.config.prompts import AdaptiveRolloutConfig, PromptSkipConfig
from llm_replay.tasks.mixture import MemberSpec


def check_basis(key: str, basis: str) -> None:
    valid = basis in ("measured", "rollouts", "annotations")
    if basis.startswith("mu_"):
        try:
            valid = float(basis[3:]) > 0
        except ValueError:
            valid = False
    if not valid:
        raise ConfigError(
            f"{key} = {basis!r}: choose measured, rollouts, annotations or mu_<number>, e.g. mu_5"
        )


@dataclass
class ModelConfig:
    path: str = setting(
        "builtin:tiny-chain-sum",
        "the policy: builtin:NAME (a shipped model) or a local from_pretrained directory",
    )
    device: str = setting("cpu", "where generation and training run: cpu, cuda or cuda:N")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting(
        "auto", "weights' dtype; auto: bfloat16 on a GPU, float32 on CPU"
    )
    chat_template: Literal["auto", "on", "off"] = setting(
        "auto", "wrap prompts in the tokenizer's chat template (auto: when it has one)"
    )

    def check(self) -> None:
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device = {self.device!r}: use 'cpu', 'cuda' or 'cuda:N'")


REWARDS = ("score", "binary", "model")
"""`task.reward`: the task's own score, 1/0 by whether it reaches `correct_threshold`, or a
learned reward model's (`reward_model:`; the task's score stays the evaluation metric)."""


def _chain_sum_params() -> dict[str, Any]:
    return {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}


@dataclass
class TaskConfig:
    kind: Literal["reasoning_gym", "dataset", "mixture"] = setting(
        "reasoning_gym",
        "a reasoning-gym generator, a .jsonl/.parquet dataset file, or a mixture of tasks "
        "(members)",
    )
    dataset: str = setting("chain_sum", "the reasoning-gym dataset's name")
    params: dict[str, Any] = setting(
        help="the reasoning-gym dataset's parameters", factory=_chain_sum_params
    )
    prompt_template: str = setting(
        "{expression}=", "the model-facing prompt, formatted from the entry's fields"
    )
    strip_spaces: bool = setting(True, "remove spaces from the formatted prompts and answers")
    seed: int = setting(1, "the train split's sampling seed (and a dataset file's split salt)")
    eval_seed: int = setting(2, "the eval split's sampling seed")
    train_size: int = setting(20_000, "train problems drawn (repeats kept)")
    eval_size: int = setting(500, "held-out problems drawn")
    path: str | None = setting(None, "kind dataset: the .jsonl or .parquet file")
    eval_path: str | None = setting(None, "kind dataset: a separate file of eval rows")
    eval_fraction: float = setting(
        0.1, "the share of the problem space held out for eval (by a hash of the prompt)"
    )
    prompt_field: str = setting("prompt", "kind dataset: the prompt's column")
    answer_field: str = setting("answer", "kind dataset: the answer's column")
    correct_threshold: float = setting(1.0, "a score at least this counts as correct")
    reward: str = setting(
        "score",
        "the training reward: score (the task's), binary (1 where the score reaches "
        "correct_threshold), model (a learned reward model, reward_model:)",
    )
    reward_timeout_s: float = setting(5.0, "seconds one reward call may take")
    failure_reward: float = setting(0.0, "the reward of a call that raised or timed out")
    members: dict[str, Any] = setting(
        help="kind mixture: member name -> {weight, and task: BUILTIN, or dataset, params, "
        "prompt_template, strip_spaces, answer_tokens}",
        factory=dict,
    )

    def check(self) -> None:
        check_mixture_fields(self, TaskConfig())
        if self.kind == "mixture":
            parse_members(self.members)
        if self.reward not in REWARDS:
            hint = did_you_mean(self.reward, REWARDS)
            raise ConfigError(f"reward = {self.reward!r}: choose one of {REWARDS}{hint}")
        if self.kind == "dataset" and not self.path:
            raise ConfigError("path = None: kind 'dataset' needs a .jsonl or .parquet file")
        for key in ("train_size", "eval_size"):
            check_positive(key, getattr(self, key))
        check_positive("reward_timeout_s", self.reward_timeout_s)
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(
                f"eval_fraction = {self.eval_fraction!r}: must be in (0, 1) (the share of the "
                "problem space held out for eval)"
            )

    @property
    def mixture_members(self) -> tuple[MemberSpec, ...]:
        """kind mixture: the members, parsed and checked (`config.mixture`)."""
        return parse_members(self.members, "task.members")


@dataclass
class GenerationConfig:
    prompts_per_step: int = setting(32, "prompts drawn each iteration")
    group_size: int = setting(8, "completions per prompt (G; the group baseline needs >= 2)")
    max_new_tokens: int = setting(8, "the longest completion, in tokens")
    temperature: float = setting(0.7, "sampling temperature (the learner uses the same)")
    top_k: int = setting(0, "sample among the k likeliest tokens; 0: all")
    top_p: float = setting(1.0, "sample within the top-p nucleus; 1: all")
    dynamic_sampling: bool = setting(
        False, "DAPO: drop zero-variance groups and generate more until the batch is full"
    )
    dynamic_sampling_rounds: int = setting(3, "extra generation rounds dynamic sampling may take")
    skip: PromptSkipConfig = setting(
        help="GRESO prompt skipping (generation.skip.*)", factory=PromptSkipConfig
    )
    adaptive: AdaptiveRolloutConfig = setting(
        help="AR3PO adaptive rollout and response reuse (generation.adaptive.*)",
        factory=AdaptiveRolloutConfig,
    )

    @property
    def truncates(self) -> bool:
        """Sampling is truncated by top-k or top-p: the behaviour log-probs are of the truncated
        distribution, and the learner floors a token outside today's nucleus."""
        return bool(self.top_k) or self.top_p < 1

    def check(self) -> None:
        check_positive("prompts_per_step", self.prompts_per_step)
        check_positive("dynamic_sampling_rounds", self.dynamic_sampling_rounds, zero_ok=True)
        if self.group_size < 2:
            raise ConfigError(f"group_size = {self.group_size}: must be >= 2 (group baselines)")
        check_positive("max_new_tokens", self.max_new_tokens)
        check_positive("temperature", self.temperature)
        check_positive("top_k", self.top_k, zero_ok=True)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p = {self.top_p!r}: must be in (0, 1]")
        if self.adaptive.enabled:
            if self.group_size % self.adaptive.stage_size:
                raise ConfigError(
                    f"adaptive.stage_size = {self.adaptive.stage_size}: must divide group_size = "
                    f"{self.group_size} (the stages fill a group exactly)"
                )
            if self.dynamic_sampling:
                raise ConfigError(
                    "adaptive.enabled and dynamic_sampling: choose one "
                    "(both decide how many completions a prompt gets)"
                )

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.group_size


@dataclass
class OptimConfig:
    lr: float = setting(5e-5, "AdamW's learning rate")
    weight_decay: float = setting(0.0, "AdamW's weight decay")
    beta1: float = setting(0.9, "AdamW's β1")
    beta2: float = setting(0.999, "AdamW's β2")
    grad_clip: float = setting(1.0, "clip the gradient's global norm at this; 0: no clipping")

    def check(self) -> None:
        check_positive("lr", self.lr)
        check_positive("weight_decay", self.weight_decay, zero_ok=True)
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"{key} = {getattr(self, key)!r}: must be in [0, 1)")
        check_positive("grad_clip", self.grad_clip, zero_ok=True)


@dataclass
class TrainConfig:
    iterations: int = setting(150, "generation rounds at most (the run ends at the first budget)")
    compute_seconds: float | None = setting(None, "a budget in measured compute seconds")
    compute_budget: float | None = setting(None, "a budget on budget_basis (e.g. 6e5 on mu_5)")
    budget_basis: str = setting(
        "measured",
        "what compute_budget counts: measured (seconds), rollouts, or mu_X (completion tokens "
        "generated × X + tokens trained)",
    )
    batch_size: int = setting(
        256,
        "rollouts per gradient step (B); above a round's rows (prompts_per_step × group_size × "
        "y) a step comes every few rounds, and the config loads with a warning",
    )
    micro_batch_size: int = setting(256, "rollouts per forward/backward pass within a step")
    steps_per_round: int | None = setting(
        None,
        "gradient steps a round's fresh rollouts make: sets batch_size to prompts_per_step × "
        "group_size / this when the config is read (micro_batch_size held to it); replay at "
        "ratio y trains y times as many",
    )
    seed: int = setting(0, "the run's seed: prompt order, sampling, table draws")
    threads: int | None = setting(None, "torch threads; None: torch's default")

    def check(self) -> None:
        check_positive("iterations", self.iterations)
        if self.compute_seconds is not None:
            check_positive("compute_seconds", self.compute_seconds)
        if self.compute_budget is not None:
            check_positive("compute_budget", self.compute_budget)
        check_basis("budget_basis", self.budget_basis)
        check_positive("batch_size", self.batch_size)
        check_positive("micro_batch_size", self.micro_batch_size)
        if self.steps_per_round is not None:
            check_positive("steps_per_round", self.steps_per_round)
        if self.threads is not None:
            check_positive("threads", self.threads)


def _pass_k() -> list[int]:
    return [1, 8]


@dataclass
class EvalConfig:
    every: int = setting(10, "evaluate every this many iterations")
    every_compute: float | None = setting(
        None, "evaluate every this much compute on the budget's basis instead"
    )
    size: int = setting(500, "held-out problems scored greedily (accuracy)")
    pass_k: list[int] = setting(help="the k of pass@k", factory=_pass_k)
    pass_size: int = setting(100, "held-out problems sampled max(pass_k) times for pass@k; 0: none")

    def check(self) -> None:
        check_positive("every", self.every)
        if self.every_compute is not None:
            check_positive("every_compute", self.every_compute)
        check_positive("size", self.size)
        check_positive("pass_size", self.pass_size, zero_ok=True)
        if not self.pass_k or any(k < 1 for k in self.pass_k):
            raise ConfigError(f"pass_k = {self.pass_k!r}: must be a non-empty list of k >= 1")

    @property
    def pass_samples(self) -> int:
        return max(self.pass_k)


@dataclass
class LogConfig:
    run_dir: str = setting("runs/{name}", "where the run writes ({name}: the config's name)")
    tensorboard: bool = setting(True, "write TensorBoard events beside metrics.jsonl")
    checkpoint_every: int = setting(0, "checkpoint every this many iterations; 0: only at the end")
    progress: bool = setting(True, "show a progress bar")

    def check(self) -> None:
        check_positive("checkpoint_every", self.checkpoint_every, zero_ok=True)
