"""RL on logged sessions: group rollouts on the shadow backend, outcome rewards, group-relative
advantages, a clipped policy-gradient loss on every sampled token (self-summaries included), LoRA.

Modules (importing this package imports none of them, nor torch):

    rl.advantages   group_advantages, advantages_for          GRPO / Dr. GRPO / RLOO baselines
    rl.loss         policy_loss, token_logprobs, kl_k3         the objective, shapes in docstrings
    rl.trajectory   trajectory_from_events, build_batch        PolicyTurn events -> (B, T) tensors + masks
    rl.rewards      REWARDS, RewardConfig, RolloutRecord,      named rewards and penalties
                    record_from_events, score_rollout
    rl.rollout      rollout_group, Rollout, rollout_seed       G forks of a session played by the agent
    rl.distributed  make_rollout_runner (in-process, Ray,      where rollouts run; data-parallel learner
                    OpenAI-compatible endpoint), all_reduce_grads
    rl.train        TrainConfig, train, learn                  `recap train`
    rl.evaluate     EvalConfig, evaluate                       `recap eval` (Wilson / bootstrap intervals)
    rl.tasks        make_tasks, mutations_of                   `recap tasks make --pypi` (SWE-smith-style bugs)
    rl.families     FAMILIES, make_family_tasks                `recap tasks make --family` (synthetic, graded)
    rl.data, rl.checkpoint, rl.metrics                         sessions cursor, checkpoints, metrics/plots
"""
