"""Group-relative advantages: one scalar per episode, computed within its group of rollouts.

A group is the G rollouts sampled from the same start state (one session forked G times). Each
episode's advantage is its reward minus a baseline taken from the *other information in its
group*; no value network is learned.

    grpo      A_i = (r_i - mean(r)) / (std(r) + eps)       Shao et al. 2024, "DeepSeekMath" (GRPO)
    dr_grpo   A_i =  r_i - mean(r)                         Liu et al. 2025, "Understanding R1-Zero-Like
                                                           Training: A Critical Perspective" (Dr. GRPO);
                                                           the default: dividing by the group std
                                                           up-weights groups that are nearly solved or
                                                           nearly hopeless (a question-difficulty bias)
    rloo      A_i =  r_i - mean_{j != i}(r_j)              Ahmadian et al. 2024, "Back to Basics:
                = G/(G-1) * (r_i - mean(r))                Revisiting REINFORCE Style Optimization for
                                                           Learning from Human Feedback in LLMs" (RLOO)

Rewards that are None (an episode masked out, e.g. by overlong filtering) take no part: they get
advantage 0 and are excluded from their group's statistics.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch

AdvantageKind = Literal["dr_grpo", "grpo", "rloo"]
ADVANTAGE_KINDS: tuple[str, ...] = ("dr_grpo", "grpo", "rloo")


def group_advantages(
    rewards: torch.Tensor,
    *,
    kind: AdvantageKind = "dr_grpo",
    valid: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantages for groups of rollouts.

    Args:
        rewards: (N, G) float, one row per group (start state), one column per rollout.
        kind: "dr_grpo" (mean baseline, default), "grpo" (mean baseline, std-scaled) or "rloo"
            (leave-one-out mean baseline). See the module docstring for the formulas and papers.
        valid: (N, G) bool, False for rollouts masked out; they get advantage 0 and do not enter
            the baseline. Default: all valid.
        eps: added to the std for "grpo" so that a group of equal rewards gives 0, not NaN.
    Returns:
        (N, G) float advantages. A group with fewer than 2 valid rollouts gets all zeros (no
        baseline can be formed from a single sample).
    Raises:
        ValueError: unknown `kind` or shapes that are not (N, G) / matching.
    """
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"unknown advantage kind {kind!r}; choose one of {', '.join(ADVANTAGE_KINDS)}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (N, G), got shape {tuple(rewards.shape)}")
    r = rewards.to(torch.float64)
    mask = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    if mask.shape != r.shape:
        raise ValueError(f"valid {tuple(mask.shape)} must match rewards {tuple(r.shape)}")
    m = mask.to(r.dtype)
    r = torch.where(mask, r, torch.zeros_like(r))
    count = m.sum(dim=1, keepdim=True)
    mean = r.sum(dim=1, keepdim=True) / count.clamp(min=1)
    centered = (r - mean) * m
    if kind == "dr_grpo":
        adv = centered
    elif kind == "grpo":
        # unbiased sample std over the valid rollouts, as in DeepSeekMath's implementation
        var = (centered**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)
        adv = centered / (var.sqrt() + eps)
    else:  # rloo
        adv = centered * count / (count - 1).clamp(min=1)
    adv = torch.where(count >= 2, adv, torch.zeros_like(adv))
    return (adv * m).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def advantages_for(
    rewards: Sequence[float | None], *, group_size: int, kind: AdvantageKind = "dr_grpo"
) -> list[float]:
    """Convenience wrapper over `group_advantages` for a flat list of rollouts.

    Args:
        rewards: N*G rewards ordered group by group (None = masked out).
        group_size: G.
    Returns:
        N*G advantages in the same order (0.0 for the None entries).
    Raises:
        ValueError: the length is not a multiple of `group_size`.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    values = torch.tensor([0.0 if r is None else float(r) for r in rewards], dtype=torch.float64)
    valid = torch.tensor([r is not None for r in rewards])
    adv = group_advantages(
        values.view(-1, group_size), kind=kind, valid=valid.view(-1, group_size)
    )
    return [float(a) for a in adv.flatten()]
