"""Sessions mined from git history: one task per commit.

For each non-merge commit in a range that touches a source file:

    task            the commit message (subject and body)
    start state     the parent commit (`base_commit`, empty `base_diff`)
    reference_diff  the commit's diff of non-test files (`git diff --binary PARENT COMMIT`, split by
                    `split_test_changes`)
    test_patch      the commit's diff of test files: applied just before verify, not the agent's
                    job (the SWE-bench convention), so a fix's new tests are what verify runs
    verify          the command given (e.g. "python -m pytest -q tests/test_x.py")
    env             the project environment's set-up command given (`setup`), if any

The session file holds only the `session_start` event (source "mined"); `recap replay --model`
samples rollouts from it and scores them against the reference diff and the verify command.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from harness.errors import WorkspaceError
from harness.session import SCHEMA_VERSION, SessionStart, SessionWriter

log = logging.getLogger(__name__)

SOURCE_EXTENSIONS = (
    ".py", ".pyi", ".js", ".jsx", ".mjs", ".ts", ".tsx", ".go", ".rs", ".c", ".h", ".cc", ".cpp",
    ".hpp", ".java", ".kt", ".rb", ".php", ".cs", ".swift", ".scala", ".lua", ".sh", ".sql",
)


@dataclass(frozen=True)
class MinedSession:
    """One mined commit.

    Attributes:
        commit: the commit's full hash.
        parent: its parent's full hash (the start state).
        path: the written session file.
        files: the changed source files.
    """

    commit: str
    parent: str
    path: Path
    files: tuple[str, ...]


def is_source(path: str, *, globs: Sequence[str] | None = None) -> bool:
    """Whether `path` counts as source: it matches one of `globs` when given, else its extension
    is in `SOURCE_EXTENSIONS`."""
    if globs:
        return any(fnmatch.fnmatch(path, g) for g in globs)
    return os.path.splitext(path)[1].lower() in SOURCE_EXTENSIONS


_DIFF_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.M)


def is_test_path(path: str) -> bool:
    """Whether a repository-relative path is a test file: under a `test`/`tests`/`testing` folder,
    or named `test_*`, `*_test.*`, `*_tests.*`, `conftest.py`."""
    parts = path.split("/")
    name = parts[-1]
    stem = name.rsplit(".", 1)[0]
    return any(p in ("test", "tests", "testing") for p in parts[:-1]) or name.startswith("test_") \
        or stem.endswith(("_test", "_tests")) or name == "conftest.py"


def split_test_changes(diff: str) -> tuple[str, str]:
    """(non-test part, test part) of a git diff, file by file (`is_test_path` of the new path)."""
    starts = [m.start() for m in _DIFF_HEADER.finditer(diff)] + [len(diff)]
    source, tests = [diff[: starts[0]]], []
    for a, b in zip(starts, starts[1:]):
        chunk = diff[a:b]
        header = _DIFF_HEADER.match(chunk)
        (tests if header and is_test_path(header.group(2)) else source).append(chunk)
    return "".join(source), "".join(tests)


def _slug(subject: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:40] or "commit"


def mine_sessions(
    repo: str | os.PathLike[str],
    *,
    out_dir: str | os.PathLike[str],
    rev_range: str | None = None,
    verify: str | None = None,
    paths: Sequence[str] | None = None,
    on_commit: Callable[[str, bool], None] | None = None,
    setup: str | None = None,
) -> list[MinedSession]:
    """Write one session file per eligible commit of `repo` into `out_dir` (oldest first).

    Args:
        repo: a git repository.
        out_dir: where `<short-hash>-<subject-slug>.jsonl` files go (created).
        rev_range: a git revision range ("A..B", "HEAD~20..HEAD"); default: all of HEAD's history.
        verify: shell command recorded as each session's `verify`.
        paths: glob patterns of the files that count as source (default: by extension).
        on_commit: called with (hash, kept) for every commit looked at (progress).
        setup: the project environment's set-up command recorded in each session (None: none).
    Returns:
        The mined sessions. Merges, root commits and commits touching no source file are skipped.
    Raises:
        WorkspaceError: `repo` is not a git repository or the range does not resolve.
    """
    import git  # gitpython, lazily

    from shadow_backend.git_state import NO_DRIVER_FLAGS, open_user_repo

    try:  # plumbing and driver-free diffs only: the repository's own config runs nothing
        repository = open_user_repo(repo, search_parents=False)
        commits = list(repository.iter_commits(rev_range or "HEAD", reverse=True))
    except (WorkspaceError, git.GitCommandError, ValueError) as exc:
        raise WorkspaceError(f"cannot read the history of {repo} ({rev_range or 'HEAD'}): {exc}") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    root = str(Path(repository.working_tree_dir or repo).resolve())
    mined: list[MinedSession] = []
    for commit in commits:
        keep = len(commit.parents) == 1
        files: tuple[str, ...] = ()
        if keep:
            parent = commit.parents[0]
            changed = repository.git.diff("--name-only", "--no-renames", *NO_DRIVER_FLAGS,
                                          parent.hexsha, commit.hexsha).splitlines()
            files = tuple(f for f in changed if is_source(f, globs=paths))
            keep = bool(files)
        if on_commit is not None:
            on_commit(commit.hexsha, keep)
        if not keep:
            continue
        reference = repository.git.diff("--binary", "--no-renames", *NO_DRIVER_FLAGS, parent.hexsha, commit.hexsha)
        message = commit.message.strip()

        reference, test_patch = split_test_changes(reference + "\n" if reference else "")
        path = out / f"{commit.hexsha[:10]}-{_slug(message.splitlines()[0] if message else '')}.jsonl"
        path.unlink(missing_ok=True)  # re-mining replaces, never appends to, a session
        writer = SessionWriter(path)
        try:
            writer.emit(
                SessionStart,
                schema_version=SCHEMA_VERSION,
                session_id=f"mined-{commit.hexsha[:12]}",
                source="mined",
                repo=root,
                base_commit=parent.hexsha,
                base_diff="",
                task=message,
                model="",
                verify=verify,
                reference_diff=reference,
                test_patch=test_patch or None,
                env={"setup": setup, "include": []} if setup else None,
                meta={
                    "commit": commit.hexsha,
                    "author": commit.author.name,
                    "authored_at": commit.authored_datetime.isoformat(),
                    "files": list(files),
                },
            )
        finally:
            writer.close()
        mined.append(MinedSession(commit=commit.hexsha, parent=parent.hexsha, path=path, files=files))
    return mined
