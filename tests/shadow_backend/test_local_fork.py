"""LocalWorkspace.fork: independent copies of the current state, each diffed against the same start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shadow_backend.local import LocalBackend


def test_forks_are_independent_copies_of_the_current_state(make_repo: Any) -> None:
    repo = make_repo({"a.txt": "a\n", "b.txt": "b\n"})
    with LocalBackend.create(repo, buffers={"b.txt": "buffer\n"}) as parent:
        parent.write_bytes("a.txt", b"parent edit\n")
        parent.write_bytes("made.txt", b"made\n")
        forks = parent.fork(3)
        try:
            assert len({f.root for f in forks} | {parent.root}) == 4
            for fork in forks:
                assert fork.read_bytes("a.txt") == b"parent edit\n" and fork.read_bytes("b.txt") == b"buffer\n"
                assert fork.diff() == parent.diff() and fork.origin == parent.origin
            forks[0].write_bytes("a.txt", b"fork 0\n")
            forks[1].delete("made.txt")
            forks[2].run("echo fork2 >> a.txt && git add -A && git -c user.name=x -c user.email=x@x commit -qm x",
                         timeout_s=30)
            assert parent.read_bytes("a.txt") == b"parent edit\n" and parent.exists("made.txt")
            assert forks[1].read_bytes("a.txt") == b"parent edit\n" and forks[0].exists("made.txt")
            assert "+fork 0" in forks[0].diff() and "+fork 0" not in parent.diff()
            assert "made.txt" in parent.diff() and "made.txt" not in forks[1].diff()
            assert "+fork2" in forks[2].diff()  # the agent's commit does not hide its change from diff()
            forks[0].close()
            assert not Path(forks[0].root).exists() and forks[1].read_bytes("b.txt") == b"buffer\n"
        finally:
            for fork in forks:
                fork.close()
        assert parent.read_bytes("a.txt") == b"parent edit\n"


def test_fork_count_is_validated(make_repo: Any) -> None:
    with LocalBackend.create(make_repo({"a.txt": ""})) as ws:
        with pytest.raises(ValueError):
            ws.fork(0)
