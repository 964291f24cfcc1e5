"""`recap eval`: score a policy (optionally with a LoRA adapter) on held-out sessions.

Each session is played `samples` times from its start state (fixed seeds, so base and trained
policies see the same sampling noise stream) with the editor's agent, and scored with the training
rewards. Reported: the pass rate of the verify command with a Wilson score interval (Wilson 1927;
good at small n and rates near 0 or 1) and the mean total reward with a percentile bootstrap
interval (Efron 1979).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness.errors import ConfigError
from rl.rewards import RewardConfig


def wilson_interval(successes: int, n: int, *, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) for n = 0.

    Args: successes <= n, z the normal quantile (1.96 for 95%). Returns (low, high) in [0, 1].
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(values: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; (nan, nan) for no values."""
    if not values:
        return math.nan, math.nan
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choice(values) for _ in range(n)) / n for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


@dataclass(frozen=True)
class EvalConfig:
    """Options of `recap eval` (the agent settings should match training's).

    Attributes:
        sessions_dir: the held-out sessions.
        model: policy spec; adapter: a LoRA adapter folder or None.
        samples: rollouts per session; temperature, seed: sampling.
        max_episode_steps, max_new_tokens, max_context_tokens: as in `TrainConfig`.
        verify_timeout_s: timeout of each verify command.
        constrain: grammar-constrained tool calls (None: the model's default).
        out: where to write the JSON report and the rollout sessions (None: nowhere).
        backend: the shadow backend rollouts run on ("local" or "docker").
        setup: the project environment's set-up command instead of each session's ("none": none;
            None: as each session recorded).
    """

    sessions_dir: str
    model: str = "embedded"
    adapter: str | None = None
    samples: int = 1
    temperature: float = 1.0
    seed: int = 1234
    max_episode_steps: int = 6
    max_new_tokens: int = 96
    max_context_tokens: int | None = None
    verify_timeout_s: float = 120.0
    constrain: bool | None = None
    rewards: RewardConfig = field(default_factory=RewardConfig)
    out: str | None = None
    backend: str = "local"
    setup: str | None = None

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ConfigError("eval.samples must be >= 1")


@dataclass(frozen=True)
class EvalReport:
    """Results of an evaluation.

    Attributes:
        episodes: rollouts scored; verified: those with a verify result.
        pass_rate, pass_ci: verify pass rate and its 95% Wilson interval (None without verify).
        mean_reward, reward_ci: mean total reward (masked episodes excluded) and 95% bootstrap interval.
        rewards: mean of each reward over the episodes where it applies.
        per_session: session id -> list of (total reward, verify passed) per sample.
        duration_s: wall-clock seconds.
    """

    model: str
    adapter: str | None
    episodes: int
    verified: int
    pass_rate: float | None
    pass_ci: tuple[float, float] | None
    mean_reward: float | None
    reward_ci: tuple[float, float] | None
    rewards: dict[str, float | None]
    per_session: dict[str, list[tuple[float | None, bool | None]]]
    duration_s: float


def evaluate(cfg: EvalConfig, *, policy: Any = None) -> EvalReport:
    """Play and score every held-out session `cfg.samples` times. Raises ConfigError on bad input.

    Args:
        cfg: what to evaluate and how.
        policy: an already loaded policy to score (e.g. the one being trained); None loads
            `cfg.model` with `cfg.adapter`.
    """
    from harness.policies import load_policy
    from rl.data import load_starts
    from rl.rollout import episode_config, rollout_group, rollout_seed

    started = time.monotonic()
    starts = load_starts(cfg.sessions_dir)
    if policy is None:
        policy = load_policy(cfg.model, seed=cfg.seed, temperature=cfg.temperature, top_p=1.0,
                             constrain=cfg.constrain, adapter=cfg.adapter, context_window=cfg.max_context_tokens)
    agent_config = episode_config(max_episode_steps=cfg.max_episode_steps, max_new_tokens=cfg.max_new_tokens)
    log_dir = Path(cfg.out) / "rollouts" if cfg.out else None
    rollouts = []
    for start in starts:
        seeds = [rollout_seed(cfg.seed, 0, start.session_id, i) for i in range(cfg.samples)]
        rollouts.extend(rollout_group(
            policy, start, group_size=cfg.samples, seeds=seeds, agent_config=agent_config,
            reward_config=cfg.rewards, verify_timeout_s=cfg.verify_timeout_s, log_dir=log_dir, adapter_id=cfg.adapter,
            backend=cfg.backend, setup=cfg.setup,
        ))
    verified = [r.record.verify_passed for r in rollouts if r.record.verify_passed is not None]
    totals = [r.reward for r in rollouts if r.reward is not None]
    names = sorted({k for r in rollouts for k in r.rewards})
    parts = {}
    for name in names:
        values = [r.rewards[name] for r in rollouts if r.rewards.get(name) is not None]
        parts[name] = sum(values) / len(values) if values else None
    per_session: dict[str, list[tuple[float | None, bool | None]]] = {}
    for r in rollouts:
        per_session.setdefault(r.session_id, []).append((r.reward, r.record.verify_passed))
    report = EvalReport(
        model=cfg.model, adapter=cfg.adapter, episodes=len(rollouts), verified=len(verified),
        pass_rate=sum(verified) / len(verified) if verified else None,
        pass_ci=wilson_interval(sum(verified), len(verified)) if verified else None,
        mean_reward=sum(totals) / len(totals) if totals else None,
        reward_ci=bootstrap_interval(totals) if totals else None,
        rewards=parts, per_session=per_session, duration_s=time.monotonic() - started,
    )
    if cfg.out:
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out) / "eval.json").write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return report


def report_lines(report: EvalReport) -> list[str]:
    """Human-readable summary lines."""
    def fmt(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    lines = [f"model {report.model}" + (f" + adapter {report.adapter}" if report.adapter else ""),
             f"episodes {report.episodes} ({len(report.per_session)} sessions), {report.duration_s:.0f} s"]
    if report.pass_ci is not None:
        lines.append(f"pass rate {fmt(report.pass_rate)} (95% Wilson CI {fmt(report.pass_ci[0])}-{fmt(report.pass_ci[1])}, "
                     f"{report.verified} verified)")
    if report.reward_ci is not None:
        lines.append(f"mean reward {fmt(report.mean_reward)} (95% bootstrap CI {fmt(report.reward_ci[0])} to {fmt(report.reward_ci[1])})")
    lines.append("rewards: " + ", ".join(f"{k}={fmt(v)}" for k, v in report.rewards.items()))
    return lines
