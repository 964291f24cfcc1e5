import math

import pytest
import torch

from rl.loss import kl_k3, policy_loss, token_entropy, token_logprobs


def test_token_logprobs_matches_log_softmax_and_respects_allowed_mask():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    targets = torch.tensor([1])
    full = token_logprobs(logits, targets)
    assert torch.allclose(full, torch.log_softmax(logits, -1)[:, 1])
    allowed = torch.tensor([[True, True, False, False]])
    masked = token_logprobs(logits, targets, allowed=allowed)
    assert torch.allclose(masked, torch.tensor([1.0 - math.log(math.exp(2.0) + math.exp(1.0))]))
    assert token_logprobs(logits, torch.tensor([3]), allowed=allowed).item() == float("-inf")


def test_on_policy_loss_is_minus_mean_advantage_and_gradient_follows_it():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.1, -0.3]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    loss, stats = policy_loss(logp, logp.detach(), adv, mask)
    # ratio 1 everywhere: loss = -sum(mask * A) / tokens = -(1 + 1 - 2 - 2) / 4
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert torch.allclose(logp.grad, -mask * adv[:, None] / 4)
    assert stats.tokens == 4 and stats.clip_frac == 0.0 and stats.ratio_mean == pytest.approx(1.0)


def test_clipping_stops_the_gradient_past_the_trust_region():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[math.log(2.0), math.log(0.5)]], requires_grad=True)
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(logp, old, torch.tensor([1.0]), mask, clip_eps_low=0.2, clip_eps_high=0.2)
    loss.backward()
    # token 0: ratio 2 > 1.2 with A > 0 -> clipped, no gradient; token 1: ratio 0.5 < 0.8, A > 0 ->
    # min picks the unclipped 0.5 (pessimistic), gradient -ratio * A / 2
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() == pytest.approx(-0.5 / 2)
    assert stats.clip_frac == pytest.approx(0.5)
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)


def test_masked_positions_never_contribute_even_if_inf():
    logp = torch.tensor([[float("-inf"), -1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.0]])
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.tensor([[0.0, 1.0]]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()


def test_k3_kl_and_normalizer():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.0, -1.0]])
    kl = kl_k3(logp, ref)
    assert kl[0, 0].item() == 0.0
    assert kl[0, 1].item() == pytest.approx(math.exp(1.0) - 1.0 - 1.0)
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(logp, logp, torch.tensor([0.0]), mask, ref_logprobs=ref, kl_coef=0.5, normalizer=10.0)
    assert loss.item() == pytest.approx(0.5 * (math.e - 2.0) / 10.0)
    assert stats.kl == pytest.approx((math.e - 2.0) / 2)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(logp, logp, torch.tensor([0.0]), mask, kl_coef=0.1)
    with pytest.raises(ValueError, match=r"\(B,\)"):
        policy_loss(logp, logp, torch.tensor([0.0, 1.0]), mask)


def test_accumulated_microbatches_equal_the_full_batch():
    torch.manual_seed(0)
    logp = torch.randn(4, 5, requires_grad=True)
    old = logp.detach() + 0.05 * torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).float()
    adv = torch.randn(4)
    full, _ = policy_loss(logp, old, adv, mask)
    (g_full,) = torch.autograd.grad(full, logp)
    total = float(mask.sum())
    parts = [policy_loss(logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], normalizer=total)[0] for i in (0, 2)]
    (g_acc,) = torch.autograd.grad(parts[0] + parts[1], logp)
    assert torch.allclose(g_full, g_acc, atol=1e-6)


def test_token_entropy_uniform_and_masked():
    logits = torch.zeros(2, 3, 8)
    torch.testing.assert_close(token_entropy(logits), torch.full((2, 3), math.log(8)))
    allowed = torch.zeros(2, 3, 8, dtype=torch.bool)
    allowed[..., :2] = True
    torch.testing.assert_close(token_entropy(logits, allowed=allowed), torch.full((2, 3), math.log(2)))
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert token_entropy(peaked).item() < 1e-6
