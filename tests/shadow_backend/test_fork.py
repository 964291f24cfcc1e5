"""Forks: independent copies whatever writes to them (tools, in-place appends, git), made without
copying git's immutable objects where the file system has no reflinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shadow_backend.fork import copy_tree, strategy_for
from shadow_backend.local import LocalBackend


@pytest.fixture()
def local(small_repo: Path):
    with LocalBackend.create(small_repo, buffers={"pkg/calc.py": "def add(a, b):\n    return a + b\n"}) as ws:
        yield ws


def test_fork_starts_equal_and_stays_independent(local) -> None:
    local.write_bytes("extra.txt", b"one\n")
    a, b = local.fork(2)
    try:
        assert a.diff() == b.diff() == local.diff()
        assert a.list_files() == local.list_files()
        # In-place writes by commands (not atomic renames) must not leak between copies.
        assert a.run("echo two >> extra.txt && printf x >> pkg/calc.py", timeout_s=30).exit_code == 0
        assert local.read_bytes("extra.txt") == b"one\n"
        assert b.read_bytes("extra.txt") == b"one\n"
        assert not local.read_bytes("pkg/calc.py").endswith(b"x")
        local.write_bytes("extra.txt", b"parent\n")
        assert a.read_bytes("extra.txt") == b"one\ntwo\n"
        assert "+two" in a.diff() and "+two" not in b.diff()
    finally:
        a.close()
        b.close()


def test_git_activity_in_a_fork_stays_in_the_fork(local) -> None:
    (a,) = local.fork(1)
    try:
        done = a.run("echo y > new.txt && git add -A && git -c user.name=x -c user.email=x@x commit -qm agent && git log --oneline | wc -l",
                     timeout_s=30)
        assert done.exit_code == 0, done.stderr
        assert done.stdout.strip() == "3"
        parent_log = local.run("git log --oneline | wc -l", timeout_s=30)
        assert parent_log.stdout.strip() == "2"
        assert "b/new.txt" in a.diff() and "new.txt" not in local.diff()  # diff: against the sealed start
    finally:
        a.close()


def test_copy_tree_shares_only_immutable_git_objects(local, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    strategy = copy_tree(local.root, dest)
    assert strategy == strategy_for(local.root)
    src = Path(local.root)
    for path in dest.rglob("*"):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(dest)
            shared = os.stat(path).st_ino == os.stat(src / rel).st_ino
            if strategy == "link-objects" and rel.parts[:2] == (".git", "objects") and rel.parts[2] not in ("info", "pack"):
                assert shared, rel
            if rel.parts[:2] != (".git", "objects"):
                assert not shared, rel
    assert (dest / "pkg" / "calc.py").read_bytes() == (src / "pkg" / "calc.py").read_bytes()
