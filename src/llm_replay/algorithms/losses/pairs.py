"""Pair losses: what a preference pair's implicit-reward margin h costs.

For a pair (chosen c, rejected r) of one prompt, with sequence log-probs under the policy π_θ and
the reference π_ref (stored when the pair's rollouts were generated, so a replayed pair needs no
reference forward), the implicit reward margin is

    h = (log π_θ(c) − log π_ref(c)) − (log π_θ(r) − log π_ref(r)).

Each loss is a function of β·h alone:
- `dpo` (arXiv 2305.18290): −log σ(β h), the Bradley–Terry likelihood of the preference;
- `ipo` (arXiv 2310.12036): (h − 1/(2β))², which regresses the margin to a finite target and so
  does not keep pushing pairs it already ranks right (its answer to DPO's overfitting of
  deterministic preferences, which a reused pair is);
- `slic` (SLiC-HF, arXiv 2305.10425): max(0, 1 − β h), a hinge that stops at the margin.
All three are the "offline-robust" family the online-DPO studies compare (arXiv 2410.18252 finds
online DPO the most robust to off-policy data). Each loss also says how wrong the policy still is
on a pair (`wrongness`, in [0, 1]): the replay's margin priority and the "stored pairs stop
teaching" signal of `annotate: when_stale`.

The registry loads without torch (tensor methods only), as the policy losses' does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from torch import Tensor


class PairLoss(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    paper: ClassVar[str]

    def __init__(self, beta: float) -> None:
        if not beta > 0:
            raise ValueError(f"beta = {beta!r}: must be > 0")
        self.beta = float(beta)

    @abstractmethod
    def __call__(self, margin: Tensor) -> Tensor:
        """Per-pair loss of the implicit reward margins h [P] (not yet scaled by β)."""

    def wrongness(self, margin: Tensor) -> Tensor:
        """σ(−β h): the policy's probability of preferring the rejected side, [P] in [0, 1]."""
        return (-self.beta * margin).sigmoid()


PAIR_LOSSES: dict[str, type[PairLoss]] = {}


def register_pair_loss(cls: type[PairLoss]) -> type[PairLoss]:
    if cls.name in PAIR_LOSSES:
        raise ValueError(f"pair loss {cls.name!r} is registered twice")
    PAIR_LOSSES[cls.name] = cls
    return cls


@register_pair_loss
class DPO(PairLoss):
    name = "dpo"
    description = "−log σ(β h): the preference's Bradley–Terry likelihood"
    paper = "arXiv 2305.18290"

    def __call__(self, margin: Tensor) -> Tensor:
        return softplus(-self.beta * margin)


@register_pair_loss
class IPO(PairLoss):
    name = "ipo"
    description = "(h − 1/(2β))²: the margin regressed to a target, no push past it"
    paper = "arXiv 2310.12036"

    def __call__(self, margin: Tensor) -> Tensor:
        return (margin - 1.0 / (2.0 * self.beta)) ** 2


@register_pair_loss
class SLiC(PairLoss):
    name = "slic"
    description = "max(0, 1 − β h): a hinge on the margin (SLiC-HF)"
    paper = "arXiv 2305.10425"

    def __call__(self, margin: Tensor) -> Tensor:
        return (1.0 - self.beta * margin).clamp(min=0.0)


def softplus(x: Tensor) -> Tensor:
    """log(1 + eˣ), stable for large |x| (−log σ(−x))."""
    return x.clamp(min=0.0) + (-x.abs()).exp().log1p()


def build_pair_loss(name: str, beta: float) -> PairLoss:
    if name not in PAIR_LOSSES:
        raise ValueError(f"loss = {name!r}: choose one of {sorted(PAIR_LOSSES)}")
    return PAIR_LOSSES[name](beta)


def describe_pair_losses() -> list[dict[str, object]]:
    """Every pair loss with its paper and knob, in the shape `llm-replay losses` lists."""
    return [
        {
            "name": name,
            "kind": "pair",
            "description": cls.description,
            "paper": cls.paper,
            "default_clip": None,
            "needs_proximal": False,
            "advantage": None,
            "trl": None,
            "knobs": [
                {
                    "name": "preference.beta",
                    "default": 0.1,
                    "help": "β: the implicit reward's scale",
                }
            ],
        }
        for name, cls in sorted(PAIR_LOSSES.items())
    ]
