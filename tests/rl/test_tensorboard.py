"""TensorBoard mirror of the metrics: a short training run on `tiny` writes event files with the
same scalar tags (and values) as `metrics.jsonl`."""

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl.metrics import read_metrics
from rl.rewards import RewardConfig
from rl.train import TrainConfig, train


def test_training_run_writes_tensorboard_events_with_the_jsonl_tags(task_sessions, tmp_path):
    cfg = TrainConfig(
        sessions_dir=str(task_sessions), model="tiny", constrain=True, out_dir=str(tmp_path / "run"), steps=2,
        group_size=2, max_episode_steps=1, max_new_tokens=12, max_context_tokens=1600, save_rollouts=False,
        rewards=RewardConfig(overlong="ignore"),
    )
    train(cfg)
    out = tmp_path / "run"
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    numeric = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert {"rollout/reward_mean", "rollout/tokens_sampled", "time/rollout_s"} <= numeric

    events = list((out / "tb").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == numeric
    for tag in numeric:
        logged = {e.step: e.value for e in acc.Scalars(tag)}
        expected = {r["step"]: float(r[tag]) for r in rows if isinstance(r.get(tag), (int, float))}
        assert logged.keys() == expected.keys()
        assert all(abs(logged[s] - expected[s]) <= 1e-5 * max(1.0, abs(expected[s])) for s in expected)
