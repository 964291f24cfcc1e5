"""Hostile git input never runs code on the host (issue 10, faults 1 and 4), on both backends.

Each payload is a shell command that would create a file in a host folder (`markers`), which no
sandbox can reach: bwrap gives commands a private /tmp, the container sees no host path. So a
marker that appears was made by host-side git obeying config, attributes or hooks it was given.

- A command in the workspace configures the agent's `.git` (core.fsmonitor, hooks through
  core.hooksPath and `.git/hooks`, clean/smudge/process filters, textconv, external diffs, a pager)
  and a `.gitattributes` naming those drivers, and plants a nested repository with its own
  fsmonitor and filter; then `diff()`, `list_files()`, a fork, the replay of the session and
  `close()` run nothing, and the diff is exactly the diff of the same files without the git config.
- A user repository whose committed `.gitattributes` and own `.git/config` try the same (plus a
  partial clone's lazy fetch through an `ext::` remote) runs nothing at create, rebuild, mining
  or diff time, owned by the user or by someone else (`safe.directory` does not make recap honour
  it), and cannot make recap copy host files (`core.worktree` elsewhere, a symlinked directory or
  `info/exclude`).
- `recap run --apply` writes the diff into such a repository byte for byte, running none of it.
- A fork copies a symlinked `.git` or `.git/objects` as a symlink: it never hard-links the host
  files it points to into the fork (where the sandbox could write them).
- A session file's `base_diff` cannot write the agent's `.git` or leave the workspace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.agent import Agent
from harness.errors import WorkspaceError
from harness.policies.scripted import ScriptedPolicy
from harness.session import SessionWriter
from harness.toolcall import render_tool_call
from harness.workspace import WorkspaceOrigin
from shadow_backend.mine import mine_sessions
from shadow_backend.replay import replay_session

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def _backend(name: str) -> Any:
    if name == "local":
        from shadow_backend.local import LocalBackend

        return LocalBackend
    from shadow_backend.docker_backend import DockerBackend

    return DockerBackend


@pytest.fixture
def markers(tmp_path: Path) -> Iterator[Path]:
    """The host folder payloads write to; the test fails if anything lands there."""
    folder = tmp_path / "markers"
    folder.mkdir()
    yield folder
    assert sorted(p.name for p in folder.iterdir()) == [], "host-side git ran a payload"


def _git(root: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": os.environ["PATH"],
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def _hostile_config(m: Path, hooks: str) -> str:
    """Git config (the `git config` lines of a shell script) whose every entry runs a payload."""
    settings = {
        "core.fsmonitor": f"touch {m}/fsmonitor; false #",
        "core.hooksPath": hooks,
        "core.pager": f"touch {m}/pager",
        "filter.evil.clean": f"touch {m}/clean; cat",
        "filter.evil.smudge": f"touch {m}/smudge; cat",
        "filter.evil.process": f"touch {m}/process",
        "diff.evil.textconv": f"touch {m}/textconv; cat",
        "diff.evil.command": f"touch {m}/diffcmd",
        "diff.external": f"touch {m}/external",
    }
    return "".join(f"git config {key} '{value}'\n" for key, value in settings.items())


def _hooks_script(m: Path, folder: str) -> str:
    names = ("post-index-change", "pre-commit", "post-checkout", "reference-transaction", "pre-auto-gc")
    return f"mkdir -p {folder}\n" + "".join(
        f"printf '#!/bin/sh\\ntouch {m}/hook-{name}\\n' > {folder}/{name}; chmod +x {folder}/{name}\n" for name in names)


def _nested_repo_script(m: Path) -> str:
    """A nested repository, committed cleanly first, then given an fsmonitor and a clean filter and a
    same-size change with an old mtime (so `git status` there would have to run the filter)."""
    return (
        "(mkdir nested && cd nested && git init -q && echo x > f"
        " && git add f && git -c user.name=a -c user.email=a@b commit -qm nested"
        f" && git config core.fsmonitor 'touch {m}/nested-fsmonitor; false #'"
        f" && git config filter.evil.clean 'touch {m}/nested-clean; cat'"
        " && printf '* filter=evil\\n' > .gitattributes && echo y > f && touch -d 2001-01-01 f)\n"
    )


FILE_CHANGES = "printf '* filter=evil diff=evil\\n' > .gitattributes && echo changed >> README.md\n"
"""The plain file changes of the attack: what the diff must show, nothing else."""


def _attack(m: Path) -> str:
    """The command: poison the agent's `.git` and plant a nested repository, then change files."""
    return (_hostile_config(m, ".hooks") + _hooks_script(m, ".hooks") + _hooks_script(m, ".git/hooks")
            + _nested_repo_script(m) + FILE_CHANGES)


def _plain_twin(m: Path) -> str:
    """The same working-tree files as `_attack`, without touching any git config."""
    return _hooks_script(m, ".hooks") + FILE_CHANGES


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_config_written_in_the_workspace_runs_nothing_on_the_host(
        backend: str, small_repo: Path, markers: Path, tmp_path: Path) -> None:
    session = tmp_path / "attack.jsonl"
    lines = _attack(markers).splitlines()
    turns = [{"tool_calls": [{"name": "run_command", "arguments": {"command": "set -e\n" + "\n".join(lines[i:i + 4])}}]}
             for i in range(0, len(lines), 4)]  # a turn is cut at 512 tokens
    turns.append({"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]})
    ws = _backend(backend).create(small_repo)
    writer = SessionWriter(session)
    try:
        result = Agent(policy=ScriptedPolicy(turns, context_window=2**17), workspace=ws, log=writer).run("attack")
        assert result.stop_reason == "finish"
        ran = [json.loads(line) for line in session.read_text().splitlines()]
        outputs = [e["output"] for e in ran if e["type"] == "observation" and e["name"] == "run_command"]
        assert len(outputs) == len(turns) - 1 and all(o.startswith("exit code 0 ") for o in outputs), outputs
        diff = ws.diff()
        files = ws.list_files()
        (fork,) = ws.fork(1)
        try:
            assert fork.diff() == diff
            assert fork.run("git config core.fsmonitor", timeout_s=30).stdout.startswith("touch")  # it travelled along
        finally:
            fork.close()
    finally:
        writer.close()
        ws.close()
    with _backend(backend).create(small_repo) as twin:
        assert twin.run(_plain_twin(markers), timeout_s=60).exit_code == 0
        assert diff == twin.diff() and files == twin.list_files()
    assert "+changed" in diff and "b/.gitattributes" in diff and "b/.hooks/post-index-change" in diff
    assert "nested" not in diff and "nested/f" not in files  # a nested repository is never added
    replayed = replay_session(session, backend=backend)
    assert replayed.error is None and replayed.divergences == () and replayed.final_diff in ("exact", "normalized")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fork_never_follows_a_symlinked_git_directory(backend: str, small_repo: Path, tmp_path: Path) -> None:
    host = tmp_path / "host"  # say another repository's .git on the host
    (host / "objects").mkdir(parents=True)
    (host / "objects" / "object").write_text("host object\n")
    (host / "config").write_text("host config\n")
    with _backend(backend).create(small_repo) as ws:
        expected = ws.diff()
        for command in (f"rm -rf .git/objects && ln -s {host}/objects .git/objects", f"rm -rf .git && ln -s {host} .git"):
            assert ws.run(command, timeout_s=30).exit_code == 0
            (fork,) = ws.fork(1)
            with fork:
                assert Path(fork.root, ".git").is_symlink() or Path(fork.root, ".git", "objects").is_symlink()
                assert fork.diff() == expected
    assert (host / "objects" / "object").stat().st_nlink == 1 and (host / "config").stat().st_nlink == 1


def _hostile_repo(root: Path, m: Path, secret: Path) -> Path:
    """A user repository whose committed files and own `.git/config` try every payload."""
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# hostile\n")
    (root / "a.txt").write_text("x\n")
    (root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (root / ".gitmodules").write_text(f'[submodule "s"]\n\tpath = s\n\turl = ./s\n\tupdate = !touch {m}/submodule-update\n')
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "one")
    (root / "a.txt").write_text("x\ny\n")
    _git(root, "commit", "-qam", "two")
    (root / "a.txt").write_text("z\ny\n")  # same size as committed, old mtime: a refresh would filter it
    os.utime(root / "a.txt", (1e9, 1e9))
    (root / "staged.txt").write_text("staged\n")
    _git(root, "add", "staged.txt")
    (root / "untracked.txt").write_text("untracked\n")
    script = _hostile_config(m, str(root / ".hooks")) + _hooks_script(m, ".hooks") + _hooks_script(m, ".git/hooks")
    script += _nested_repo_script(m).replace("nested", "vendor")
    script += ("git config core.repositoryformatversion 1 && git config extensions.partialClone origin\n"
               f"git config remote.origin.url 'ext::sh -c touch% {m}/lazy-fetch'\n"
               "git config remote.origin.promisor true && git config protocol.ext.allow always\n"
               f"git config remote.origin.uploadpack 'touch {m}/uploadpack'\n"
               f"rm .git/info/exclude && ln -s {secret} .git/info/exclude\n")
    subprocess.run(["bash", "-c", script], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    return root


EXPECTED_START = {"README.md": b"# hostile\n", "a.txt": b"z\ny\n", "staged.txt": b"staged\n",
                  "untracked.txt": b"untracked\n", ".gitattributes": b"* filter=evil diff=evil\n"}


def _check_start(ws: Any, secret: Path) -> None:
    root = Path(ws.root)
    for rel, data in EXPECTED_START.items():
        assert (root / rel).read_bytes() == data, rel
    assert not (root / "vendor").exists() or "vendor/f" not in ws.list_files()
    assert secret.read_bytes() not in (root / ".git" / "info" / "exclude").read_bytes()


@pytest.mark.parametrize("owner", ["user", "another user"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_repository_runs_nothing_at_create_rebuild_and_mining(
        backend: str, owner: str, markers: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    repo = _hostile_repo(tmp_path / "repo", markers, secret)
    if owner == "another user":
        for dirpath, dirnames, names in os.walk(repo):
            for name in dirnames + names:
                os.lchown(Path(dirpath, name), 65534, 65534)
        os.lchown(repo, 65534, 65534)
        plain = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True,
                               env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"})
        assert plain.returncode != 0 and "dubious ownership" in plain.stderr  # what plain git does
    head = _git(repo, "-c", f"safe.directory={repo}", "-c", "core.fsmonitor=false", "rev-parse", "HEAD").strip()
    backend_cls = _backend(backend)
    with backend_cls.create(repo) as ws:
        _check_start(ws, secret)
        assert ws.origin.base_commit == head
        ws.write_bytes("a.txt", b"edited\n")
        diff = ws.diff()
        assert diff.endswith("@@ -1,2 +1 @@\n-z\n-y\n+edited\n") and ".hooks" not in diff
        origin = ws.origin
    with backend_cls.from_origin(origin) as rebuilt:
        _check_start(rebuilt, secret)
    mined = mine_sessions(repo, out_dir=tmp_path / "mined", paths=["*.txt"])
    assert [m.files for m in mined] == [("a.txt",)]
    assert "+y" in json.loads(mined[0].path.read_text().splitlines()[0])["reference_diff"]


def test_recap_run_apply_runs_nothing_of_the_repository(markers: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    repo = _hostile_repo(tmp_path / "repo", markers, secret)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([render_tool_call("write_file", {"path": "a.txt", "content": "applied\n"}),
                                  render_tool_call("write_file", {"path": "new.txt", "content": "new\n"}),
                                  render_tool_call("finish", {"message": "done"})]))
    out = subprocess.run([sys.executable, "-m", "recap", "run", "--sessions-dir", str(tmp_path / "s"), "--repo", str(repo),
                          "--model", f"scripted:{script}", "--apply", "edit"],
                         cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (repo / "a.txt").read_bytes() == b"applied\n" and (repo / "new.txt").read_bytes() == b"new\n"


def test_a_partial_clone_never_fetches_a_missing_blob(markers: Path, tmp_path: Path) -> None:
    from shadow_backend.local import LocalBackend

    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    repo = _hostile_repo(tmp_path / "repo", markers, secret)
    head = _git(repo, "-c", "core.fsmonitor=false", "rev-parse", "HEAD").strip()
    blob = _git(repo, "-c", "core.fsmonitor=false", "rev-parse", "HEAD:README.md").strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as a blob-less clone would lack it
    with pytest.raises(WorkspaceError, match=blob):
        LocalBackend.from_origin(WorkspaceOrigin(repo=str(repo), base_commit=head))


def test_a_worktree_elsewhere_or_a_symlinked_directory_copies_no_host_file(tmp_path: Path) -> None:
    from shadow_backend.local import LocalBackend

    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("host secret\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "leak").mkdir()
    (repo / "leak" / "secret").write_text("committed\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    (repo / "leak" / "secret").unlink()
    (repo / "leak").rmdir()
    (repo / "leak").symlink_to(host)  # the index still lists leak/secret
    with LocalBackend.create(repo) as ws:
        assert Path(ws.root, "leak").is_symlink()
        assert "host secret" not in ws.origin.base_diff and "host secret" not in ws.diff()
    _git(repo, "config", "core.worktree", str(host))
    with pytest.raises(WorkspaceError, match="working tree elsewhere"):
        LocalBackend.create(repo)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_base_diff_cannot_write_git_metadata_or_leave_the_workspace(
        backend: str, small_repo: Path, markers: Path, tmp_path: Path) -> None:
    head = _git(small_repo, "rev-parse", "HEAD").strip()
    outside = tmp_path / "outside.txt"
    for target in (".git/config", ".GIT/config", "../outside.txt", f"../../../../../../..{outside}"):
        base_diff = (f"diff --git a/{target} b/{target}\nnew file mode 100644\n--- /dev/null\n+++ b/{target}\n"
                     f"@@ -0,0 +1,2 @@\n+[core]\n+\tfsmonitor = touch {markers}/base-diff; false #\n")
        origin = WorkspaceOrigin(repo=str(small_repo), base_commit=head, base_diff=base_diff)
        try:
            ws = _backend(backend).from_origin(origin)
        except WorkspaceError:
            continue
        with ws:  # git took the path as an ordinary file (".GIT" on a case-sensitive file system)
            assert target.startswith(".GIT") and "fsmonitor" in Path(ws.root, target).read_text()
            assert ws.diff() == "" and ws.run("git status --short", timeout_s=30).exit_code == 0
    assert not outside.exists()
