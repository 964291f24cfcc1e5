"""LocalBackend.create / from_origin: the user's view is copied exactly, the user's checkout is never
written, the history is sealed, and a recorded origin rebuilds the same start state."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import PathOutsideWorkspace, WorkspaceError
from harness.tools import default_registry
from harness.workspace import Workspace
from shadow_backend import gc
from shadow_backend.local import LocalBackend, LocalWorkspace

FILES: dict[str, str | bytes] = {
    ".gitignore": "*.log\n",
    "keep.txt": "unchanged\n",
    "mod_staged.txt": "v1\n",
    "mod_both.txt": "v1\n",
    "mod_unstaged.txt": "v1\n",
    "gone.txt": "to be deleted\n",
    "img.bin": bytes(range(256)) * 4,
    "run.sh": "#!/bin/sh\necho hi\n",
}


def user_repo(make_repo: Any, git_cmd: Any) -> Path:
    """A repository with every kind of pending change."""
    repo = make_repo(FILES, staged={"mod_staged.txt": "v2 staged\n", "mod_both.txt": "v2 staged\n",
                                    "added_staged.txt": "new and staged\n"},
                     unstaged={"mod_unstaged.txt": "v2 unstaged\n"},
                     untracked={"new/untracked.txt": "untracked\n", "debug.log": "ignored\n"},
                     deleted=("gone.txt",))
    (repo / "mod_both.txt").write_text("v3 unstaged on top\n")
    os.chmod(repo / "run.sh", 0o755)
    git_cmd(repo, "update-index", "--chmod=+x", "run.sh")
    return repo


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file (and symlink target) under `root`, `.git` included."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            out[str(path.relative_to(root))] = (hashlib.sha256(data).hexdigest(), path.lstat().st_mode)
    return out


def files_of(ws: LocalWorkspace) -> dict[str, bytes]:
    return {p: ws.read_bytes(p) for p in ws.list_files()}


def test_workspace_holds_what_the_user_sees(make_repo: Any, git_cmd: Any) -> None:
    repo = user_repo(make_repo, git_cmd)
    with LocalBackend.create(repo) as ws:
        assert isinstance(ws, Workspace)
        assert files_of(ws) == {
            ".gitignore": b"*.log\n",
            "added_staged.txt": b"new and staged\n",
            "img.bin": bytes(range(256)) * 4,
            "keep.txt": b"unchanged\n",
            "mod_both.txt": b"v3 unstaged on top\n",
            "mod_staged.txt": b"v2 staged\n",
            "mod_unstaged.txt": b"v2 unstaged\n",
            "new/untracked.txt": b"untracked\n",
            "run.sh": b"#!/bin/sh\necho hi\n",
        }
        assert not ws.exists("debug.log") and not ws.exists("gone.txt")
        assert os.stat(Path(ws.root, "run.sh")).st_mode & 0o111
        assert ws.diff() == ""
        assert ws.origin.repo == str(repo) and ws.origin.base_commit == git_cmd(repo, "rev-parse", "HEAD").strip()
        for name in ("mod_both.txt", "mod_staged.txt", "mod_unstaged.txt", "added_staged.txt", "new/untracked.txt", "gone.txt"):
            assert f"diff --git a/{name} b/{name}" in ws.origin.base_diff
        assert "keep.txt" not in ws.origin.base_diff and "debug.log" not in ws.origin.base_diff


def test_user_checkout_is_byte_identical_after_a_run(make_repo: Any, git_cmd: Any, tmp_path: Path) -> None:
    repo = user_repo(make_repo, git_cmd)
    before = snapshot(repo)
    index_mtime = (repo / ".git" / "index").stat().st_mtime_ns
    registry = default_registry()
    with LocalBackend.create(repo, buffers={"keep.txt": "unsaved\n"}) as ws:
        for name, args in [
            ("edit_file", {"path": "mod_both.txt", "old_string": "v3", "new_string": "v4"}),
            ("write_file", {"path": "brand/new.txt", "content": "x"}),
            ("delete_file", {"path": "keep.txt"}),
            ("run_command", {"command": "git add -A && git -c user.name=a -c user.email=a@a commit -qm agent && git status"}),
            ("run_command", {"command": f"echo pwned > {repo}/keep.txt; rm -f {repo}/img.bin; touch {repo}/.git/index"}),
            ("run_command", {"command": "rm -rf pkg run.sh; echo built > out.log"}),
        ]:
            assert not registry.call(name, args, ws).is_error
        assert "brand/new.txt" in ws.diff()
        forks = ws.fork(2)
        rebuilt = LocalBackend.from_origin(ws.origin)
        for other in (*forks, rebuilt):
            other.close()
    assert snapshot(repo) == before
    assert (repo / ".git" / "index").stat().st_mtime_ns == index_mtime


def test_history_is_sealed(make_repo: Any, git_cmd: Any) -> None:
    repo = make_repo({"a.txt": "1\n"})
    first = git_cmd(repo, "rev-parse", "HEAD").strip()
    (repo / "a.txt").write_text("2\n")
    git_cmd(repo, "commit", "-qam", "secret second commit")
    with LocalBackend.create(repo) as ws:
        log = ws.run("git log --format=%s --all", timeout_s=30)
        assert log.stdout.split() == ["start", "base"]
        assert ws.run(f"git cat-file -e {first}", timeout_s=30).exit_code != 0
        assert ws.run("git status --porcelain", timeout_s=30).stdout == ""


def test_buffers_are_part_of_the_start_state(make_repo: Any) -> None:
    repo = make_repo({"a.py": "x = 1\n", "b.py": "y = 2\n"})
    buffers = {"a.py": "x = 'unsaved'\n", "sub/new_buffer.py": "z = 3\n"}
    with LocalBackend.create(repo, buffers=buffers) as ws:
        assert ws.read_bytes("a.py") == b"x = 'unsaved'\n" and ws.read_bytes("sub/new_buffer.py") == b"z = 3\n"
        assert ws.diff() == "" and ws.origin.base_diff == "" and ws.origin.buffers == buffers
        assert (repo / "a.py").read_text() == "x = 1\n" and not (repo / "sub").exists()


def test_bad_buffer_path_is_refused_and_nothing_is_left(make_repo: Any, tmp_path: Path) -> None:
    parent = tmp_path / "workspaces"
    parent.mkdir()
    for bad in ("../evil.py", "/tmp/evil.py", ".git/hooks/pre-commit"):
        with pytest.raises(PathOutsideWorkspace):
            LocalBackend.create(make_repo({"a.py": ""}, name=f"r{len(bad)}"), buffers={bad: "x"}, parent_dir=parent)
    assert list(parent.iterdir()) == []


def test_from_origin_rebuilds_the_same_start_state(make_repo: Any, git_cmd: Any) -> None:
    repo = user_repo(make_repo, git_cmd)
    with LocalBackend.create(repo, buffers={"keep.txt": "buffer\n"}) as ws:
        origin, expected, start = ws.origin, files_of(ws), ws.start_commit
    (repo / "keep.txt").write_text("the user moved on\n")
    git_cmd(repo, "add", "-A")
    git_cmd(repo, "commit", "-qm", "later work")
    with LocalBackend.from_origin(origin) as rebuilt:
        assert files_of(rebuilt) == expected
        assert rebuilt.start_commit == start and rebuilt.diff() == ""
        assert rebuilt.origin.base_diff == origin.base_diff
        assert os.stat(Path(rebuilt.root, "run.sh")).st_mode & 0o111


def test_a_repository_owned_by_another_user_is_read(make_repo: Any, git_cmd: Any) -> None:
    # e.g. unpacked by root from a tarball, or a mounted volume; CI runs as root (it starts dockerd)
    repo = user_repo(make_repo, git_cmd)
    with LocalBackend.create(repo) as ws:
        expected, start = files_of(ws), ws.start_commit
    for dirpath, dirnames, names in os.walk(repo):
        for name in [*dirnames, *names]:
            os.lchown(Path(dirpath, name), 2000, 2000)
    os.lchown(repo, 2000, 2000)
    before = snapshot(repo)
    plain = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True,
                           env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"})
    assert plain.returncode != 0 and "dubious ownership" in plain.stderr  # what plain git does
    with LocalBackend.create(repo / "new") as ws:  # a subdirectory stands for the whole repository
        assert files_of(ws) == expected and ws.start_commit == start
        with LocalBackend.from_origin(ws.origin) as rebuilt:
            assert files_of(rebuilt) == expected
    assert snapshot(repo) == before and Path(repo, ".git").stat().st_uid == 2000


def test_plain_directory_works_too(make_repo: Any) -> None:
    folder = make_repo({"a.txt": "a\n", "d/b.bin": b"\0\1"}, git=False)
    with LocalBackend.create(folder) as ws:
        assert ws.origin.base_commit is None
        assert "new file mode" in ws.origin.base_diff and "GIT binary patch" in ws.origin.base_diff
        ws.write_bytes("a.txt", b"changed\n")
        with LocalBackend.from_origin(ws.origin) as rebuilt:
            assert files_of(rebuilt) == {"a.txt": b"a\n", "d/b.bin": b"\0\1"}


def test_diff_covers_add_modify_delete_and_binary_and_applies(make_repo: Any, git_cmd: Any) -> None:
    repo = make_repo({"a.txt": "one\ntwo\n", "b.txt": "bye\n", "c.bin": b"\0\1\2", "x.sh": "echo\n"})
    with LocalBackend.create(repo) as ws:
        ws.write_bytes("a.txt", b"one\n2\n")
        ws.delete("b.txt")
        ws.write_bytes("c.bin", b"\0\3\2\4")
        ws.write_bytes("new/d.txt", b"added\n")
        ws.run("chmod +x x.sh", timeout_s=30)
        diff = ws.diff()
        assert "-two\n+2" in diff
        assert "diff --git a/b.txt b/b.txt\ndeleted file mode 100644" in diff
        assert "diff --git a/c.bin b/c.bin" in diff and "GIT binary patch" in diff
        assert "diff --git a/new/d.txt b/new/d.txt\nnew file mode 100644" in diff
        assert "old mode 100644\nnew mode 100755" in diff
        with LocalBackend.from_origin(ws.origin) as replica:  # the start state, then the diff on top
            subprocess.run(["git", "apply", "--binary", "-"], cwd=replica.root, input=diff.encode(), check=True)
            assert files_of(replica) == files_of(ws)
            assert os.stat(Path(replica.root, "x.sh")).st_mode & 0o111


def test_errors_and_close(make_repo: Any, tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        LocalBackend.create(tmp_path / "does-not-exist")
    ws = LocalBackend.create(make_repo({"a.txt": "a\n"}), parent_dir=tmp_path)
    tmp = Path(ws.root).parent
    assert [p.name for p in tmp_path.glob("*" + gc.OWNER_SUFFIX)] == [tmp.name + gc.OWNER_SUFFIX]
    ws.run("mkdir -p ro/sub && touch ro/sub/f && chmod -R a-w ro", timeout_s=30)
    ws.close()
    ws.close()
    assert not tmp.exists() and list(tmp_path.glob("*" + gc.OWNER_SUFFIX)) == []


# The child builds a real workspace of a big repository but stops for good after copying the files,
# so that the kill lands mid-creation every time.
_KILLED_CHILD = """
import sys, time
from shadow_backend import git_state
from shadow_backend.local import LocalBackend

def stop_here(self, *, force):
    print("copied", flush=True)
    time.sleep(120)

git_state.ShadowRepo.import_worktree = stop_here
LocalBackend.create(sys.argv[1], parent_dir=sys.argv[2])
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_process_killed_while_creating_leaves_nothing_gc_cannot_remove(
    make_repo: Any, tmp_path: Path, sig: signal.Signals
) -> None:
    repo = make_repo({f"pkg{i // 100}/mod{i}.py": f"value = {i}\n" * 20 for i in range(1500)})
    parent = tmp_path / "workspaces"
    parent.mkdir()
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(repo), str(parent)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "copied\n"
        (left,) = [p for p in parent.glob("recap-ws-*") if p.is_dir()]
        assert len(list(left.rglob("mod*.py"))) == 1500
        child.send_signal(sig)
        assert child.wait(timeout=30) == -sig
    finally:
        child.kill()
        child.wait()
    report = gc.collect_garbage(docker=False, temp_root=parent)
    assert report.dirs == (str(left),)
    assert list(parent.iterdir()) == []


def test_non_utf8_text_gets_a_binary_patch_so_diffs_stay_utf8(make_repo: Any) -> None:
    latin = "caf\xe9 = 1\n".encode("latin-1")
    repo = make_repo({"legacy file[1].py": latin, "plain.txt": "plain\n"},
                     unstaged={"legacy file[1].py": latin + "na\xefve = 2\n".encode("latin-1")})
    with LocalBackend.create(repo) as ws:
        assert "GIT binary patch" in ws.origin.base_diff
        ws.write_bytes("legacy file[1].py", b"r\xe9sum\xe9 = 3\n")
        ws.write_bytes("plain.txt", b"changed\n")
        diff = ws.diff()
        diff.encode("utf-8")  # no surrogates: it can go into a JSON session
        assert "+changed" in diff and "GIT binary patch" in diff
        with LocalBackend.from_origin(ws.origin) as replica:
            assert replica.read_bytes("legacy file[1].py") == latin + "na\xefve = 2\n".encode("latin-1")
            subprocess.run(["git", "apply", "--binary", "-"], cwd=replica.root, input=diff.encode(), check=True)
            assert files_of(replica) == files_of(ws)
