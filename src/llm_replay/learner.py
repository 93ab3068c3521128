"""The learner: a sampled batch → per-token log-probs → policy loss → one optimizer step.

Readable top to bottom. A batch (`Sample`) is split into micro-batches of rows sorted by length,
each cut to its own longest row, so padding is not paid for; the loss of each micro-batch is
divided by the whole batch's normaliser, so the summed gradient equals the full batch's. Log-probs
are taken under the sampling distribution (logits / T, then top-k/top-p truncation, through the
generator's own `sampling_logprobs`), the distribution the generator recorded as behaviour
log-probs, so r = π_θ/π_behav is 1 for a rollout trained on the weights that made it. A stale
token outside today's nucleus gets the floor log-prob (ratio 0). The KL to the reference is taken
on the tempered distribution without truncation, where both log-probs are finite.
Losses needing a proximal policy (decoupled PPO) get one forward pass of the pre-step weights.
Optional: KL to a frozen reference model (k3 estimator), an entropy bonus, and a per-token
control of the replayed rows (`algorithms/token_control.py`: Clip-Cov, KL-Cov, W-REINFORCE's
weight on successes), and the replayed rows' gradient read against the fresh rows' own
(`algorithms/gradient_alignment.py`, with `replay_gradient`).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from llm_replay.algorithms.gradient_alignment import (
    FRESH,
    MIXED,
    REPLAYED,
    GradientSplit,
    alignment_classes,
)
from llm_replay.algorithms.gradient_gate import HeadGradient
from llm_replay.algorithms.head_gate import HeadGate
from llm_replay.algorithms.losses import Loss, aggregate, build_loss, normalizer, policy_loss
from llm_replay.algorithms.token_control import TokenControl, clip_cov_generator
from llm_replay.buffer import Sample
from llm_replay.generation.distribution import entropy as token_entropy
from llm_replay.generation.distribution import sampling_logprobs


@dataclass(frozen=True)
class LearnerSettings:
    loss: Loss = field(default_factory=lambda: build_loss("grpo"))
    aggregation: str = "token_mean"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    grad_clip: float = 1.0
    micro_batch_size: int = 256
    use_sampling_weights: bool = False
    sum_norm_length: int | None = None
    control: TokenControl = field(default_factory=TokenControl)
    seed: int = 0
    head_gate: float = 0.0
    head_gate_warmup: int = 10
    replay_gradient: bool = False


LOGPROB_FLOOR = -1e4


@dataclass(frozen=True)
class TokenLogprobs:
    """Per-token log-probs at positions 1.. (position 0 gets 0), [B, T] each.

    sampled: under the sampling distribution (truncated tokens floored at LOGPROB_FLOOR);
    tempered: under logits / T without truncation (the same tensor when truncation is off);
    entropy: of the sampling distribution, when asked for.
    """

    sampled: Tensor
    tempered: Tensor
    entropy: Tensor | None = None


def token_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    temperature: float,
    *,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy: bool = False,
) -> TokenLogprobs:
    """log π(input_ids[t] | input_ids[<t]) under the distribution the generator samples from."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    targets = input_ids[:, 1:, None]
    zeros = torch.zeros_like(logits[:, :1, 0])

    def pad(values: Tensor) -> Tensor:
        return torch.cat([zeros, values], dim=1)

    logp = sampling_logprobs(logits, temperature, top_k, top_p)  # [B, T-1, V]
    sampled = pad(logp.gather(-1, targets).squeeze(-1).clamp(min=LOGPROB_FLOOR))
    tempered = sampled
    if top_k or top_p < 1.0:
        full = torch.log_softmax(logits / temperature, dim=-1)
        tempered = pad(full.gather(-1, targets).squeeze(-1))
    ent = pad(token_entropy(logp)) if entropy else None
    return TokenLogprobs(sampled, tempered, ent)


class Learner:
    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        settings: LearnerSettings,
        *,
        reference: Any | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.settings = settings
        self.version = 0
        self.update_lock = threading.Lock()
        self.device = next(model.parameters()).device
        self.reference = reference
        if settings.kl_coef > 0 and reference is None:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.gate = HeadGate(settings.head_gate, settings.head_gate_warmup)
        self.head_gradient = HeadGradient(model if self.gate.active else None)
        if self.gate.active and not self.head_gradient.available:
            raise ValueError(
                "algorithm.head_gate: the model has no output layer to watch "
                "(get_output_embeddings() returned nothing)"
            )

    def _micro_batches(self, sample: Sample, rows: np.ndarray | None = None) -> list[np.ndarray]:
        """Micro-batches of `rows` (all rows when None), sorted by length."""
        lengths = sample.attention_mask.sum(1)
        order = np.argsort(lengths, kind="stable")
        if rows is not None:
            order = order[rows[order]]
        size = self.settings.micro_batch_size
        return [order[i : i + size] for i in range(0, len(order), size)]

    def _classes(self, sample: Sample) -> np.ndarray | None:
        """The rows' classes for the replay-gradient reading, or None: no reading this step."""
        if not self.settings.replay_gradient:
            return None
        return alignment_classes(~reused_rows(sample), sample.group_ids)

    def _tensors(self, sample: Sample, rows: np.ndarray) -> dict[str, Any]:
        width = int(sample.attention_mask[rows].sum(1).max())
        dev = self.device

        def cut(array: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(array[rows, :width])).to(dev)

        weights = sample.importance_weights[rows] if self.settings.use_sampling_weights else None
        return {
            "input_ids": cut(sample.input_ids).long(),
            "attention_mask": cut(sample.attention_mask).long(),
            "mask": cut(sample.loss_mask).float(),
            "behaviour": cut(sample.behaviour_logprobs).float(),
            "advantages": torch.from_numpy(sample.advantages[rows]).float().to(dev),
            "weights": None if weights is None else torch.from_numpy(weights).float().to(dev),
            "replayed": torch.from_numpy(sample.sources[rows] > 0).to(dev),
            "reused": torch.from_numpy(reused_rows(sample)[rows]).to(dev),
        }

    def _logprobs(
        self, model: Any, chunk: dict[str, Any], *, entropy: bool = False
    ) -> TokenLogprobs:
        s = self.settings
        return token_logprobs(
            model,
            chunk["input_ids"],
            chunk["attention_mask"],
            s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            entropy=entropy,
        )

    def step(self, sample: Sample) -> dict[str, float]:
        """One optimizer step on `sample`; returns `loss/...` and `train/...` metrics."""
        if len(sample) == 0:
            raise ValueError("sample: empty batch")
        if np.isnan(sample.advantages).any():
            raise ValueError(
                "sample.advantages: NaN; compute advantages when the group is generated"
            )
        s = self.settings
        self.model.train()
        classes = self._classes(sample)
        if classes is None:
            parts = [self._micro_batches(sample)]
            marks: set[int] = set()
        else:  # class by class, the gradient copied after the fresh and the replayed rows
            parts = [self._micro_batches(sample, classes == c) for c in (FRESH, REPLAYED, MIXED)]
            marks = {len(parts[0]) - 1, len(parts[0]) + len(parts[1]) - 1}
        chunks = [self._tensors(sample, rows) for part in parts for rows in part]
        full_mask = torch.tensor(sample.loss_mask, dtype=torch.float32)  # may be read-only
        denominator = normalizer(s.aggregation, full_mask, s.sum_norm_length)
        proximal = None
        if s.loss.needs_proximal:
            with torch.no_grad():
                proximal = [self._logprobs(self.model, c).sampled for c in chunks]
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        covariance = CovarianceSums()
        generator = None
        if s.control.chooses_at_random:  # a resumed run picks the tokens an unbroken one does
            generator = clip_cov_generator(s.seed, self.version)
        tokens = float(full_mask.sum())
        split = None
        if classes is not None:
            split = GradientSplit([p for p in self.model.parameters() if p.requires_grad])
        with self.head_gradient:
            policy_sum = self._backward(
                chunks, proximal, denominator, tokens, totals, covariance, generator, split, marks
            )
        cosine = None if split is None else split.cosine()
        if cosine is not None:
            totals["loss/replay_cosine"] = cosine
        head_norm = self.head_gradient.norm()
        if self.gate.active and head_norm is None:
            raise RuntimeError(
                "algorithm.head_gate: the output layer's forward hook saw no gradient (the model "
                "computes its logits without calling get_output_embeddings() as a module)"
            )
        admitted = head_norm is None or self.gate.admit(head_norm)
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(
            params, s.grad_clip if s.grad_clip > 0 else float("inf")
        )
        with self.update_lock:  # readers of the weights never see a half-applied update
            if admitted:
                self.optimizer.step()
            else:  # DGG: the surge is intercepted before it reaches the optimizer's moments
                self.optimizer.zero_grad(set_to_none=True)
            self.version += 1
        totals.update(covariance.metrics())
        totals["loss/policy"] = policy_sum
        totals["loss/grad_norm"] = float(norm)
        if head_norm is not None:
            totals["loss/head_grad_norm"] = head_norm
        if self.gate.active:
            totals["loss/gated"] = float(not admitted)
            totals["loss/head_reference"] = self.gate.reference
        totals["train/rollouts"] = float(len(sample))
        real = float(sample.attention_mask.sum())
        totals["train/completion_tokens"] = tokens
        totals["train/tokens"] = real
        totals["train/forward_only_tokens"] = real * (
            (proximal is not None) + (self.reference is not None and s.kl_coef > 0)
        )
        totals["train/padded_tokens"] = float(sum(c["input_ids"].numel() for c in chunks))
        return totals

    def _backward(
        self,
        chunks: list[dict[str, Any]],
        proximal: list[Tensor] | None,
        denominator: Any,
        tokens: float,
        totals: dict[str, float],
        covariance: CovarianceSums,
        generator: Any,
        split: GradientSplit | None = None,
        marks: set[int] | frozenset[int] = frozenset(),
    ) -> float:
        """Every micro-batch's loss, backward; the parts' token-weighted means into `totals`;
        the gradient copied into `split` after each chunk index in `marks`. Returns the policy
        loss summed over the micro-batches."""
        s = self.settings
        policy_sum = 0.0
        forwards: list[TokenLogprobs] | None = None
        anchor = None
        if split is not None and s.control.active:  # it chooses on the whole batch, as unsplit
            forwards = [self._logprobs(self.model, c, entropy=s.entropy_coef > 0) for c in chunks]
            anchor = s.control.anchor(
                [f.sampled for f in forwards],
                [c["advantages"] for c in chunks],
                [c["mask"] for c in chunks],
                [c["reused"] for c in chunks],
            )
        for i, c in enumerate(chunks):
            if forwards is None:
                current = self._logprobs(self.model, c, entropy=s.entropy_coef > 0)
            else:
                current = forwards[i]
            logprobs, entropy = current.sampled, current.entropy
            loss, parts = policy_loss(
                s.loss,
                logprobs,
                c["behaviour"],
                c["advantages"],
                c["mask"],
                proximal_logprobs=None if proximal is None else proximal[i],
                weights=c["weights"],
                replayed=c["replayed"],
                aggregation=s.aggregation,
                denominator=denominator,
                control=s.control,
                control_rows=c["reused"],
                generator=generator,
                control_anchor=anchor,
            )
            policy_sum += float(loss.detach())
            covariance.add(logprobs.detach(), c["advantages"], c["mask"], c["reused"])
            if self.reference is not None and s.kl_coef > 0:
                with torch.no_grad():
                    ref = self._logprobs(self.reference, c).tempered
                delta = ref - current.tempered
                k3 = torch.exp(delta) - delta - 1
                loss = loss + s.kl_coef * aggregate(k3, c["mask"], s.aggregation, denominator)
                parts["loss/kl_reference"] = float(
                    (k3.detach() * c["mask"]).sum() / c["mask"].sum().clamp(min=1)
                )
            if entropy is not None:
                loss = loss - s.entropy_coef * aggregate(
                    entropy, c["mask"], s.aggregation, denominator
                )
                parts["loss/entropy"] = float(
                    (entropy.detach() * c["mask"]).sum() / c["mask"].sum().clamp(min=1)
                )
            loss.backward()  # type: ignore[no-untyped-call]
            if split is not None and i in marks:
                split.mark()
            share = float(c["mask"].sum()) / max(tokens, 1.0)
            for key, value in parts.items():
                if key.endswith("_max"):
                    totals[key] = max(totals.get(key, value), value)
                else:
                    totals[key] = totals.get(key, 0.0) + share * value
        return policy_sum


def reused_rows(sample: Sample) -> np.ndarray:
    """Rows that are not fresh on-policy rows trained for the first time: trained before, drawn
    from a mixture's replay table, or generated by older weights. [B] bool."""
    return np.asarray((sample.times_sampled > 1) | (sample.sources > 0) | (sample.ages > 0))


class CovarianceSums:
    """Cov(log π(y_t), A) over the trained tokens, fresh and reused rows apart, summed over
    micro-batches. Clip-Cov / KL-Cov (arXiv 2505.22617): the policy's entropy falls in step with
    this covariance, and a few high-covariance tokens drive the collapse, so it says whether the
    replayed rows are the ones collapsing diversity (`loss/cov_fresh`, `loss/cov_replayed`)."""

    def __init__(self) -> None:
        self.sums = {"fresh": [0.0, 0.0, 0.0, 0.0], "replayed": [0.0, 0.0, 0.0, 0.0]}

    def add(self, logprobs: Tensor, advantages: Tensor, mask: Tensor, replayed: Tensor) -> None:
        """One micro-batch: per-token log-probs [rows, T], per-row advantages, the loss mask and
        which rows are reused (`reused_rows`)."""
        advantage = advantages[:, None].expand_as(logprobs)
        for name, rows in (("fresh", ~replayed), ("replayed", replayed)):
            weight = mask * rows[:, None].to(mask.dtype)
            total = self.sums[name]
            total[0] += float((logprobs * advantage * weight).sum())
            total[1] += float((logprobs * weight).sum())
            total[2] += float((advantage * weight).sum())
            total[3] += float(weight.sum())

    def metrics(self) -> dict[str, float]:
        out = {}
        for name, (product, logprob, advantage, count) in self.sums.items():
            if count >= 2:
                out[f"loss/cov_{name}"] = product / count - (logprob / count) * (advantage / count)
        return out


def sample_metrics(sample: Sample) -> dict[str, float]:
    """How stale and how reused a batch was: mean/max age in policy versions, replayed share."""
    return {
        "train/age_mean": float(sample.ages.mean()),
        "train/age_max": float(sample.ages.max()),
        "train/replayed_fraction": float((sample.times_sampled > 1).mean()),
    }
