"""Outcome scoring: the verify command in a workspace, test counts, and diff similarity."""

from __future__ import annotations

from pathlib import Path

from harness.session import Score, SessionWriter
from shadow_backend.scoring import diff_similarity, parse_test_counts, run_verify, score_workspace

UNITTEST = "python3 -m unittest -v test_unit_calc"
UNIT_TEST = b"""import unittest
from pkg.calc import add


class AddTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_zero(self):
        self.assertEqual(add(0, 0), 0)
"""


def test_verify_fails_then_passes_with_counts(shared_workspace, small_repo: Path) -> None:
    shared_workspace.write_bytes("test_unit_calc.py", UNIT_TEST)
    before = run_verify(shared_workspace, UNITTEST, timeout_s=60)
    assert before.passed is False and before.exit_code == 1
    assert (before.tests_passed, before.tests_failed) == (1, 1)
    assert "AssertionError" in before.output
    original = shared_workspace.read_bytes("pkg/calc.py")
    shared_workspace.write_bytes("pkg/calc.py", original.replace(b"a - b", b"a + b"))
    try:
        after = run_verify(shared_workspace, UNITTEST, timeout_s=60)
    finally:
        shared_workspace.write_bytes("pkg/calc.py", original)
        shared_workspace.delete("test_unit_calc.py")
    assert after.passed is True and after.exit_code == 0
    assert (after.tests_passed, after.tests_failed) == (2, 0)


def test_verify_timeout_is_a_failure(shared_workspace) -> None:
    result = run_verify(shared_workspace, "sleep 30", timeout_s=0.5)
    assert result.passed is False and result.timed_out is True


def test_verify_output_is_bounded(shared_workspace) -> None:
    result = run_verify(shared_workspace, "seq 1 200000", timeout_s=60, max_output_chars=1000)
    assert len(result.output) < 1100
    assert result.output.startswith("1\n2\n") and result.output.rstrip().endswith("200000")
    assert (result.tests_passed, result.tests_failed) == (None, None)


def test_parse_test_counts() -> None:
    assert parse_test_counts("===== 3 passed, 1 failed, 2 errors in 0.12s =====") == (3, 3)
    assert parse_test_counts("..\n2 passed in 0.01s\n") == (2, 0)
    assert parse_test_counts("== 1 failed, 4 passed, 1 skipped in 1.2s ==") == (4, 1)
    assert parse_test_counts("Ran 4 tests in 0.001s\n\nFAILED (failures=1, errors=1)") == (2, 2)
    assert parse_test_counts("Ran 3 tests in 0.001s\n\nOK") == (3, 0)
    assert parse_test_counts("hello world") == (None, None)


DIFF = """diff --git a/pkg/calc.py b/pkg/calc.py
--- a/pkg/calc.py
+++ b/pkg/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def test_diff_similarity_range_and_extremes() -> None:
    assert diff_similarity(DIFF, DIFF) == 1.0
    assert diff_similarity("", "") == 1.0
    assert diff_similarity(DIFF, "") == 0.0
    other_file = DIFF.replace("pkg/calc.py", "pkg/other.py")
    assert diff_similarity(DIFF, other_file) == 0.0
    close = DIFF.replace("+    return a + b", "+    return b + a")
    assert 0.0 < diff_similarity(close, DIFF) < 1.0
    both = DIFF + other_file
    assert diff_similarity(DIFF, both) == 0.5


def test_score_workspace_emits_a_score_event(shared_workspace) -> None:
    log = SessionWriter(None)
    fields = score_workspace(shared_workspace, diff=DIFF, verify="echo '5 passed in 0.1s'; exit 0",
                             reference_diff=DIFF, log=log)
    (event,) = log.events
    assert isinstance(event, Score)
    assert event.verify_passed is True and event.tests_passed == 5 and event.tests_failed == 0
    assert event.diff_similarity == 1.0
    assert fields["verify_exit_code"] == 0
