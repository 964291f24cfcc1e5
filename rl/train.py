"""`recap train`: GRPO-style RL of a LoRA adapter on logged or mined sessions. Reads top to bottom:

    config -> model + LoRA -> data -> loop (rollouts -> rewards -> advantages -> loss -> step) -> checkpoint

Each step draws `sessions_per_step` sessions, rebuilds each start state on the shadow backend,
forks it `group_size` times and lets the current policy play every fork with the editor's own
agent (`rl.rollout`). The rollouts are scored (`rl.rewards`), advantages are taken within each
group (`rl.advantages`), and every sampled token (actions and self-summaries) gets the clipped
policy-gradient loss of `rl.loss` with its episode's advantage. Constrained turns are re-scored
under the grammar masks they were sampled with; logits are divided by the sampling temperature,
so the ratio compares the same distributions. Gradients are accumulated over micro-batches of
turns, normalised by the token count of the whole batch. On CUDA the forward runs in bf16 autocast
(fp32 master weights); on CPU in fp32.

Multi-GPU learner: launch the same command through accelerate, e.g.
`accelerate launch --num_processes 4 -m recap.cli train --sessions DIR --sessions-per-step 8 ...`;
each process plays its share of the step's groups on its own GPU, gradients are summed across
processes before the optimizer step (`rl.distributed.all_reduce_grads`), and rank 0 writes the
metrics and checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from harness.config import RecapConfig
from harness.errors import ConfigError
from rl.advantages import ADVANTAGE_KINDS, AdvantageKind, advantages_for
from rl.rewards import REWARDS, RewardConfig

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a training run (recorded in each checkpoint and in `OUT/config.json`).

    Attributes:
        sessions_dir: folder of session files to train on (`*.jsonl`, searched recursively).
        model: policy spec for `harness.policies.load_policy` ("embedded", "tiny", "hf:PATH").
        out_dir: run folder (metrics, checkpoints, rollout sessions, final adapter).
        steps: optimizer steps in the whole run (a resumed run counts the steps already done).
        group_size: G, rollouts per session (forks of its start state).
        sessions_per_step: N, groups per step; a step trains on N * G rollouts.
        learning_rate: AdamW peak learning rate.
        warmup_steps: linear warm-up steps, then constant.
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient clipping (L2 norm).
        micro_batch_turns: policy turns per forward/backward (gradient accumulation; the gradient
            is the same for any value, memory grows with it).
        activation_checkpointing: recompute each layer's activations in the backward pass instead
            of keeping them (transformers' gradient checkpointing): memory of about one layer's
            activations instead of all of them, for about one more forward of compute.
        lora_rank, lora_alpha, lora_dropout, lora_target_modules: the LoRA adapter (peft).
        advantage: "dr_grpo" (default), "grpo" or "rloo" (`rl.advantages`).
        clip_eps_low, clip_eps_high: PPO clip range [1 - low, 1 + high].
        kl_coef: weight of the k3 KL penalty to the base model (0 disables it and its forward).
        temperature: sampling temperature of rollouts (also divides logits when re-scoring).
        constrain: grammar-constrained tool calls (None: the model's default, on for "embedded").
        max_episode_steps: agent action turns per rollout.
        max_new_tokens: completion budget per action turn (tokens).
        max_context_tokens: cap on the policy's context window (None: the model's own). The tool
            specs alone take ~1,800 tokens; a small cap forces self-summaries and the hard limit.
        verify_timeout_s: timeout of each verify command (seconds).
        backend: the shadow backend rollouts run on ("local" or "docker").
        setup: the project environment's set-up command instead of each session's ("none": none;
            None: as each session recorded).
        checkpoint_every: write a checkpoint every K steps (and at the end).
        seed: seeds the data order, the sampling seeds of rollouts and the torch/python RNGs.
        rewards: reward weights and switches.
        save_rollouts: keep every rollout's session file under `OUT/rollouts/step-N/`.
        ray_address: run rollouts on Ray actors ("auto", "local" or an address); None: in-process.
        ray_workers: number of rollout actors with Ray.
        rollout_endpoint: sample through an OpenAI-compatible server at this URL and push each new
            adapter to it (vLLM `/v1/load_lora_adapter`).
        eval_sessions: held-out sessions scored during training (`eval/*` metrics); None: no eval.
        eval_every: score `eval_sessions` every K steps (and after the last step).
        eval_samples: rollouts per held-out session at each evaluation (same seeds every time).
    """

    sessions_dir: str
    model: str = "embedded"
    out_dir: str = "runs/recap-train"
    steps: int = 10
    group_size: int = 4
    sessions_per_step: int = 1
    learning_rate: float = 1e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_turns: int = 1
    activation_checkpointing: bool = True
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    advantage: AdvantageKind = "dr_grpo"
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    kl_coef: float = 0.0
    temperature: float = 1.0
    constrain: bool | None = None
    max_episode_steps: int = 6
    max_new_tokens: int = 96
    max_context_tokens: int | None = None
    verify_timeout_s: float = 120.0
    backend: str = "local"
    setup: str | None = None
    checkpoint_every: int = 1
    seed: int = 0
    rewards: RewardConfig = field(default_factory=RewardConfig)
    save_rollouts: bool = True
    ray_address: str | None = None
    ray_workers: int = 2
    rollout_endpoint: str | None = None
    eval_sessions: str | None = None
    eval_every: int = 1
    eval_samples: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "group_size", "sessions_per_step", "micro_batch_turns", "lora_rank",
                     "max_episode_steps", "max_new_tokens", "checkpoint_every", "ray_workers", "eval_every", "eval_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.{name} must be an integer >= 1, got {value!r}")
        if self.group_size < 2:
            raise ConfigError("train.group_size must be >= 2: group-relative advantages need at least two rollouts")
        if self.advantage not in ADVANTAGE_KINDS:
            raise ConfigError(f"train.advantage must be one of {', '.join(ADVANTAGE_KINDS)}, got {self.advantage!r}")
        if not self.learning_rate > 0 or self.kl_coef < 0 or self.temperature <= 0:
            raise ConfigError("train.learning_rate and train.temperature must be > 0 and train.kl_coef >= 0")
        if not (0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0):
            raise ConfigError("train.clip_eps_low must be in [0, 1) and train.clip_eps_high >= 0")
        if self.ray_address is not None and self.rollout_endpoint is not None:
            raise ConfigError("choose --ray or --rollout-endpoint, not both")

    def agent_config(self) -> RecapConfig:
        """The agent/context configuration rollouts run with (the editor's defaults otherwise)."""
        from rl.rollout import episode_config

        return episode_config(max_episode_steps=self.max_episode_steps, max_new_tokens=self.max_new_tokens)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    def maths(self) -> dict[str, Any]:
        """`to_dict` without the settings that cannot change the trained weights (`RESUMABLE_CHANGES`):
        a resumed run must match its checkpoint here."""
        return {k: v for k, v in self.to_dict().items() if k not in RESUMABLE_CHANGES}


RESUMABLE_CHANGES = frozenset({
    "steps", "micro_batch_turns", "activation_checkpointing", "checkpoint_every", "save_rollouts",
    "eval_sessions", "eval_every", "eval_samples", "out_dir",
})
"""`TrainConfig` fields a resumed run may change: how many steps in all (the schedule is constant
after warm-up), how the gradient is accumulated and memory spent, what is saved and evaluated. E.g.
a run killed for memory resumes with `--micro-batch 1`."""


# ---------------------------------------------------------------------------------------------
# model + LoRA
# ---------------------------------------------------------------------------------------------
def load_trainable_policy(cfg: TrainConfig) -> Any:
    """The rollout policy with a fresh trainable LoRA adapter on its transformers model.

    Returns the `TransformersPolicy`; `policy.model` is the peft model (its LoRA weights are the
    only trainable parameters, `lora_dropout` defaults to 0 so that sampling and training see the
    same network).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    from harness.policies import load_policy

    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg.model, seed=cfg.seed, temperature=cfg.temperature, top_p=1.0,
                         constrain=cfg.constrain, context_window=cfg.max_context_tokens)
    if not hasattr(policy, "model"):
        raise ConfigError(f"--model {cfg.model!r} is not a local transformers model; training needs its weights")
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
    policy.model = get_peft_model(policy.model, lora)
    if cfg.activation_checkpointing:
        # active only in train mode (the learner's passes); sampling runs in eval mode with its KV cache
        policy.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return policy


def autocast(device: str) -> Any:
    """bf16 autocast on CUDA (when supported), a no-op context on CPU (fp32)."""
    import contextlib

    import torch

    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# the learner: loss over a batch of turns, one optimizer step
# ---------------------------------------------------------------------------------------------
class TurnScores(NamedTuple):
    """What `turn_logprobs` returns: (B, T) float32 log-probs, and (B, T) float32 entropies in nats
    of the distributions the tokens were drawn from (no gradient; None unless asked for)."""

    logprobs: Any
    entropy: Any


def turn_logprobs(policy: Any, batch: Any, *, tool_specs: Sequence[dict[str, dict[str, Any]]], temperature: float,
                  with_entropy: bool = False) -> TurnScores:
    """Log-probs of a batch's tokens under the current model, tempered like sampling, with
    constrained rows re-scored under the grammar masks they were sampled with.

    Args:
        policy: the `TransformersPolicy` (its `.model`, `.tokenizer`, grammar).
        batch: an `rl.trajectory.Batch`.
        tool_specs: per row, the offered tools' specs by name (to rebuild the grammar).
        temperature: the sampling temperature.
        with_entropy: also compute each position's entropy (same masks and temperature).
    Returns:
        `TurnScores`; positions that predict no sampled token hold 0 in both tensors.
    """
    import torch

    from rl.loss import token_entropy, token_logprobs

    device = next(policy.model.parameters()).device
    ids = batch.input_ids.to(device)
    # only the positions that predict sampled tokens need logits: from the shortest prompt's last
    # token on (a (B, K, V) tensor instead of (B, T, V); V is ~49k for SmolLM2)
    first = int(batch.prompt_lengths.min()) - 1
    keep = torch.arange(first, ids.shape[1] - 1, device=device)
    with autocast(str(device)):
        logits = policy.model(input_ids=ids, attention_mask=batch.attention_mask.to(device), logits_to_keep=keep).logits
    logits = logits.float() / temperature  # (B, K, V); column j predicts token first + j + 1
    out = torch.zeros(ids.shape, dtype=torch.float32, device=device)
    out[:, first + 1 :] = token_logprobs(logits, ids[:, first + 1 :])
    ent = torch.zeros(ids.shape, dtype=torch.float32, device=device) if with_entropy else None
    for row, turn in enumerate(batch.turns):
        p, c = int(batch.prompt_lengths[row]), len(turn.completion_ids)
        cols = slice(p - 1 - first, p + c - 1 - first)  # the logits that predict the completion
        allowed = None
        if turn.constrained:
            specs = [tool_specs[row][name] for name in turn.offered_tools if name in tool_specs[row]]
            allowed = policy.constrained_masks(specs, turn.completion_ids)[:, : logits.shape[-1]].to(device)
            out[row, p : p + c] = token_logprobs(logits[row, cols], ids[row, p : p + c], allowed=allowed)
        if ent is not None:
            ent[row, p : p + c] = token_entropy(logits[row, cols], allowed=allowed)
    return TurnScores(out, ent)


def learn(
    policy: Any,
    optimizer: Any,
    scheduler: Any,
    turns: Sequence[Any],
    advantages: Sequence[float],
    tool_specs: Sequence[dict[str, dict[str, Any]]],
    cfg: TrainConfig,
) -> dict[str, float]:
    """One optimizer step on `turns` (each with its episode advantage), accumulated over
    micro-batches of `cfg.micro_batch_turns`; with several processes, `turns` is this process's
    share and gradients are summed across processes. Returns `loss/*` metrics (whole step)."""
    import torch

    from rl.distributed import all_reduce_grads, all_reduce_sum
    from rl.loss import policy_loss
    from rl.trajectory import build_batch

    model = policy.model
    model.train()
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else policy.tokenizer.eos_token_id
    # the whole step's token count (all processes): accumulated gradients equal the full batch's
    total_tokens = all_reduce_sum(float(sum(len(t.completion_ids) for t in turns)))
    optimizer.zero_grad(set_to_none=True)
    sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0, "entropy": 0.0}
    for start in range(0, len(turns), cfg.micro_batch_turns):
        rows = slice(start, start + cfg.micro_batch_turns)
        batch = build_batch(turns[rows], advantages[rows], pad_id=pad)
        logp, entropy = turn_logprobs(policy, batch, tool_specs=tool_specs[rows], temperature=cfg.temperature,
                                      with_entropy=True)
        ref = None
        if cfg.kl_coef > 0:
            with torch.no_grad(), model.disable_adapter():
                ref = turn_logprobs(policy, batch, tool_specs=tool_specs[rows], temperature=cfg.temperature).logprobs
        device = logp.device
        sums["entropy"] += float((entropy * batch.loss_mask.to(device)).sum()) / max(total_tokens, 1.0)
        loss, stats = policy_loss(
            logp, batch.old_logprobs.to(device), batch.advantages.to(device), batch.loss_mask.to(device),
            clip_eps_low=cfg.clip_eps_low, clip_eps_high=cfg.clip_eps_high, ref_logprobs=ref,
            kl_coef=cfg.kl_coef, normalizer=total_tokens,
        )
        loss.backward()
        share = stats.tokens / max(total_tokens, 1.0)
        sums["loss"] += float(loss.detach())
        sums["pg_loss"] += stats.pg_loss
        for key in ("kl", "clip_frac", "ratio_mean"):
            sums[key] += getattr(stats, key) * share
    params = [p for p in model.parameters() if p.requires_grad]
    all_reduce_grads(params)
    for key in sums:
        sums[key] = all_reduce_sum(sums[key])
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    optimizer.step()
    scheduler.step()
    model.eval()
    return {f"loss/{k}": v for k, v in sums.items()} | {
        "loss/grad_norm": grad_norm, "loss/lr": float(scheduler.get_last_lr()[0]), "loss/tokens": total_tokens,
    }


def make_optimizer(model: Any, cfg: TrainConfig) -> tuple[Any, Any]:
    """AdamW over the LoRA parameters and a linear warm-up then constant schedule."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    warmup = max(cfg.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1)))
    return optimizer, scheduler


# ---------------------------------------------------------------------------------------------
# metrics of a step's rollouts
# ---------------------------------------------------------------------------------------------
def rollout_metrics(rollouts: Sequence[Any]) -> dict[str, float | None]:
    """`rollout/*` and `reward/*` means over a step's rollouts (None entries skipped)."""
    from harness.session import PolicyTurn

    def mean(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    totals = [r.reward for r in rollouts if r.reward is not None]
    mu = mean(totals)
    std = math.sqrt(sum((x - mu) ** 2 for x in totals) / len(totals)) if totals else None
    verified = [r.record.verify_passed for r in rollouts if r.record.verify_passed is not None]
    calls = sum(r.record.tool_calls for r in rollouts)
    out: dict[str, float | None] = {
        "rollout/episodes": float(len(rollouts)),
        "rollout/masked": float(sum(r.reward is None for r in rollouts)),
        "rollout/reward_mean": mu,
        "rollout/reward_std": std,
        "rollout/pass_rate": mean([float(v) for v in verified]),
        "rollout/tokens_sampled": float(sum(r.record.sampled_tokens for r in rollouts)),
        "rollout/steps_per_episode": mean([float(r.record.steps) for r in rollouts]),
        "rollout/summaries_per_episode": mean([float(r.record.summaries) for r in rollouts]),
        "rollout/tool_error_rate": sum(r.record.tool_errors for r in rollouts) / calls if calls else None,
        "rollout/summary_turns": float(sum(
            1 for r in rollouts for e in r.events if isinstance(e, PolicyTurn) and e.kind == "summary")),
    }
    for name in REWARDS:
        out[f"reward/{name}"] = mean([r.rewards[name] for r in rollouts if r.rewards.get(name) is not None])
    return out


def held_out_metrics(cfg: TrainConfig, policy: Any, *, out_dir: Path) -> dict[str, float | None]:
    """`eval/*` metrics: the current policy (adapter included) on `cfg.eval_sessions`, with the
    agent settings of training and fixed seeds, so successive evaluations differ only by the weights.
    Pass rate with its 95% Wilson interval and the mean reward (see `rl.evaluate`)."""
    from rl.evaluate import EvalConfig, evaluate

    report = evaluate(EvalConfig(
        sessions_dir=str(cfg.eval_sessions), model=cfg.model, samples=cfg.eval_samples, temperature=cfg.temperature,
        seed=cfg.seed, max_episode_steps=cfg.max_episode_steps, max_new_tokens=cfg.max_new_tokens,
        max_context_tokens=cfg.max_context_tokens, verify_timeout_s=cfg.verify_timeout_s, constrain=cfg.constrain,
        rewards=cfg.rewards, backend=cfg.backend, setup=cfg.setup, out=str(out_dir) if cfg.save_rollouts else None,
    ), policy=policy)
    low, high = report.pass_ci if report.pass_ci is not None else (None, None)
    return {"eval/pass_rate": report.pass_rate, "eval/pass_ci_low": low, "eval/pass_ci_high": high,
            "eval/mean_reward": report.mean_reward, "eval/episodes": float(report.episodes)}


NO_SIGNAL_WARN_AFTER = 3
"""Consecutive steps without any group-relative signal after which `train` warns."""


def groups_with_signal(advantages: Sequence[float], group_size: int) -> tuple[int, int]:
    """(groups with at least one nonzero advantage, groups) of a step's flat advantage list.

    A group whose rollouts all got the same reward (or were all masked) gives every episode
    advantage 0 and contributes no policy gradient."""
    groups = [advantages[i : i + group_size] for i in range(0, len(advantages), group_size)]
    return sum(any(a != 0.0 for a in g) for g in groups), len(groups)


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, *, resume: bool = False, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> Path:
    """Run (or resume) training; returns the folder of the final adapter (`OUT/adapter`).

    Args:
        cfg: the run's configuration.
        resume: continue from `OUT/checkpoints/latest` (same config required); a resumed run ends
            in the same state as an uninterrupted one.
        on_step: called after each step's metrics and checkpoint with (step, metrics).
    Raises:
        ConfigError: bad sessions folder, a non-trainable model, or `resume` without a checkpoint.
    """
    from rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, set_rng_state
    from rl.data import SessionCursor, load_starts
    from rl.distributed import gather_objects, init_process_group, make_rollout_runner, shard
    from rl.metrics import MetricsWriter
    from rl.rollout import rollout_seed
    from rl.trajectory import trajectory_from_events

    rank, world = init_process_group()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    # data (first: a bad session file is refused before the model loads)
    starts = load_starts(cfg.sessions_dir)

    # model + LoRA, optimizer
    policy = load_trainable_policy(cfg)
    optimizer, scheduler = make_optimizer(policy.model, cfg)

    cursor = SessionCursor(size=len(starts), seed=cfg.seed)
    step = steps_without_signal = 0
    if resume:
        folder = latest_checkpoint(out)
        if folder is None:
            raise ConfigError(f"--resume: no checkpoint in {out / 'checkpoints'}")
        state = load_checkpoint(folder, model=policy.model)
        saved = {k: v for k, v in state["config"].items() if k not in RESUMABLE_CHANGES}
        if saved != cfg.maths():
            changed = sorted(k for k in saved.keys() | cfg.maths().keys() if saved.get(k) != cfg.maths().get(k))
            raise ConfigError(f"--resume: {', '.join(changed)} differ from the checkpoint's ({folder / 'state.pt'}); "
                              f"only {', '.join(sorted(RESUMABLE_CHANGES))} may change on resume")
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        cursor = SessionCursor.from_state(state["cursor"], size=len(starts), seed=cfg.seed)
        set_rng_state(state["rng"])
        step = int(state["step"])
        steps_without_signal = int(state.get("steps_without_signal", 0))
        log.info("resumed from %s at step %d", folder, step)
    elif rank == 0:
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2), encoding="utf-8")
    metrics = MetricsWriter(out) if rank == 0 else None
    runner = make_rollout_runner(cfg, policy)

    # loop
    try:
        while step < cfg.steps:
            t0 = time.monotonic()
            # every process draws the same sessions and plays its share of the groups
            batch_starts = shard([starts[i] for i in cursor.next(cfg.sessions_per_step)], rank=rank, world=world)
            seeds = [[rollout_seed(cfg.seed, step, s.session_id, g) for g in range(cfg.group_size)] for s in batch_starts]
            log_dir = out / "rollouts" / f"step-{step + 1:06d}" if cfg.save_rollouts else None
            groups = runner.run(batch_starts, seeds, log_dir=log_dir, adapter_id=f"step-{step}") if batch_starts else []
            rollouts = [r for group in groups for r in group]
            t1 = time.monotonic()

            advantages = advantages_for([r.reward for r in rollouts], group_size=cfg.group_size, kind=cfg.advantage)
            signal = gather_objects([groups_with_signal(advantages, cfg.group_size)])
            signal_groups, all_groups = sum(g for g, _ in signal), sum(n for _, n in signal)
            steps_without_signal = 0 if signal_groups else steps_without_signal + 1
            if steps_without_signal >= NO_SIGNAL_WARN_AFTER and rank == 0:
                log.warning("step %d: no group had a nonzero advantage for %d steps in a row, so nothing is learned: "
                            "every group's rollouts scored the same (all failed, all passed, or masked). Try easier "
                            "sessions, a larger --group, a higher --temperature, or --overlong ignore.",
                            step + 1, steps_without_signal)
            turns, turn_adv, specs, untrainable = [], [], [], 0
            for rollout, adv in zip(rollouts, advantages):
                trajectory = trajectory_from_events(rollout.events)
                untrainable += trajectory.untrainable_turns
                if adv == 0.0 and cfg.kl_coef == 0:
                    continue  # no gradient from this episode
                by_name = {t["function"]["name"]: t for t in rollout.events[0].tools}
                for turn in trajectory.turns:
                    turns.append(turn)
                    turn_adv.append(adv)
                    specs.append(by_name)
            if gather_objects([len(turns)]) != [0] * world:
                loss_metrics = learn(policy, optimizer, scheduler, turns, turn_adv, specs, cfg)
            else:
                optimizer.zero_grad(set_to_none=True)
                optimizer.step()  # no gradients: changes nothing, keeps the schedule aligned with the step count
                scheduler.step()
                loss_metrics = {"loss/tokens": 0.0}
            step += 1
            runner.sync(policy, step=step, out_dir=out)
            t2 = time.monotonic()

            if rank == 0 and (step % cfg.checkpoint_every == 0 or step == cfg.steps):
                save_checkpoint(out, step=step, model=policy.model, state={
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "cursor": cursor.state(), "config": cfg.to_dict(), "steps_without_signal": steps_without_signal,
                })
            t3 = time.monotonic()
            evaluated = {}
            if rank == 0 and cfg.eval_sessions and (step % cfg.eval_every == 0 or step == cfg.steps):
                evaluated = held_out_metrics(cfg, policy, out_dir=out / "eval" / f"step-{step:06d}")
            values = rollout_metrics(gather_objects(rollouts)) | loss_metrics | evaluated | {
                "rollout/turns_trained": float(sum(gather_objects([len(turns)]))),
                "rollout/groups_with_signal": signal_groups / all_groups if all_groups else None,
                "rollout/steps_without_signal": float(steps_without_signal),
                "rollout/turns_untrainable": float(sum(gather_objects([untrainable]))),
                "time/rollout_s": t1 - t0, "time/learn_s": t2 - t1, "time/checkpoint_s": t3 - t2, "time/step_s": t3 - t0,
            }
            if metrics is not None:
                metrics.write(step, values)
            log.info("step %d: reward %.3f, loss %.4f", step, values["rollout/reward_mean"] or 0.0, values.get("loss/loss", 0.0))
            if on_step is not None:
                on_step(step, values)
    finally:
        if metrics is not None:
            metrics.close()
        runner.close()

    final = out / "adapter"
    if rank == 0:
        policy.model.save_pretrained(str(final))
    return final

