"""A group played on one batched policy (`BatchingPolicy` over `TransformersPolicy.generate_batch`)
against the sequential path: G complete episodes, fewer model forward calls, trainable turns."""

import time

from harness.policies import load_policy
from harness.session import Final, PolicyTurn
from rl.data import load_starts
from rl.rewards import RewardConfig
from rl.rollout import episode_config, rollout_group, rollout_seed

GROUP = 4


def play(start, *, batched: bool):
    policy = load_policy("tiny", seed=0, temperature=1.0, constrain=True, context_window=1600)
    calls = [0]
    policy.model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    began = time.monotonic()
    rollouts = rollout_group(
        policy, start, group_size=GROUP, seeds=[rollout_seed(0, 0, start.session_id, g) for g in range(GROUP)],
        agent_config=episode_config(max_episode_steps=3, max_new_tokens=24),
        reward_config=RewardConfig(overlong="ignore"), batched=batched,
    )
    return rollouts, calls[0], time.monotonic() - began


def test_batched_group_plays_every_episode_in_fewer_forward_calls(task_sessions):
    start = load_starts(task_sessions)[0]
    sequential, seq_calls, seq_s = play(start, batched=False)
    batched, batch_calls, batch_s = play(start, batched=True)
    print(f"group of {GROUP} on tiny: sequential {seq_calls} forwards {seq_s:.2f}s, batched {batch_calls} forwards {batch_s:.2f}s")
    assert [r.index for r in batched] == list(range(GROUP))
    for rollout in batched:
        final = [e for e in rollout.events if isinstance(e, Final)]
        turns = [e for e in rollout.events if isinstance(e, PolicyTurn)]
        assert len(final) == 1 and turns and rollout.record.steps == len(turns)
        for turn in turns:  # what the learner needs: exact ids with one logprob per sampled token
            assert turn.prompt_ids and len(turn.completion_ids) == len(turn.logprobs) > 0
        assert set(rollout.rewards) == set(sequential[0].rewards)
    assert sum(len([e for e in r.events if isinstance(e, PolicyTurn)]) for r in batched) >= GROUP
    assert batch_calls < seq_calls
    # the same seeds replay the same batched group (batches wait for every open episode)
    again, _, _ = play(start, batched=True)
    assert sampled(again) == sampled(batched)


def sampled(rollouts):
    return [[e.completion_ids for e in r.events if isinstance(e, PolicyTurn)] for r in rollouts]
