"""Progress signals of a training run (issue 17.1 and 17.4): steps whose groups carry no
group-relative signal are counted and warned about, and held-out sessions are scored during
training (per-token entropy: tests/rl/test_learner.py)."""

import logging

from rl.metrics import plot_run, read_metrics
from rl.rewards import RewardConfig
from rl.train import NO_SIGNAL_WARN_AFTER, TrainConfig, groups_with_signal, train


def test_groups_with_signal_counts_groups_with_any_nonzero_advantage():
    assert groups_with_signal([0.0, 0.0, 0.5, -0.5, 0.0, 0.0], 2) == (1, 3)
    assert groups_with_signal([0.0] * 4, 4) == (0, 1)


def test_a_run_without_signal_warns_and_evaluates_held_out_sessions(task_sessions, tmp_path, caplog):
    # every reward weight 0: all rollouts of a group score the same, so no step can learn anything
    cfg = TrainConfig(
        sessions_dir=str(task_sessions), model="tiny", constrain=True, out_dir=str(tmp_path / "run"),
        steps=NO_SIGNAL_WARN_AFTER, group_size=2, max_episode_steps=1, max_new_tokens=12, max_context_tokens=1600,
        save_rollouts=False, rewards=RewardConfig(weights={}, overlong="ignore"),
        eval_sessions=str(task_sessions), eval_every=2,
    )
    with caplog.at_level(logging.WARNING, logger="rl.train"):
        train(cfg)
    rows = read_metrics(tmp_path / "run")
    assert [r["rollout/groups_with_signal"] for r in rows] == [0.0] * NO_SIGNAL_WARN_AFTER
    assert [r["rollout/steps_without_signal"] for r in rows] == [float(i + 1) for i in range(NO_SIGNAL_WARN_AFTER)]
    assert [r["loss/tokens"] for r in rows] == [0.0] * NO_SIGNAL_WARN_AFTER
    warnings = [r.getMessage() for r in caplog.records if "no group had a nonzero advantage" in r.getMessage()]
    assert len(warnings) == 1 and f"for {NO_SIGNAL_WARN_AFTER} steps" in warnings[0]
    # held-out scoring at every 2nd step and after the last, with a Wilson interval around the rate
    evaluated = [r["step"] for r in rows if "eval/pass_rate" in r]
    assert evaluated == sorted({s for s in range(1, NO_SIGNAL_WARN_AFTER + 1) if s % 2 == 0} | {NO_SIGNAL_WARN_AFTER})
    for r in rows:
        if "eval/pass_rate" in r:
            assert r["eval/pass_ci_low"] <= r["eval/pass_rate"] <= r["eval/pass_ci_high"]
            assert r["eval/episodes"] > 0
    assert (tmp_path / "run" / "plots" / "eval.png") in plot_run(tmp_path / "run")
