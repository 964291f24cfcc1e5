"""Outcome scoring of a workspace: the session's verify command and similarity to a reference diff.

    verify      run the command in the workspace -> pass/fail (exit 0), passed/failed test counts
                parsed from pytest (or unittest) output when present, bounded output
    similarity  per changed file, difflib's ratio between the removed+added lines of the two diffs,
                weighted by the larger number of changed lines; in [0, 1]

Both go into a `harness.session.Score` event (`score_workspace`). Run the verify command only
after taking the final diff: tests leave caches behind in the workspace.
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.session import Score, SessionWriter
from harness.workspace import Workspace

_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|xpassed|xfailed|skipped)\b")
_PYTEST_SUMMARY = re.compile(r"^[= ]*\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed)\b.* in [\d.]+s\b.*$", re.M)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$", re.M)
_UNITTEST_FAILED = re.compile(r"^FAILED \((.*)\)$", re.M)
_DIFF_FILE = re.compile(r"^diff --git a/(.*?) b/(.*)$")


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a verify command.

    Attributes:
        passed: exit status 0 and not timed out.
        exit_code: the command's exit status (-9 when killed).
        tests_passed, tests_failed: counts from a pytest/unittest summary line (errors count as
            failed), None when the output has none.
        output: stdout then stderr, cut to `max_output_chars` (head and tail kept).
        timed_out: the command ran past its timeout.
        duration_s: wall-clock seconds.
    """

    passed: bool
    exit_code: int
    tests_passed: int | None
    tests_failed: int | None
    output: str
    timed_out: bool
    duration_s: float


def parse_test_counts(output: str) -> tuple[int | None, int | None]:
    """(passed, failed) from the last pytest summary line ("=== 3 passed, 1 failed in 0.2s ===")
    or a unittest report ("Ran 4 tests" + "FAILED (failures=1, errors=1)"); (None, None) if absent."""
    summaries = [m.group(0) for m in _PYTEST_SUMMARY.finditer(output)]
    if summaries:
        counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                  for n, kind in _PYTEST_COUNT.findall(summaries[-1])}
        return counts.get("passed", 0) + counts.get("xfailed", 0), counts.get("failed", 0) + counts.get("error", 0)
    ran = _UNITTEST_RAN.findall(output)
    if ran:
        total = int(ran[-1])
        failed_match = _UNITTEST_FAILED.findall(output)
        failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", failed_match[-1])) if failed_match else 0
        return total - failed, failed
    return None, None


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def with_interpreter_on_path(command: str) -> str:
    """`command` (bash) with the running Python's bin directory first on PATH.

    Verify commands name no interpreter path (task sessions record `python3 -m pytest ...`, so they
    work from any checkout); run this way, `python3`/`python`/`pytest` are the interpreter recap
    runs on, whose pytest made the task. Where that directory does not exist (a container) the
    command finds the image's own `python3`.
    """
    return f'PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"; {command}'


def run_verify(
    workspace: Workspace, command: str, *, timeout_s: float = 600.0, max_output_chars: int = 20_000
) -> VerifyResult:
    """Run `command` (through bash) in `workspace` and read its outcome: in the workspace's project
    environment when it has one (the same PATH the agent's commands get), else
    `with_interpreter_on_path`.

    Raises: WorkspaceError from the backend (a timeout is a failed result, not an error).
    """
    has_env = getattr(getattr(workspace, "origin", None), "env", None) is not None
    result = workspace.run(command if has_env else with_interpreter_on_path(command), timeout_s=timeout_s)
    passed_count, failed_count = parse_test_counts(result.stdout + "\n" + result.stderr)
    output = result.stdout + (("\n" if result.stdout and result.stderr else "") + result.stderr)
    return VerifyResult(
        passed=result.exit_code == 0 and not result.timed_out,
        exit_code=result.exit_code,
        tests_passed=passed_count,
        tests_failed=failed_count,
        output=_bounded(output, max_output_chars),
        timed_out=result.timed_out,
        duration_s=result.duration_s,
    )


def apply_test_patch(workspace: Workspace, patch: str) -> str | None:
    """Write the files of `patch` (a git diff of test files) into `workspace` through its file
    API (paths confined to it), after checking it applies with `git apply --check` on the host in
    a scratch copy of the files it touches. Returns None, or why it does not apply."""
    import subprocess
    import tempfile

    paths = sorted({m.group(2) for m in map(_DIFF_FILE.match, patch.splitlines()) if m}
                   | {m.group(1) for m in map(_DIFF_FILE.match, patch.splitlines()) if m})
    with tempfile.TemporaryDirectory(prefix="recap-test-patch-") as scratch:
        for path in paths:
            try:
                if workspace.exists(path) and not workspace.is_dir(path):
                    target = Path(scratch, path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(workspace.read_bytes(path))
            except (OSError, ValueError) as exc:
                return f"{path}: {exc}"
        done = subprocess.run(["git", "apply", "--binary", "--whitespace=nowarn", "-"], cwd=scratch,
                              input=patch.encode(), capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": scratch})
        if done.returncode != 0:
            return done.stderr.decode(errors="replace").strip()
        for path in paths:
            result = Path(scratch, path)
            try:
                if result.is_file():
                    workspace.write_bytes(path, result.read_bytes())
                elif workspace.exists(path):
                    workspace.delete(path)
            except (OSError, ValueError) as exc:
                return f"{path}: {exc}"
    return None


def _changed_lines(diff: str) -> dict[str, list[str]]:
    """File path -> its removed and added lines, in order, with their +/- sign."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in diff.splitlines():
        header = _DIFF_FILE.match(line)
        if header:
            current = files.setdefault(header.group(2), [])
        elif current is not None and line[:1] in "+-" and not line.startswith(("+++ ", "--- ")):
            current.append(line)
        elif current is not None and line.startswith("Binary files"):
            current.append(line)
    return files


def diff_similarity(diff: str, reference: str) -> float:
    """Similarity in [0, 1] of two unified diffs: 1.0 for the same changed lines in the same files.

    Per file, `difflib.SequenceMatcher.ratio()` over the changed (+/-) lines; a file changed in only
    one of the diffs scores 0; files are weighted by the larger count of changed lines. Two empty
    diffs score 1.0.
    """
    mine, ref = _changed_lines(diff), _changed_lines(reference)
    paths = sorted(set(mine) | set(ref))
    if not paths:
        return 1.0
    total = weighted = 0.0
    for path in paths:
        a, b = mine.get(path, []), ref.get(path, [])
        weight = max(len(a), len(b), 1)
        total += weight
        if a or b:
            weighted += weight * difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        else:
            weighted += weight  # e.g. a mode-only change in both
    return weighted / total


def score_workspace(
    workspace: Workspace,
    *,
    diff: str,
    verify: str | None,
    reference_diff: str | None,
    log: SessionWriter | None = None,
    timeout_s: float = 600.0,
    test_patch: str | None = None,
) -> dict[str, Any]:
    """Score a finished episode: apply `test_patch` (the task's tests, when given) and run `verify`
    (when given) in `workspace`, compare `diff` (the final diff, taken before this call) with
    `reference_diff` (when given).

    Returns the fields of a `Score` event (also emitted to `log` when given). A test patch that
    does not apply (the agent changed the same lines) fails verify with git's message as output.
    """
    fields: dict[str, Any] = {}
    if verify and test_patch:
        problem = apply_test_patch(workspace, test_patch)
        if problem:
            fields.update(verify_passed=False, verify_exit_code=1, tests_passed=None, tests_failed=None,
                          verify_output=f"the task's test patch does not apply: {problem}")
            verify = None
    if verify:
        outcome = run_verify(workspace, verify, timeout_s=timeout_s)
        fields.update(
            verify_passed=outcome.passed,
            verify_exit_code=outcome.exit_code,
            tests_passed=outcome.tests_passed,
            tests_failed=outcome.tests_failed,
            verify_output=outcome.output,
        )
    if reference_diff is not None:
        fields["diff_similarity"] = diff_similarity(diff, reference_diff)
    if log is not None:
        log.emit(Score, **fields)
    return fields
