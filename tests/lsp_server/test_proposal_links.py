"""Issue 13 fault 7: a symlink the agent made that leads outside the workspace is left out of the
proposal (listed with the reason); the rest of the change can still be accepted. Real local
workspaces, the link made by a command in the sandbox as the agent would."""

from __future__ import annotations

from typing import Any

import pytest

from lsp_server.proposal import build_proposal
from shadow_backend.links import drop_outside_links


@pytest.fixture
def ws(make_repo: Any):
    from shadow_backend.local import LocalBackend

    workspace = LocalBackend.create(make_repo({"calc.py": "def add(a, b):\n    return a - b\n", "docs/a.md": "a\n"}))
    yield workspace
    workspace.close()


def test_a_link_outside_is_skipped_and_the_fix_is_offered(ws: Any) -> None:
    made = ws.run("ln -s /etc/hostname link.txt && ln -s ../../x docs/up.md && ln -s a.md docs/same.md", timeout_s=30)
    assert made.exit_code == 0, made.stderr
    ws.write_bytes("calc.py", b"def add(a, b):\n    return a + b\n")
    diff = ws.diff()
    assert "120000" in diff and "link.txt" in diff
    proposal = build_proposal(ws, diff)
    assert [(f.path, f.status) for f in proposal.files] == [("calc.py", "modified")]
    assert proposal.files[0].proposed.endswith("return a + b\n")
    assert "link.txt (a symlink to /etc/hostname: an absolute target, outside the workspace)" in proposal.skipped
    assert "docs/up.md (a symlink to ../../x: a target outside the workspace)" in proposal.skipped
    assert "docs/same.md (a symlink; text edits can't create links)" in proposal.skipped
    # the diff offered (shown in the editor, applied on accept) holds neither outside link
    assert "link.txt" not in proposal.diff and "docs/up.md" not in proposal.diff
    assert "docs/same.md" in proposal.diff and "calc.py" in proposal.diff


@pytest.mark.parametrize(
    ("path", "target", "outside"),
    [("l", "/abs", True), ("l", "..", True), ("a/b/l", "../../../x", True), ("a/b/l", "../../x", False),
     ("a/l", "../.git/config", True), ("l", "sub/../../x", True), ("l", "sub/x", False), ("l", "", True)],
)
def test_which_targets_leave_the_workspace(path: str, target: str, outside: bool) -> None:
    section = (f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
               f"+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")
    other = "diff --git a/f b/f\nindex 1111111..2222222 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    kept, skipped = drop_outside_links(other + section + other)
    assert (len(skipped) == 1) == outside
    assert kept == (other + other if outside else other + section + other)
