"""Mining sessions from git history: one per non-merge source commit, replayable start state."""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer
from typer.testing import CliRunner

from harness.session import read_session
from shadow_backend.local import LocalBackend
from shadow_backend.mine import mine_sessions
from shadow_backend.replay import origin_of
from shadow_support import commit, git, make_repo


def _history(root: Path) -> dict[str, str]:
    make_repo(root, {"calc.py": "def add(a, b):\n    return a - b\n", "README.md": "demo\n"})
    shas = {}
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    shas["fix"] = commit_all(root, "Fix add\n\nIt subtracted instead of adding.")
    (root / "README.md").write_text("demo, documented\n")
    shas["docs"] = commit_all(root, "Document")
    git(root, "checkout", "-q", "-b", "side")
    (root / "util.py").write_text("def one():\n    return 1\n")
    shas["side"] = commit_all(root, "Add util")
    git(root, "checkout", "-q", "main")
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    shas["sub"] = commit_all(root, "Add sub")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff", "side", "-m", "Merge side")
    return shas


def commit_all(root: Path, message: str) -> str:
    git(root, "add", "-A")
    return commit(root, message)


def test_one_session_per_source_commit(tmp_path: Path) -> None:
    repo = tmp_path / "hist"
    shas = _history(repo)
    mined = mine_sessions(repo, out_dir=tmp_path / "out", verify="python3 -c 'import calc'")
    assert [m.commit for m in mined] == [shas["fix"], shas["side"], shas["sub"]]  # no docs, no merge
    session = read_session(mined[0].path)
    start = session.start
    assert start.source == "mined"
    assert start.task == "Fix add\n\nIt subtracted instead of adding."
    assert start.base_commit == git(repo, "rev-parse", f"{shas['fix']}^").strip()
    assert start.base_diff == ""
    assert start.verify == "python3 -c 'import calc'"
    assert "-    return a - b" in start.reference_diff and "+    return a + b" in start.reference_diff
    assert start.meta["files"] == ["calc.py"]


def test_reference_diff_applied_to_the_start_state_gives_the_commit(tmp_path: Path) -> None:
    repo = tmp_path / "hist"
    shas = _history(repo)
    (mined,) = [m for m in mine_sessions(repo, out_dir=tmp_path / "out") if m.commit == shas["sub"]]
    start = read_session(mined.path).start
    with LocalBackend.from_origin(origin_of(read_session(mined.path))) as ws:
        assert ws.read_bytes("calc.py") == b"def add(a, b):\n    return a + b\n"
        subprocess.run(["git", "apply", "--binary", "-"], cwd=ws.root, input=start.reference_diff.encode(), check=True)
        assert ws.read_bytes("calc.py").decode() == (repo / "calc.py").read_text()
        assert ws.diff() == start.reference_diff


def test_paths_filter_and_range(tmp_path: Path) -> None:
    repo = tmp_path / "hist"
    shas = _history(repo)
    only_docs = mine_sessions(repo, out_dir=tmp_path / "a", paths=["*.md"])
    assert [m.commit for m in only_docs] == [shas["docs"]]
    ranged = mine_sessions(repo, out_dir=tmp_path / "b", rev_range=f"{shas['docs']}..main")
    assert {m.commit for m in ranged} == {shas["side"], shas["sub"]}


def test_cli_mine(tmp_path: Path) -> None:
    from recap.cmd_backend import register

    repo = tmp_path / "hist"
    _history(repo)
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["sessions", "mine", str(repo), "--out", str(tmp_path / "out"), "--verify", "true"])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 3
    bad = CliRunner().invoke(app, ["sessions", "mine", str(tmp_path), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2
