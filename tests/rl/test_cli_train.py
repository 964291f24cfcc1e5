"""`recap train` end to end on the tiny model (in-process rollouts with the real agent on shadow
workspaces), then `recap plot` and `recap eval --adapter` on its output."""

import json

from typer.testing import CliRunner

from recap.cli import app


def test_train_then_plot_then_eval(task_sessions, tmp_path):
    out = tmp_path / "run"
    runner = CliRunner()
    args = ["--model", "tiny", "--max-episode-steps", "1", "--max-new-tokens", "8", "--context-window", "1600"]
    result = runner.invoke(app, ["train", "--sessions", str(task_sessions), "--steps", "1", "--group", "2",
                                 "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    assert "step 1/1" in result.output
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["rollout/episodes"] == 2.0
    assert {"reward/verify_pass", "loss/tokens", "time/rollout_s", "rollout/tokens_sampled"} <= set(row)
    assert row["reward/verify_pass"] == 0.0  # the noise model does not fix the bug
    sessions = sorted((out / "rollouts" / "step-000001").glob("*.jsonl"))
    assert len(sessions) == 2
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-000001"
    assert (out / "adapter" / "adapter_config.json").is_file()

    result = runner.invoke(app, ["plot", str(out)])
    assert result.exit_code == 0 and (out / "plots" / "reward.png").is_file()

    result = runner.invoke(app, ["eval", "--sessions", str(task_sessions), "--adapter", str(out / "adapter"),
                                 "--out", str(tmp_path / "eval"), *args])
    assert result.exit_code == 0, result.output
    assert "pass rate 0.000 (95% Wilson CI 0.000-0.658, 2 verified)" in result.output
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report["episodes"] == 2 and report["adapter"] == str(out / "adapter")


def test_train_and_eval_on_an_empty_folder_say_why_without_a_traceback(tmp_path):
    runner = CliRunner()
    for command in ("train", "eval"):
        result = runner.invoke(app, [command, "--sessions", str(tmp_path), "--model", "tiny"])
        assert result.exit_code == 2, result.output
        text = " ".join(result.output.split())  # rich wraps long lines
        assert f"error: no session files (*.jsonl) in {tmp_path}" in text
        assert "Traceback" not in result.output
