"""Fresh rollouts from a session's start state (what RL calls): forks, scoring, session files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.policies.scripted import ScriptedPolicy
from harness.session import Score, read_session
from shadow_backend.mine import mine_sessions
from shadow_backend.replay import sample_rollouts
from shadow_support import commit, git, make_repo

FIX = [
    {"tool_calls": [{"name": "edit_file", "arguments": {
        "path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"message": "fixed"}}]},
]
GIVE_UP = [{"tool_calls": [{"name": "finish", "arguments": {"message": "no idea"}}]}]
VERIFY = "python3 -c 'from calc import add; assert add(2, 3) == 5'"


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session mined from a repository whose last commit fixed `add`, started before the fix."""
    root = tmp_path_factory.mktemp("hist")
    repo = make_repo(root / "calc", {"calc.py": "def add(a, b):\n    return a - b\n"})
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "add", "-A")
    commit(repo, "Fix add")
    (session,) = mine_sessions(repo, out_dir=root / "sessions", verify=VERIFY)
    return session.path


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_rollouts_are_scored_and_logged(mined: Path, tmp_path: Path, backend: str) -> None:
    scripts = iter([FIX, GIVE_UP])
    rollouts = sample_rollouts(mined, lambda: ScriptedPolicy(next(scripts)), n=2, backend=backend, out_dir=tmp_path)
    good, bad = rollouts
    assert (good.index, bad.index) == (0, 1)
    assert good.stop_reason == bad.stop_reason == "finish"
    assert good.score["verify_passed"] is True and good.score["diff_similarity"] == 1.0
    assert bad.score["verify_passed"] is False and bad.score["diff_similarity"] == 0.0
    assert bad.diff == ""
    for rollout in rollouts:
        session = read_session(rollout.session_path)
        assert session.start.source == "rollout"
        assert session.start.meta["rollout_of"] == read_session(mined).start.session_id
        assert isinstance(session.events[-1], Score)
        assert session.events[-1].verify_passed is rollout.score["verify_passed"]


def test_cli_samples_with_a_scripted_model(mined: Path, tmp_path: Path) -> None:
    from recap.cmd_backend import register

    script = tmp_path / "fix.json"
    script.write_text(json.dumps(FIX))
    app = typer.Typer()
    register(app)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["replay", str(mined), "--model", f"scripted:{script}", "--samples", "2",
                                      "--out", str(tmp_path / "rollouts"), "--report", str(report)])
    assert result.exit_code == 0, result.output
    rows = json.loads(report.read_text())
    assert [r["score"]["verify_passed"] for r in rows] == [True, True]
    assert len(list((tmp_path / "rollouts").glob("*.jsonl"))) == 2
