"""Every policy loss against a hand-computed value, and the sign of its gradient."""

from __future__ import annotations

import math

import pytest
import torch

from llm_replay.algorithms.losses import (
    LOSSES,
    LossConfigError,
    aggregate,
    build_loss,
    describe_losses,
    normalizer,
    policy_loss,
)
from llm_replay.algorithms.losses.m2po import second_moment_mask

LOG = math.log

# Two rollouts, three positions; position 0 is prompt (masked), rollout 1 has one completion token.
MASK = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
BEHAVIOUR = torch.tensor([[0.0, LOG(0.5), LOG(0.4)], [0.0, LOG(0.5), 0.0]])
# ratios r = π_θ/π_behav: rollout 0 → 1.5 and 1.0; rollout 1 → 0.5
CURRENT = torch.tensor([[0.0, LOG(0.75), LOG(0.4)], [0.0, LOG(0.25), 0.0]])
ADV = torch.tensor([1.0, -2.0])


def run(name: str, aggregation: str = "token_mean", **knobs: object) -> float:
    loss, _ = policy_loss(
        build_loss(name, **knobs),
        CURRENT.clone(),
        BEHAVIOUR,
        ADV,
        MASK,
        proximal_logprobs=BEHAVIOUR + torch.tensor([[0.0, LOG(1.25), 0.0], [0.0, 0.0, 0.0]]),
        aggregation=aggregation,
    )
    return float(loss)


def test_reinforce_hand_value() -> None:
    expected = -(1.0 * LOG(0.75) + 1.0 * LOG(0.4) + -2.0 * LOG(0.25)) / 3
    assert run("reinforce") == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_grpo_clips_symmetrically() -> None:
    # token terms: min(1.5·1, 1.2·1) = 1.2; min(1·1, 1·1) = 1; min(0.5·-2, 0.8·-2) = -1.6
    assert run("grpo") == pytest.approx(-(1.2 + 1.0 - 1.6) / 3, rel=1e-5, abs=1e-6)


def test_dapo_clips_higher() -> None:
    # ε_high = 0.28: 1.28 instead of 1.2
    assert run("dapo") == pytest.approx(-(1.28 + 1.0 - 1.6) / 3, rel=1e-5, abs=1e-6)
    assert run("grpo", clip_high=0.28) == pytest.approx(run("dapo"), rel=1e-9)


def test_decoupled_ppo_hand_value() -> None:
    # π_prox/π_behav = 1.25 at (0,1), 1 elsewhere; u = π_θ/π_prox = 1.2, 1.0, 0.5
    # terms: 1.25·min(1.2, 1.2) = 1.5; 1·1 = 1; 1·min(0.5·-2, 0.8·-2) = -1.6
    assert run("decoupled_ppo") == pytest.approx(-(1.5 + 1.0 - 1.6) / 3, rel=1e-5, abs=1e-6)
    # capping w at 1.1
    assert run("decoupled_ppo", decoupled_cap=1.1) == pytest.approx(
        -(1.1 * 1.2 + 1.0 - 1.6) / 3, rel=1e-5, abs=1e-6
    )


def test_tis_truncates_at_c() -> None:
    # w = min(r, C): C = 2 → 1.5, 1, 0.5 ; C = 1.2 → 1.2, 1, 0.5
    lp = (LOG(0.75), LOG(0.4), LOG(0.25))
    full = -(1.5 * lp[0] + 1.0 * lp[1] + 0.5 * -2.0 * lp[2]) / 3
    assert run("tis") == pytest.approx(full, rel=1e-5, abs=1e-6)
    capped = -(1.2 * lp[0] + 1.0 * lp[1] + 0.5 * -2.0 * lp[2]) / 3
    assert run("tis", tis_cap=1.2) == pytest.approx(capped, rel=1e-5, abs=1e-6)


def test_tis_sequence_level_uses_length_normalised_ratio() -> None:
    # rollout 0: exp(mean(log 1.5, log 1)) = sqrt(1.5); rollout 1: 0.5
    s = math.sqrt(1.5)
    expected = -(s * LOG(0.75) + s * LOG(0.4) + 0.5 * -2.0 * LOG(0.25)) / 3
    assert run("tis", level="sequence") == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_icepop_masks_outside_band() -> None:
    # β = 1.8: band [0.556, 1.8] drops r = 0.5 (rollout 1)
    expected = -(1.5 * LOG(0.75) + 1.0 * LOG(0.4)) / 3
    assert run("icepop", icepop_beta=1.8) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # β = 5 keeps everything: same as untruncated IS
    assert run("icepop") == pytest.approx(run("tis", tis_cap=100.0), rel=1e-5, abs=1e-6)


def test_cispo_clips_weight_not_gradient() -> None:
    # default ε_low = 1 (no lower clip), ε_high = 0.28: weights 1.28, 1, 0.5
    expected = -(1.28 * LOG(0.75) + 1.0 * LOG(0.4) + 0.5 * -2.0 * LOG(0.25)) / 3
    assert run("cispo") == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_gspo_sequence_ratio() -> None:
    # s0 = sqrt(1.5) ≈ 1.2247 → clipped to 1 + 4e-4; s1 = 0.5 → min(0.5·-2, (1-3e-4)·-2)
    s0 = 1 + 4e-4
    s1_term = min(0.5 * -2.0, (1 - 3e-4) * -2.0)
    expected = -(s0 * 1.0 * 2 + s1_term) / 3
    assert run("gspo") == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_asymre_shifts_baseline() -> None:
    # (A − δV) with δV = −0.1: 1.1 and −1.9
    expected = -(1.1 * LOG(0.75) + 1.1 * LOG(0.4) + -1.9 * LOG(0.25)) / 3
    assert run("asymre") == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_aggregations_hand_values() -> None:
    per_token = torch.tensor([[9.0, 1.0, 3.0], [9.0, 4.0, 9.0]])
    assert float(aggregate(per_token, MASK, "token_mean")) == pytest.approx(8.0 / 3)
    assert float(aggregate(per_token, MASK, "sequence_mean")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(aggregate(per_token, MASK, "token_sum_norm")) == pytest.approx(8.0 / 6)
    assert normalizer("token_sum_norm", MASK, sum_norm_length=8) == 16.0
    assert run("reinforce", "sequence_mean") == pytest.approx(
        -((LOG(0.75) + LOG(0.4)) / 2 + -2.0 * LOG(0.25)) / 2, rel=1e-6
    )


def test_sampling_weights_scale_rows() -> None:
    loss, _ = policy_loss(
        "reinforce", CURRENT, BEHAVIOUR, ADV, MASK, weights=torch.tensor([2.0, 0.0])
    )
    assert float(loss) == pytest.approx(-2.0 * (LOG(0.75) + LOG(0.4)) / 3, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradient_raises_probability_of_positive_advantage(name: str, sign: float) -> None:
    """At r = 1 (fresh rollout), descending the loss raises log π where A > 0, lowers it where A < 0."""
    logprobs = torch.tensor([[0.0, LOG(0.5), LOG(0.3)]], requires_grad=True)
    behaviour = logprobs.detach().clone()
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    adv = torch.tensor([sign])
    loss, _ = policy_loss(name, logprobs, behaviour, adv, mask, proximal_logprobs=behaviour)
    loss.backward()
    assert logprobs.grad is not None
    grad = logprobs.grad[0, 1:]
    # asymre adds -δV = +0.1 to A, so for A = -1 the shifted advantage is still negative
    assert torch.all(torch.sign(-grad) == sign), (name, grad)


def test_unknown_loss_and_aggregation_are_named() -> None:
    with pytest.raises(ValueError, match="loss = 'nope'"):
        policy_loss("nope", CURRENT, BEHAVIOUR, ADV, MASK)
    with pytest.raises(ValueError, match="aggregation = 'sum'"):
        policy_loss("grpo", CURRENT, BEHAVIOUR, ADV, MASK, aggregation="sum")
    with pytest.raises(ValueError, match="needs proximal_logprobs"):
        policy_loss("decoupled_ppo", CURRENT, BEHAVIOUR, ADV, MASK)
    with pytest.raises(LossConfigError, match="level = 'rollout'"):
        build_loss("tis", level="rollout")
    with pytest.raises(LossConfigError, match=r"^tis_cap: not a knob of loss 'grpo'"):
        build_loss("grpo", tis_cap=2.0)


def test_metrics_report_ratio_and_clip_fraction() -> None:
    _, metrics = policy_loss("grpo", CURRENT, BEHAVIOUR, ADV, MASK)
    assert metrics["loss/ratio"] == pytest.approx((1.5 + 1.0 + 0.5) / 3, rel=1e-5, abs=1e-6)
    assert metrics["loss/ratio_max"] == pytest.approx(1.5, rel=1e-5, abs=1e-6)
    assert metrics["loss/clip_fraction"] == pytest.approx(2 / 3)


def test_m2po_masks_the_largest_second_moments_until_the_rest_is_within_tau() -> None:
    """log r = [0.5, 0.1, -0.1, 0]: mean (log r)² = 0.0675 > 0.04, so the 0.5 token is masked and
    the rest has mean 0.02 / 3 ≤ 0.04; loss = −Σ_kept r·A / 4 tokens."""
    log_ratio = torch.tensor([[0.5, 0.1, -0.1, 0.0]])
    behaviour = torch.zeros(1, 4)
    logprobs = (behaviour + log_ratio).requires_grad_(True)
    mask = torch.ones(1, 4)
    loss, metrics = policy_loss("m2po", logprobs, behaviour, torch.tensor([2.0]), mask)
    kept = math.exp(0.1) + math.exp(-0.1) + 1.0
    assert float(loss.detach()) == pytest.approx(-2.0 * kept / 4, rel=1e-6)
    assert metrics["loss/masked_fraction"] == pytest.approx(0.25)
    loss.backward()
    assert logprobs.grad is not None
    assert logprobs.grad[0, 0] == 0.0  # the masked outlier gets no gradient
    expected = -2.0 * torch.exp(log_ratio[0, 1:]) / 4  # d(r·A)/d log π = r·A
    torch.testing.assert_close(logprobs.grad[0, 1:], expected)


def test_m2po_keeps_everything_within_tau_and_masks_nothing_outside_the_mask() -> None:
    log_ratio = torch.tensor([[0.1, -0.1, 3.0], [0.05, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # the 3.0 is padding
    assert second_moment_mask(log_ratio, mask, 0.04).tolist() == [[1, 1, 0], [1, 0, 0]]
    everything_big = torch.tensor([[1.0, -1.0]])
    assert second_moment_mask(everything_big, torch.ones(1, 2), 0.04).tolist() == [[0, 0]]
    with pytest.raises(LossConfigError, match="m2_threshold"):
        build_loss("m2po", m2_threshold=-1.0)


def test_exgrpo_shapes_replayed_rows_and_clips_fresh_ones() -> None:
    """Rollout 0 fresh: GRPO clip terms 1.2 and 1.0; rollout 1 replayed: f(0.5) = 0.5/0.6 times
    A = −2, unclipped. Gradient on a replayed token: β/(r+β)² · r · A."""
    replayed = torch.tensor([False, True])
    logprobs = CURRENT.clone().requires_grad_(True)
    loss, metrics = policy_loss("exgrpo", logprobs, BEHAVIOUR, ADV, MASK, replayed=replayed)
    shaped = 0.5 / 0.6 * -2.0
    assert float(loss.detach()) == pytest.approx(-(1.2 + 1.0 + shaped) / 3, rel=1e-5)
    assert metrics["loss/shaped_fraction"] == pytest.approx(1 / 3)
    assert metrics["loss/clip_fraction"] == pytest.approx(1 / 3)  # the 1.5 token is clipped
    loss.backward()
    assert logprobs.grad is not None
    expected = -(0.1 / (0.5 + 0.1) ** 2 * 0.5 * -2.0) / 3
    assert float(logprobs.grad[1, 1]) == pytest.approx(expected, rel=1e-5)
    # without the mark every row is fresh: plain GRPO
    assert float(policy_loss("exgrpo", CURRENT, BEHAVIOUR, ADV, MASK)[0]) == pytest.approx(
        run("grpo"), rel=1e-6
    )
    with pytest.raises(LossConfigError, match="shaping_beta"):
        build_loss("exgrpo", shaping_beta=0.0)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_exgrpo_shaped_gradient_follows_the_advantage(sign: float) -> None:
    logprobs = torch.tensor([[0.0, LOG(0.5), LOG(0.3)]], requires_grad=True)
    behaviour = logprobs.detach().clone() + 0.7  # stale: r = e^-0.7
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss, _ = policy_loss(
        "exgrpo", logprobs, behaviour, torch.tensor([sign]), mask, replayed=torch.tensor([True])
    )
    loss.backward()
    assert logprobs.grad is not None
    assert torch.all(torch.sign(-logprobs.grad[0, 1:]) == sign)


def test_the_registry_describes_every_loss_with_its_paper_and_knobs() -> None:
    """What `llm-replay losses` prints: every loss, its paper, each knob with default and help."""
    entries = {e["name"]: e for e in describe_losses()}
    assert set(entries) == set(LOSSES)
    for entry in entries.values():
        assert entry["description"] and entry["paper"]
        assert all(k["help"] for k in entry["knobs"]), entry["name"]
    assert entries["dapo"]["default_clip"] == [0.2, 0.28]
    assert entries["decoupled_ppo"]["needs_proximal"] and not entries["grpo"]["needs_proximal"]
    assert entries["asymre"]["advantage"] == "dr_grpo"
    assert {n for n, e in entries.items() if e["trl"]} == {"grpo", "asymre"}
    assert [k["name"] for k in entries["tis"]["knobs"]] == ["level", "tis_cap"]


def test_a_clip_knob_left_unset_takes_the_losses_own_default() -> None:
    assert build_loss("cispo").clip_epsilons() == (1.0, 0.28)
    assert build_loss("cispo", clip_high=0.5).clip_epsilons() == (1.0, 0.5)
    assert build_loss("gspo").clip_range() == pytest.approx((1 - 3e-4, 1 + 4e-4))


def test_bapo_raises_both_bounds_until_positives_carry_their_share() -> None:
    """Tokens (r, A): (1.27, +1), (0.95, −2), (0.71, −1), one per rollout. From (0.6, 1.2) the
    positive token carries only once c_high ≥ 1.27 (pass 2: share 1.27 / 3.88), and the share
    reaches ρ₀ = 0.4 when c_low passes 0.71 (pass 6: (0.72, 1.50), share 1.27 / 3.17). The loss
    is then −mean(min(r·A, clip(r, 0.72, 1.5)·A)) = −(1.27 − 1.9 − 0.72) / 3."""
    ratios = torch.tensor([1.27, 0.95, 0.71])
    behaviour = torch.full((3, 1), LOG(0.5))
    current = (behaviour + ratios.log()[:, None]).requires_grad_()
    mask = torch.ones(3, 1)
    advantages = torch.tensor([1.0, -2.0, -1.0])
    loss, metrics = policy_loss("bapo", current, behaviour, advantages, mask)
    assert loss.item() == pytest.approx(-(1.27 - 1.9 - 0.72) / 3, rel=1e-5)
    assert metrics["loss/bapo_low"] == pytest.approx(0.72)
    assert metrics["loss/bapo_high"] == pytest.approx(1.5)
    assert metrics["loss/bapo_positive_share"] == pytest.approx(1.27 / 3.17, rel=1e-5)
    loss.backward()
    assert current.grad is not None
    assert current.grad[2, 0] == 0.0  # r = 0.71 < c_low with A < 0: clipped, no gradient
    assert current.grad[0, 0] < 0 and current.grad[1, 0] > 0


def test_bapo_keeps_its_starting_bounds_without_negatives_and_stops_at_its_maxima() -> None:
    behaviour = torch.full((2, 1), LOG(0.5))
    mask = torch.ones(2, 1)
    _, metrics = policy_loss("bapo", behaviour, behaviour, torch.tensor([1.0, 0.0]), mask)
    assert (metrics["loss/bapo_low"], metrics["loss/bapo_high"]) == pytest.approx((0.6, 1.2))
    assert metrics["loss/bapo_positive_share"] == 1.0
    # all negative: the share can never reach ρ₀, so both bounds go to their maxima
    _, metrics = policy_loss("bapo", behaviour, behaviour, torch.tensor([-1.0, -1.0]), mask)
    assert (metrics["loss/bapo_low"], metrics["loss/bapo_high"]) == pytest.approx((0.9, 3.0))
    assert metrics["loss/bapo_positive_share"] == 0.0


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"target": 1.0}, r"^target = 1.0"),
        ({"low_start": 0.95}, r"^low_start = 0.95, low_max = 0.9"),
        ({"high_start": 0.9}, r"^high_start = 0.9"),
        ({"high_step": 0.0}, r"^high_step = 0.0"),
    ],
)
def test_bapo_knobs_are_checked_by_name(knobs: dict[str, float], message: str) -> None:
    with pytest.raises(LossConfigError, match=message):
        build_loss("bapo", **knobs)


def test_a_loss_reports_the_statistics_it_computes_and_only_those() -> None:
    from llm_replay.algorithms.losses import loss_reports

    assert {"clip_fraction", "ratio", "ratio_max", "kl_behaviour", "sampled_nll"} <= loss_reports(
        "grpo"
    )
    assert "clip_fraction" not in loss_reports("tis")  # it truncates, it does not clip
    assert "clip_fraction" not in loss_reports("asymre")
    assert "residual" in loss_reports("oapl")
    for (
        name
    ) in LOSSES:  # a proximal policy and the replayed rows are there for those that read them
        assert {"kl_behaviour", "sampled_nll", "log_ratio_m2"} <= loss_reports(name)


def test_oapl_regresses_the_sequence_log_ratio_onto_the_advantage() -> None:
    beta = 0.5
    # sequence log-ratios: rollout 0: log 1.5 + log 1.0; rollout 1: log 0.5
    residuals = [beta * LOG(1.5) - 1.0, beta * LOG(0.5) + 2.0]
    expected = sum(r * r for r in residuals) / 2  # sequence_mean: each rollout weighs the same
    assert run("oapl", aggregation="sequence_mean", beta=beta) == pytest.approx(expected, rel=1e-5)


def test_oapl_is_at_rest_where_the_policy_is_the_closed_form_target() -> None:
    """β·log(π/π_behav) = A* is the minimum: no gradient there, and a pull back from beyond it."""
    beta, advantage = 0.01, torch.tensor([0.3])
    behaviour = torch.tensor([[LOG(0.5), LOG(0.3)]])
    mask = torch.ones(1, 2)
    for shift, direction in ((0.0, 0.0), (5.0, 1.0)):
        target = behaviour + (float(advantage) / beta + shift) / 2  # split over the two tokens
        logprobs = target.clone().requires_grad_(True)
        loss, metrics = policy_loss(
            build_loss("oapl", beta=beta),
            logprobs,
            behaviour,
            advantage,
            mask,
            aggregation="sequence_mean",
        )
        loss.backward()
        assert logprobs.grad is not None
        if direction == 0.0:
            assert logprobs.grad.abs().max() < 1e-6
        else:  # past the target: descending the loss lowers log π again
            assert torch.all(logprobs.grad > 0)
        assert metrics["loss/residual"] == pytest.approx(beta * shift, abs=1e-5)


def test_oapl_refuses_a_beta_that_is_not_positive() -> None:
    with pytest.raises(LossConfigError, match="beta = 0"):
        build_loss("oapl", beta=0.0)
