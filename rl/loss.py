"""The RL objective: clipped policy gradient on every sampled token, with an optional KL penalty.

Shapes: B sequences (one per policy turn), T tokens (padded), V vocabulary. A sequence is the
turn's prompt followed by its completion; `loss_mask` (B, T) is 1 exactly on the completion tokens
the policy sampled (actions and self-summaries alike) and 0 on prompt, tool-output, template and
padding tokens (see `rl.trajectory`). Each sequence carries its episode's advantage (B,).

Objective (PPO's clipped surrogate, Schulman et al. 2017, as used token-level by GRPO, Shao et
al. 2024; the asymmetric clip range is DAPO's "clip-higher", Yu et al. 2025):

    ratio_t  = exp(logp_t - old_logp_t)
    pg_t     = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A)
    kl_t     = exp(ref_t - logp_t) - (ref_t - logp_t) - 1      k3 estimator of KL(pi || pi_ref),
                                                              Schulman 2020, "Approximating KL
                                                              divergence"; always >= 0
    loss     = sum_t mask_t * (pg_t + beta * kl_t) / normalizer

`normalizer` defaults to the number of masked tokens (a token-level mean, DAPO); pass the token
count of the whole optimizer batch when accumulating gradients over micro-batches so that the
accumulated gradient equals the full-batch one, or a constant (Dr. GRPO's fixed normalizer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, *, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probability of each target token.

    Args:
        logits: (..., V) unnormalised scores for the position that predicts each target.
        targets: (...) int64 token ids.
        allowed: (..., V) bool, optional: the grammar's allowed tokens at each position. The
            distribution is renormalised over the allowed tokens only, which is how a constrained
            turn was sampled (`harness.policies.grammar`), so the PPO ratio compares like with like.
    Returns:
        (...) float32 log-probabilities (natural log). A target outside `allowed` gets -inf.
    """
    logits = logits.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


@torch.no_grad()
def token_entropy(logits: torch.Tensor, *, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the next-token distribution at each position (a diagnostic: no gradient).

    Args:
        logits: (..., V) unnormalised scores (already divided by the sampling temperature).
        allowed: (..., V) bool, optional: the grammar's allowed tokens; the entropy is then that of
            the distribution renormalised over them, the one a constrained turn was sampled from.
    Returns:
        (...) float32 entropies in nats, H = -sum_v p_v log p_v.
    """
    logits = logits.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)


def sequence_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Per-token log-probabilities of `input_ids` under a causal LM, aligned with the input.

    Args:
        model: a transformers causal LM (returns `.logits` of shape (B, T, V)).
        input_ids: (B, T) int64, right-padded.
        attention_mask: (B, T) 0/1.
    Returns:
        (B, T) float32: entry t is log p(input_ids[t] | input_ids[:t]); entry 0 is 0 (nothing
        predicts the first token).
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:] = token_logprobs(logits[:, :-1], input_ids[:, 1:])
    return out


@dataclass(frozen=True)
class LossStats:
    """Diagnostics of one loss evaluation (plain floats, for metrics).

    Attributes:
        pg_loss: the policy-gradient part of the loss.
        kl: mean k3 KL per masked token (0 without a reference).
        clip_frac: fraction of masked tokens where the clipped term was the active one (no gradient).
        ratio_mean: mean ratio over masked tokens.
        tokens: number of masked tokens.
    """

    pg_loss: float
    kl: float
    clip_frac: float
    ratio_mean: float
    tokens: int


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi || pi_ref) per token (Schulman 2020): exp(d) - d - 1 with d = ref - logp.

    Args: (B, T) each. Returns: (B, T), >= 0, exact 0 where the two agree.
    """
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """Clipped policy-gradient loss with an optional k3 KL penalty (formulas in the module docstring).

    Args:
        logprobs: (B, T) log-probs of the sampled tokens under the current policy (with grad).
        old_logprobs: (B, T) log-probs recorded at sampling time (no grad).
        advantages: (B,) one advantage per sequence (its episode's).
        loss_mask: (B, T) 1 on sampled tokens, 0 elsewhere.
        clip_eps_low, clip_eps_high: clip range [1 - low, 1 + high].
        ref_logprobs: (B, T) log-probs under the frozen base model, for the KL term.
        kl_coef: beta; the KL term is only computed when > 0 and `ref_logprobs` is given.
        normalizer: divide the token sum by this; default the number of masked tokens.
    Returns:
        (scalar loss, LossStats).
    Raises:
        ValueError: mismatched shapes, or kl_coef > 0 without ref_logprobs.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != loss_mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"loss_mask {tuple(loss_mask.shape)} must all be (B, T)"
        )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,) = ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (log-probs under the base model)")
    mask = loss_mask.to(logprobs.dtype)
    tokens = float(mask.sum())
    denom = normalizer if normalizer is not None else max(tokens, 1.0)
    # masked positions may hold -inf/garbage: zero the difference there before exponentiating
    log_ratio = torch.where(loss_mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * adv
    pg = -torch.minimum(unclipped, clipped)
    per_token = pg
    kl_mean = 0.0
    if ref_logprobs is not None:
        ref = torch.where(loss_mask.bool(), ref_logprobs, logprobs.detach())
        kl = kl_k3(logprobs, ref)
        kl_mean = float((kl.detach() * mask).sum()) / max(tokens, 1.0)
        if kl_coef > 0:
            per_token = pg + kl_coef * kl
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        was_clipped = (clipped < unclipped).to(mask.dtype) * mask  # the clipped term was the active one
        stats = LossStats(
            pg_loss=float((pg.detach() * mask).sum()) / denom,
            kl=kl_mean,
            clip_frac=float(was_clipped.sum()) / max(tokens, 1.0),
            ratio_mean=float((ratio.detach() * mask).sum()) / max(tokens, 1.0),
            tokens=int(tokens),
        )
    return loss, stats
