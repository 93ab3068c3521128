"""The pair losses at known margins, their 'how wrong' signal, and their listing."""

from __future__ import annotations

import math

import pytest
import torch

from llm_replay.algorithms.losses.pairs import PAIR_LOSSES, build_pair_loss, describe_pair_losses

MARGINS = torch.tensor([-20.0, -1.0, 0.0, 1.0, 20.0], dtype=torch.float64)


def test_dpo_is_the_preference_likelihood_and_stable_far_out() -> None:
    loss = build_pair_loss("dpo", beta=0.5)
    expected = [-math.log(1 / (1 + math.exp(-0.5 * h))) for h in MARGINS.tolist()]
    assert loss(MARGINS).tolist() == pytest.approx(expected, rel=1e-9)
    far = build_pair_loss("dpo", beta=1.0)(torch.tensor([-1e4, 1e4], dtype=torch.float64))
    assert torch.isfinite(far).all() and far[0] == pytest.approx(1e4) and far[1] == 0


def test_ipo_regresses_to_its_target_and_slic_stops_at_the_margin() -> None:
    ipo = build_pair_loss("ipo", beta=0.25)  # target 1 / (2β) = 2
    assert ipo(torch.tensor([2.0])).item() == 0 and ipo(torch.tensor([4.0])).item() == 4.0
    slic = build_pair_loss("slic", beta=0.5)  # zero once β h >= 1
    assert slic(MARGINS).tolist() == [11.0, 1.5, 1.0, 0.5, 0.0]


def test_wrongness_is_the_policys_probability_of_the_rejected_side() -> None:
    loss = build_pair_loss("dpo", beta=1.0)
    wrong = loss.wrongness(MARGINS)
    assert wrong[2].item() == 0.5 and wrong[0].item() > 0.99 and wrong[-1].item() < 0.01
    assert (wrong[:-1] > wrong[1:]).all()


def test_the_registry_lists_every_pair_loss_and_refuses_bad_input() -> None:
    assert set(PAIR_LOSSES) == {"dpo", "ipo", "slic"}
    listed = describe_pair_losses()
    assert [e["name"] for e in listed] == sorted(PAIR_LOSSES)
    assert all(e["kind"] == "pair" and e["paper"] for e in listed)
    with pytest.raises(ValueError, match="loss = 'kto'"):
        build_pair_loss("kto", beta=0.1)
    with pytest.raises(ValueError, match="beta = 0"):
        build_pair_loss("dpo", beta=0)
