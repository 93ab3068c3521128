"""Clip-Cov, KL-Cov and W-REINFORCE's weight on replayed rows, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from llm_replay.algorithms.losses import policy_loss
from llm_replay.algorithms.token_control import TokenControl, TokenControlError

LOG = math.log
# Three rollouts, four positions (position 0 is prompt). Rows 0 and 1 were replayed, row 2 is fresh.
MASK = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
LOGPROBS = torch.tensor([[0.0, -0.5, -2.0, -0.1], [0.0, -1.0, -0.2, -3.0], [0.0, -0.3, -0.4, -0.5]])
ADV = torch.tensor([1.0, -1.0, 0.5])
REPLAYED = torch.tensor([True, True, False])


def test_the_centred_covariance_by_hand() -> None:
    cov = TokenControl().covariance(LOGPROBS, ADV, MASK)
    # 8 trained tokens: mean A = (3·1 − 2·1 + 3·0.5)/8 = 0.3125; mean log π = −5.0/8 = −0.625
    assert float(cov[0, 1]) == pytest.approx((1 - 0.3125) * (-0.5 + 0.625))
    assert float(cov[1, 2]) == pytest.approx((-1 - 0.3125) * (-0.2 + 0.625))
    assert float(cov[2, 3]) == pytest.approx((0.5 - 0.3125) * (-0.5 + 0.625))


def test_kl_cov_treats_the_top_share_of_replayed_tokens_only() -> None:
    control = TokenControl(mode="kl_cov", fraction=0.5, coef=2.0)
    chosen = control.select(LOGPROBS, ADV, MASK, REPLAYED)
    # 5 replayed tokens, budget 2: covariances 0.0859 (0,1), −0.945 (0,2), 0.361 (0,3),
    # 0.492 (1,1), −0.558 (1,2): the top two are (1,1) and (0,3); row 2 is fresh
    assert chosen.nonzero().tolist() == [[0, 3], [1, 1]]
    replayed = TokenControl(mode="kl_cov", fraction=1.0)
    assert torch.equal(
        replayed.select(LOGPROBS, ADV, MASK, REPLAYED), (MASK > 0) & REPLAYED[:, None]
    )
    everyone = TokenControl(mode="kl_cov", fraction=1.0, rows="all")
    assert torch.equal(everyone.select(LOGPROBS, ADV, MASK, REPLAYED), MASK > 0)


def test_kl_cov_adds_beta_times_the_absolute_log_ratio() -> None:
    current = LOGPROBS.clone().requires_grad_(True)
    behaviour = LOGPROBS - torch.tensor([[0.0, 0.0, 0.0, 0.3], [0.0, -0.2, 0.0, 0.0], [0.0] * 4])
    control = TokenControl(mode="kl_cov", fraction=0.5, coef=2.0)
    plain, _ = policy_loss("reinforce", current, behaviour, ADV, MASK, replayed=REPLAYED)
    treated, metrics = policy_loss(
        "reinforce", current, behaviour, ADV, MASK, replayed=REPLAYED, control=control
    )
    # the treated tokens (0,3) and (1,1) have |log r| 0.3 and 0.2; token_mean over 8 tokens
    assert float((treated - plain).detach()) == pytest.approx(2.0 * (0.3 + 0.2) / 8)
    assert metrics["loss/cov_treated"] == pytest.approx(2 / 8)


def test_clip_cov_stops_the_gradient_inside_the_band_and_nowhere_else() -> None:
    current = LOGPROBS.clone().requires_grad_(True)
    control = TokenControl(mode="clip_cov", fraction=1.0, low=0.3, high=0.45)
    # in (0.3, 0.45) among replayed tokens: only (0,3) at 0.361 ((1,1) is 0.492)
    loss, metrics = policy_loss(
        "reinforce",
        current,
        LOGPROBS,
        ADV,
        MASK,
        replayed=REPLAYED,
        control=control,
        generator=torch.Generator().manual_seed(0),
    )
    loss.backward()
    assert current.grad is not None
    assert float(current.grad[0, 3]) == 0.0
    assert float(current.grad[0, 1]) == pytest.approx(-1.0 / 8)
    assert float(current.grad[1, 1]) == pytest.approx(1.0 / 8)
    assert metrics["loss/cov_treated"] == pytest.approx(1 / 8)


def test_clip_cov_picks_a_random_share_reproducibly() -> None:
    control = TokenControl(mode="clip_cov", fraction=0.2, low=-10.0, high=10.0, rows="all")
    picks = [
        control.select(LOGPROBS, ADV, MASK, REPLAYED, torch.Generator().manual_seed(seed))
        for seed in (3, 3, 4)
    ]
    assert int(picks[0].sum()) == 1  # max(1, int(0.2 · 8))
    assert torch.equal(picks[0], picks[1])
    assert all(bool((p & (MASK == 0)).sum() == 0) for p in picks)


def test_positive_weight_scales_replayed_successes_only() -> None:
    control = TokenControl(positive_weight=0.1)
    value, metrics = policy_loss(
        "reinforce", LOGPROBS, LOGPROBS, ADV, MASK, replayed=REPLAYED, control=control
    )
    row0 = 0.1 * 1.0 * (-0.5 - 2.0 - 0.1)  # replayed success, weighted by λ
    row1 = -1.0 * (-1.0 - 0.2)  # replayed failure, full weight
    row2 = 0.5 * (-0.3 - 0.4 - 0.5)  # fresh success, untouched
    assert float(value) == pytest.approx(-(row0 + row1 + row2) / 8)
    assert "loss/cov_treated" not in metrics


def test_off_changes_nothing() -> None:
    plain, _ = policy_loss("grpo", LOGPROBS, LOGPROBS - 0.1, ADV, MASK, replayed=REPLAYED)
    off, _ = policy_loss(
        "grpo", LOGPROBS, LOGPROBS - 0.1, ADV, MASK, replayed=REPLAYED, control=TokenControl()
    )
    assert float(plain) == float(off)
    assert not TokenControl().active


@pytest.mark.parametrize(
    ("knobs", "name"),
    [
        ({"mode": "cov"}, "mode"),
        ({"rows": "fresh"}, "rows"),
        ({"fraction": 0.0}, "fraction"),
        ({"coef": -1.0}, "coef"),
        ({"low": 2.0, "high": 1.0}, "low"),
        ({"positive_weight": float("nan")}, "positive_weight"),
    ],
)
def test_bad_settings_name_the_field(knobs: dict[str, object], name: str) -> None:
    with pytest.raises(TokenControlError, match=f"^{name} = "):
        TokenControl(**knobs)  # type: ignore[arg-type]
