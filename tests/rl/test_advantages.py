import pytest
import torch

from rl.advantages import advantages_for, group_advantages


def test_dr_grpo_is_mean_only_baseline():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 5.0]])
    adv = group_advantages(r, kind="dr_grpo")
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, -0.5, 0.5], [-0.75, -0.75, -0.75, 2.25]]))
    assert torch.allclose(adv.sum(dim=1), torch.zeros(2))


def test_grpo_scales_by_sample_std():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    adv = group_advantages(r, kind="grpo", eps=0.0)
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()  # unbiased, 0.5774
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, -0.5, 0.5]]) / std)


def test_equal_rewards_give_zero_not_nan():
    for kind in ("dr_grpo", "grpo", "rloo"):
        adv = group_advantages(torch.full((2, 3), 0.7), kind=kind)
        assert torch.equal(adv, torch.zeros(2, 3))


def test_rloo_leave_one_out():
    r = torch.tensor([[3.0, 1.0, 2.0]])
    adv = group_advantages(r, kind="rloo")
    expected = torch.tensor([[3 - 1.5, 1 - 2.5, 2 - 2.0]])
    assert torch.allclose(adv, expected)


def test_masked_rollouts_get_zero_and_leave_the_baseline():
    r = torch.tensor([[1.0, 0.0, 100.0]])
    valid = torch.tensor([[True, True, False]])
    adv = group_advantages(r, valid=valid)
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, 0.0]]))
    # a group with a single valid rollout has no baseline
    adv = group_advantages(r, valid=torch.tensor([[True, False, False]]))
    assert torch.equal(adv, torch.zeros(1, 3))


def test_flat_wrapper_and_errors():
    assert advantages_for([1.0, 0.0, None, 0.5, 0.5, 0.5], group_size=3) == [0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 4"):
        advantages_for([1.0, 2.0, 3.0], group_size=4)
    with pytest.raises(ValueError, match="unknown advantage kind"):
        group_advantages(torch.zeros(1, 2), kind="ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(N, G\)"):
        group_advantages(torch.zeros(4))
