
import pytest

from harness.errors import ConfigError, SessionFormatError
from rl.data import SessionCursor, load_starts, split_sessions
from rl.evaluate import bootstrap_interval, wilson_interval
from rl.metrics import MetricsWriter, plot_run, read_metrics


def test_cursor_covers_each_epoch_and_round_trips():
    cursor = SessionCursor(size=5, seed=7)
    first = cursor.next(3) + cursor.next(2)
    assert sorted(first) == [0, 1, 2, 3, 4]
    state = cursor.state()
    ahead = cursor.next(4)
    again = SessionCursor.from_state(state, size=5, seed=7)
    assert again.next(4) == ahead
    assert SessionCursor(size=5, seed=8).next(5) != first or SessionCursor(size=5, seed=9).next(5) != first
    wrap = SessionCursor(size=3, seed=0)
    assert len(wrap.next(7)) == 7 and wrap.epoch == 2


def test_split_is_seeded_and_disjoint(task_sessions, tmp_path):
    train, held = split_sessions([task_sessions], out=tmp_path / "split", held_out=0.5, seed=1)
    assert len(train) == 1 and len(held) == 1 and train[0].name != held[0].name
    assert len(load_starts(tmp_path / "split" / "train")) == 1
    with pytest.raises(ConfigError, match="between 0 and 1"):
        split_sessions([task_sessions], out=tmp_path / "x", held_out=1.0)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.jsonl").write_text('{"type": "nope"}\n')
    (bad / "b.jsonl").write_text('{"type": "nope"}\n')
    with pytest.raises(SessionFormatError):
        split_sessions([bad], out=tmp_path / "y", held_out=0.5)
    assert not (tmp_path / "y").exists()  # refused before copying anything
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no session files"):
        load_starts(tmp_path / "empty")


def test_metrics_jsonl_and_plots(tmp_path):
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        writer.write(step, {"rollout/reward_mean": 0.1 * step, "loss/loss": 1.0 / step, "rollout/pass_rate": None,
                            "time/step_s": float("nan")})
    writer.close()
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "loss/lo')  # a torn last line
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[0]["time/step_s"] is None
    paths = plot_run(tmp_path)
    assert sorted(p.name for p in paths) == ["loss.png", "rollout.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_wilson_and_bootstrap_intervals():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-3)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = bootstrap_interval([1.0, 2.0, 3.0, 4.0])
    assert 1.0 <= lo < 2.5 < hi <= 4.0
    assert bootstrap_interval([2.0, 2.0]) == (2.0, 2.0)


def test_plot_command_writes_pngs(tmp_path):
    from typer.testing import CliRunner

    from recap.cli import app

    MetricsWriter(tmp_path, tensorboard=False).write(1, {"reward/verify_pass": 0.5})
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plots" / "reward.png").is_file()
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "missing")])
    assert result.exit_code != 0 and "no metrics.jsonl" in result.output


def test_an_accepted_editor_change_is_the_reference_of_its_training_start(tmp_path):
    from harness.session import Final, SessionStart, SessionWriter, Verdict

    diff = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a - b\n+a + b\n"

    def editor_session(name, *verdicts, verify=None):
        w = SessionWriter(tmp_path / "s" / f"{name}.jsonl")
        w.emit(SessionStart, schema_version=1, session_id=name, repo="/r", task="fix add", model="m", source="lsp",
               verify=verify)
        w.emit(Final, stop_reason="finish", diff=diff, steps=1, summaries=0)
        for v in verdicts:
            w.emit(Verdict, verdict=v)
        w.close()

    editor_session("a-accepted", "accepted")
    editor_session("b-kept", "accepted", "kept")
    editor_session("c-reverted", "accepted", "reverted")
    editor_session("d-rejected", "rejected")
    editor_session("e-verified", "accepted", verify="pytest -q")  # its verify is the better signal
    editor_session("f-no-verdict")
    refs = {s.session_id: s.reference_diff for s in load_starts(tmp_path / "s")}
    assert refs == {"a-accepted": diff, "b-kept": diff, "c-reverted": None, "d-rejected": None,
                    "e-verified": None, "f-no-verdict": None}
