"""Pure parts of accepting a change: reading a run's diff back into file texts, the three-way
rebase, and the LSP edits (checked by applying them as a client would)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_helpers import apply_text_edits as apply

from lsp_server.adapters import newest_adapter
from lsp_server.merge import merge3, split_lines, text_edits
from lsp_server.proposal import build_proposal, parse_git_diff, unapply


class DirWorkspace:
    """Just enough of a workspace for `build_proposal`: files under a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_bytes(self, path: str) -> bytes:
        return (self.root / path).read_bytes()


def git_diff(tmp_path: Path, before: dict[str, bytes], after: dict[str, bytes]) -> tuple[str, Path]:
    repo = tmp_path / "r"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    for name, data in before.items():
        (repo / name).write_bytes(data)
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for name in before:
        if name not in after:
            (repo / name).unlink()
    for name, data in after.items():
        (repo / name).write_bytes(data)
    run("add", "-A")
    diff = subprocess.run(["git", "diff", "--cached", "-M", "--binary"], cwd=repo, check=True, capture_output=True, text=True).stdout
    return diff, repo


def test_proposal_recovers_both_texts_of_each_file_from_the_diff(tmp_path: Path) -> None:
    body = "".join(f"line {i}\n" for i in range(40))
    before = {
        "mod.py": body.encode(),
        "gone.py": b"bye\n",
        "noeol.txt": b"a\nb",
        "old_name.py": ("".join(f"keep {i}\n" for i in range(20))).encode(),
        "img.bin": bytes(range(256)),
    }
    after = {
        "mod.py": body.replace("line 3\n", "line three\n").replace("line 30\n", "").encode() + b"tail\n",
        "noeol.txt": b"a\nB",
        "new.py": "print('héllo')\n".encode(),
        "new_name.py": ("".join(f"keep {i}\n" for i in range(20)) + "more\n").encode(),
        "img.bin": bytes(reversed(range(256))),
    }
    diff, repo = git_diff(tmp_path, before, after)
    proposal = build_proposal(DirWorkspace(repo), diff)
    got = {(f.path, f.status): (f.original, f.proposed) for f in proposal.files}
    text = lambda d, k: d[k].decode()  # noqa: E731
    assert got == {
        ("mod.py", "modified"): (text(before, "mod.py"), text(after, "mod.py")),
        ("noeol.txt", "modified"): ("a\nb", "a\nB"),
        ("gone.py", "deleted"): ("bye\n", None),
        ("new.py", "added"): (None, text(after, "new.py")),
        ("old_name.py", "deleted"): (text(before, "old_name.py"), None),
        ("new_name.py", "added"): (None, text(after, "new_name.py")),
    }
    assert proposal.skipped == ("img.bin (binary or not UTF-8)",)


def test_unapply_refuses_a_diff_that_does_not_match() -> None:
    (patch,) = parse_git_diff("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert unapply(patch, "b\n") == "a\n"
    with pytest.raises(ValueError, match="does not match"):
        unapply(patch, "c\n")


def test_merge3_rebases_separate_changes_and_refuses_overlaps() -> None:
    base = "a\nb\nc\nd\ne\n"
    mine = "A\nb\nc\nd\ne\n"          # the user changed line 1
    agent = "a\nb\nc\nd\nE\n"         # the agent changed line 5
    assert merge3(base, mine, agent) == "A\nb\nc\nd\nE\n"
    assert merge3(base, "a\nB\nc\nd\ne\n", "a\nX\nc\nd\ne\n") is None       # same line
    assert merge3(base, "a\nb\nnew\nc\nd\ne\n", "a\nb\nC\nd\ne\n") is None  # insertion touching a change
    assert merge3(base, "a\nB\nc\nd\ne\n", "a\nB\nc\nd\ne\n") == "a\nB\nc\nd\ne\n"  # same change twice
    assert merge3(base, base, agent) == agent
    assert merge3(base, mine, base) == mine


def test_text_edits_are_minimal_and_use_utf16_columns() -> None:
    before = "x = 1\ny = '😀'\nz = 3"
    after = "x = 1\ny = '😀!'\nz = 3\nw = 4\n"
    edits = text_edits(before, after)
    assert len(edits) == 1  # line 1 changed and the last line gained its newline: one run of lines
    start, end = edits[0].range.start, edits[0].range.end
    assert (start.line, start.character, end.line, end.character) == (1, 0, 2, 5)  # end of the unterminated last line
    assert apply(before, edits) == after
    assert text_edits("same\n", "same\n") == []


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "é😀\n", "tail"]), max_size=8)


@settings(max_examples=200, deadline=None)
@given(before=lines, after=lines)
def test_text_edits_round_trip(before: list[str], after: list[str]) -> None:
    old, new = "".join(before), "".join(after)
    assert apply(old, text_edits(old, new)) == new


@settings(max_examples=300, deadline=None)
@given(base=lines, mine=lines, agent=lines)
def test_merge3_keeps_every_change_of_both_sides(base: list[str], mine: list[str], agent: list[str]) -> None:
    from lsp_server.merge import _changes

    b, m, a = "".join(base), "".join(mine), "".join(agent)
    merged = merge3(b, m, a)
    assert merged == merge3(b, a, m)  # the rebase does not favour either side
    if merged is None:
        return
    merged_lines = split_lines(merged)
    for side in (m, a):
        for change in _changes(split_lines(b), split_lines(side)):
            if change.lines:
                n = len(change.lines)
                assert any(tuple(merged_lines[k:k + n]) == change.lines for k in range(len(merged_lines) - n + 1))


def test_newest_adapter_is_the_most_recently_written_folder(tmp_path: Path) -> None:
    import os

    assert newest_adapter(tmp_path / "missing") is None
    assert newest_adapter(tmp_path) is None
    for i, name in enumerate(["b", "a", "c"]):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_config.json").write_text("{}")
        os.utime(folder / "adapter_config.json", ns=(10**18 + i, 10**18 + i))
    (tmp_path / "not-an-adapter").mkdir()
    assert newest_adapter(tmp_path).id == "c"
    os.utime(tmp_path / "a" / "adapter_config.json", ns=(2 * 10**18, 2 * 10**18))
    assert newest_adapter(tmp_path).id == "a"
