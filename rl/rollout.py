"""Group rollouts: one session's start state, forked G times, each fork played by the policy.

A rollout uses exactly the agent the editor uses (`harness.agent.Agent`: same tools, prompts,
context manager and self-summaries) on a shadow workspace (`shadow_backend.local.LocalBackend`),
then scores the final workspace (the session's `verify` command, or the diff's similarity to the
reference diff) and computes the rewards of `rl.rewards`. With a policy that generates in batches
(`TransformersPolicy`) the group's episodes run in threads that share one batched forward pass per
step (`harness.policies.batching`); other policies (scripted, OpenAI-compatible) play one fork after
the other. With Ray, groups run in parallel on several workers (`rl.distributed`).
"""

from __future__ import annotations

import functools
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.session import Score, SessionStart, SessionWriter
from harness.workspace import WorkspaceOrigin
from rl.rewards import RewardConfig, RolloutRecord, record_from_events, score_rollout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rollout:
    """One scored rollout.

    Attributes:
        session_id: the source session.
        index: position in its group (0..G-1).
        events: the rollout's session events (policy turns with token ids, observations, final).
        record: what the rewards saw.
        reward: weighted total, or None when masked out (overlong filtering).
        rewards: every reward by name (None where not applicable).
        verify_output: tail of the verify command's output (for debugging), "" when not run.
    """

    session_id: str
    index: int
    events: tuple[Any, ...]
    record: RolloutRecord
    reward: float | None
    rewards: dict[str, float | None]
    verify_output: str = ""


def rollout_seed(seed: int, step: int, session_id: str, index: int) -> int:
    """A deterministic sampling seed per (run seed, step, session, group index): rollouts replay
    exactly on resume and do not depend on which worker plays them."""
    return zlib.crc32(f"{seed}:{step}:{session_id}:{index}".encode()) & 0x7FFFFFFF


def episode_config(*, max_episode_steps: int, max_new_tokens: int) -> RecapConfig:
    """The agent/context configuration of rollouts: the editor's defaults, with the episode's step
    limit and completion budget (summary turns get the same budget)."""
    return RecapConfig(
        agent=AgentConfig(max_steps=max_episode_steps, max_new_tokens=max_new_tokens, summary_max_new_tokens=max_new_tokens),
        context=ContextConfig(),
    )


def origin_of(start: SessionStart) -> WorkspaceOrigin:
    """The workspace origin recorded in a session's start event."""
    from shadow_backend.replay import environment_of

    return WorkspaceOrigin(
        repo=start.repo, base_commit=start.base_commit, base_diff=start.base_diff, buffers=dict(start.buffers),
        env=environment_of(start.env),
    )


def rollout_group(
    policy: Any,
    start: SessionStart,
    *,
    group_size: int,
    seeds: Sequence[int],
    agent_config: RecapConfig,
    reward_config: RewardConfig,
    verify_timeout_s: float = 300.0,
    log_dir: str | Path | None = None,
    adapter_id: str | None = None,
    batched: bool = True,
    backend: str = "local",
    setup: str | None = None,
) -> list[Rollout]:
    """Play `group_size` rollouts of one session and score them.

    Args:
        policy: a `harness.types.Policy`; sampled with one seed of `seeds` per rollout.
        start: the session's `session_start` event (task, origin, verify, reference diff).
        group_size: G forks of the start state.
        seeds: G sampling seeds (see `rollout_seed`).
        agent_config: the agent and context-manager configuration (the editor's).
        reward_config: reward weights and switches.
        verify_timeout_s: timeout of the verify command (seconds).
        log_dir: where to write each rollout's session file (None: keep in memory only).
        adapter_id: recorded in the rollout sessions.
        batched: when the policy has `generate_batch` (`TransformersPolicy`), play the G episodes
            in G threads on one `harness.policies.batching.BatchingPolicy`, so each step of the
            group is one batched forward pass; each episode samples with its own generator seeded
            from `seeds`. Otherwise (or False) one episode after the other, the policy reseeded.
        backend: the shadow backend ("local" or "docker").
        setup: the project environment's set-up command instead of the one the session recorded
            ("none": no environment; None: as recorded).
    Returns:
        G `Rollout`s in fork order.
    Raises:
        WorkspaceError: the start state cannot be rebuilt.
    """
    from shadow_backend.backends import rebuild_backend
    from shadow_backend.replay import with_setup

    if len(seeds) != group_size:
        raise ValueError(f"{len(seeds)} seeds for a group of {group_size}")
    play = functools.partial(
        _play, start=start, agent_config=agent_config, reward_config=reward_config,
        verify_timeout_s=verify_timeout_s, log_dir=log_dir, adapter_id=adapter_id,
    )
    base = rebuild_backend(backend, with_setup(origin_of(start), setup))
    try:
        forks = base.fork(group_size)
        try:
            if batched and hasattr(policy, "generate_batch"):
                from harness.policies.batching import BatchingPolicy

                batcher = BatchingPolicy(policy)
                lanes = [batcher.lane(seed) for seed in seeds]  # all open before any turn: full batches

                def play_lane(index: int) -> Rollout:
                    with lanes[index] as lane:
                        return play(lane, index=index, workspace=forks[index], seed=seeds[index])

                with ThreadPoolExecutor(max_workers=group_size, thread_name_prefix="rollout") as pool:
                    return list(pool.map(play_lane, range(group_size)))
            rollouts = []
            for index, (workspace, seed) in enumerate(zip(forks, seeds)):
                if hasattr(policy, "reseed"):
                    policy.reseed(seed)
                    policy.reset_cache()
                rollouts.append(play(policy, index=index, workspace=workspace, seed=seed))
            return rollouts
        finally:
            for workspace in forks:
                workspace.close()
    finally:
        base.close()


def _play(
    policy: Any, *, index: int, workspace: Any, seed: int, start: SessionStart, agent_config: RecapConfig,
    reward_config: RewardConfig, verify_timeout_s: float, log_dir: str | Path | None, adapter_id: str | None,
) -> Rollout:
    """One episode of the group in its fork, scored."""
    from harness.agent import Agent
    from shadow_backend import scoring

    path = Path(log_dir) / f"{start.session_id}-{seed}.jsonl" if log_dir is not None else None
    writer = SessionWriter(path)
    try:
        result = Agent(policy=policy, workspace=workspace, config=agent_config, log=writer).run(
            start.task,
            origin=getattr(workspace, "origin", None) or origin_of(start),
            source="rollout",
            verify=start.verify,
            reference_diff=start.reference_diff,
            test_patch=start.test_patch,
            adapter_id=adapter_id,
            meta={"from_session": start.session_id, "group_index": index, "seed": seed},
        )
        # verify runs after the final diff was taken (tests leave caches behind)
        score = scoring.score_workspace(
            workspace, diff=result.diff, verify=start.verify, reference_diff=start.reference_diff,
            timeout_s=verify_timeout_s, test_patch=start.test_patch,
        )
        record = record_from_events(writer.events, **{
            k: score.get(k) for k in ("verify_passed", "tests_passed", "tests_failed", "diff_similarity")
        })
        total, parts = score_rollout(record, reward_config)
        writer.emit(Score, **score, rewards={**parts, "total": total})
    finally:
        writer.close()
    return Rollout(
        session_id=start.session_id, index=index, events=tuple(writer.events), record=record,
        reward=total, rewards=parts, verify_output=str(score.get("verify_output", ""))[-2000:],
    )
