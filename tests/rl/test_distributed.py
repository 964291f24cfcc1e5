"""The scale paths: rollouts on Ray actors (a local 2-CPU Ray instance) and through an
OpenAI-compatible endpoint that receives each new LoRA adapter."""

from pathlib import Path


from rl.rewards import RewardConfig
from rl.train import TrainConfig, load_trainable_policy, train


def _cfg(sessions, out, **kw):
    base = dict(sessions_dir=str(sessions), model="tiny", constrain=True, out_dir=str(out), steps=1, group_size=2,
                max_episode_steps=1, max_new_tokens=12, max_context_tokens=1600, save_rollouts=False,
                rewards=RewardConfig(overlong="ignore"))
    base.update(kw)
    return TrainConfig(**base)


def test_ray_workers_play_the_same_rollouts_as_the_learner(task_sessions, tmp_path):
    import ray

    from harness.session import PolicyTurn
    from rl.data import load_starts
    from rl.distributed import InProcessRunner, RayRunner
    from rl.rollout import rollout_seed

    cfg = _cfg(task_sessions, tmp_path / "run", ray_address="local", ray_workers=2)
    starts = load_starts(task_sessions)
    seeds = [[rollout_seed(0, 0, s.session_id, g) for g in range(2)] for s in starts]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        policy = load_trainable_policy(cfg)
        runner = RayRunner(cfg, policy)
        try:
            remote = runner.run(starts, seeds)
        finally:
            runner.close()
    finally:
        ray.shutdown()
    local = InProcessRunner(cfg, policy).run(starts, seeds)

    def tokens(groups):
        return [[[e.completion_ids for e in r.events if isinstance(e, PolicyTurn)] for r in g] for g in groups]

    assert len(remote) == 2 and all(len(g) == 2 for g in remote)
    assert tokens(remote) == tokens(local)
    assert [[r.reward for r in g] for g in remote] == [[r.reward for r in g] for g in local]


def test_rollout_endpoint_samples_remotely_and_receives_each_adapter(task_sessions, tmp_path, fake_vllm):
    cfg = _cfg(task_sessions, tmp_path / "run", steps=2, group_size=4, max_episode_steps=2, max_context_tokens=None,
               rollout_endpoint=fake_vllm.url)
    steps = []
    train(cfg, on_step=lambda step, values: steps.append(values))
    log = fake_vllm.log
    loads = [d for path, d in log if path == "/v1/load_lora_adapter"]
    assert [d["lora_name"] for d in loads] == ["recap-step-1", "recap-step-2"]
    for d in loads:
        assert (Path(d["lora_path"]) / "adapter_config.json").is_file()
    models = [d["model"] for path, d in log if path == "/v1/chat/completions"]
    assert models[0] == "base-model" and "recap-step-1" in models
    assert [d["lora_name"] for path, d in log if path == "/v1/unload_lora_adapter"] == ["recap-step-1"]
    # the group has passing and failing rollouts, and the turns (ids from the server) were trained on
    first = steps[0]
    assert 0 < first["rollout/pass_rate"] < 1
    assert first["loss/tokens"] > 0 and first["rollout/turns_trained"] > 0
    assert first["rollout/turns_untrainable"] == 0  # every turn came with the server's token ids
