"""Verifiable tasks from real packages: `recap tasks make --pypi NAME==VERSION --count N`.

SWE-smith's recipe (Yang et al. 2025, "SWE-smith: Scaling Data for Software Engineering Agents"),
small: take a real package whose source distribution ships its tests, check the tests pass,
inject one bug per task by an AST mutation, keep the mutations that make at least one test fail,
and write one session per bug whose `verify` is exactly those failing tests.

    download   `pip download --no-deps --no-binary :all: NAME==VERSION` (at preparation time, into
               a cache folder; third-party code is never committed to this repository)
    repo       the unpacked source becomes a git repository (one commit, fixed author and date)
    mutations  flipped comparison (`<` -> `>=`, `==` -> `!=`, `in` -> `not in`, ...), off-by-one
               (an integer literal n -> n + 1), dropped statement, swapped call arguments
    session    SessionStart(source="task", repo, base_commit, base_diff = the bug, verify = the
               failing tests, reference_diff = the fix), one file per task

Mutations are edits of the exact source span of one AST node, so the bug's diff is one hunk.

Threat model: the sdist is untrusted code (anyone can publish one). recap unpacks it (tarfile's
"data" filter: no links out, no devices) and writes the mutations itself, but every run of the
package's tests happens in a local shadow workspace of the unpacked repository, under the same
sandbox as the agent's commands (`shadow_backend.local`: no network, no host secrets, limits), never
on the host.
"""

from __future__ import annotations

import ast
import logging
import random
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from harness.errors import ConfigError
from harness.session import SCHEMA_VERSION, SessionStart
from shadow_backend.git_state import NEUTRAL_ATTRIBUTES, NO_DRIVER_FLAGS, hardened_env
from harness.workspace import Workspace
from shadow_backend.local import LocalBackend
from shadow_backend.scoring import with_interpreter_on_path

log = logging.getLogger(__name__)

_FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_GIT_ENV = {"GIT_AUTHOR_NAME": "recap", "GIT_AUTHOR_EMAIL": "recap@localhost", "GIT_COMMITTER_NAME": "recap",
            "GIT_COMMITTER_EMAIL": "recap@localhost", "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: replace `source[start:end]` (character offsets in `path`) by `text`.

    Attributes:
        kind: "flip_comparison", "off_by_one", "drop_statement" or "swap_arguments".
        path: repository-relative file.
        line: 1-based line of the mutated node.
        start, end: character offsets of the replaced span.
        text: the replacement.
        description: what changed, in words.
    """

    kind: str
    path: str
    line: int
    start: int
    end: int
    text: str
    description: str

    def apply(self, source: str) -> str:
        return source[: self.start] + self.text + source[self.end :]


def _offsets(source: str) -> list[int]:
    starts, total = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(total)
        total += len(line)
    starts.append(total)
    return starts


def mutations_of(source: str, path: str) -> Iterator[Mutation]:
    """Every candidate mutation of one module, in source order.

    Column offsets from `ast` count UTF-8 bytes; spans are converted to character offsets per line.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    starts = _offsets(source)

    def pos(lineno: int, col: int) -> int:
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    def span(node: ast.AST) -> tuple[int, int]:
        return pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
            new = ast.Compare(left=node.left, ops=[_FLIP[type(node.ops[0])]()], comparators=node.comparators)
            a, b = span(node)
            yield Mutation("flip_comparison", path, node.lineno, a, b, ast.unparse(new),
                           f"{ast.unparse(node)} -> {ast.unparse(new)}")
        elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 16:
            a, b = span(node)
            yield Mutation("off_by_one", path, node.lineno, a, b, str(node.value + 1),
                           f"{node.value} -> {node.value + 1}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(x, ast.Starred) for x in node.args[:2]):
            first, second = node.args[0], node.args[1]
            a1, b1 = span(first)
            a2, b2 = span(second)
            if b1 <= a2 and ast.unparse(first) != ast.unparse(second):
                text = source[a2:b2] + source[b1:a2] + source[a1:b1]
                yield Mutation("swap_arguments", path, node.lineno, a1, b2, text,
                               f"swapped {ast.unparse(first)} and {ast.unparse(second)} in {ast.unparse(node.func)}(...)")
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or len(body) < 2:
                continue
            for stmt in body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                                     ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)):
                    continue
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    continue  # a docstring
                first_line = lines[stmt.lineno - 1]
                if first_line[: stmt.col_offset].strip() or lines[stmt.end_lineno - 1].encode()[stmt.end_col_offset:].strip():
                    continue  # shares its line with other code
                a, b = starts[stmt.lineno - 1], starts[stmt.end_lineno]
                yield Mutation("drop_statement", path, stmt.lineno, a, b, "",
                               f"dropped `{ast.unparse(stmt).splitlines()[0][:60]}`")


# ---------------------------------------------------------------------------------------------
# the package: download, unpack, git repository, tests
# ---------------------------------------------------------------------------------------------
def download_sdist(requirement: str, cache: Path) -> Path:
    """The source distribution of `NAME==VERSION`, downloaded once into `cache/downloads`.

    Raises: ConfigError when pip cannot download it (network, no sdist, bad requirement).
    """
    if not re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9._+!-]+", requirement):
        raise ConfigError(f"--pypi wants NAME==VERSION (an exact pin), got {requirement!r}")
    name, version = requirement.split("==")
    folder = cache / "downloads"
    folder.mkdir(parents=True, exist_ok=True)
    norm = re.sub(r"[-_.]+", "[-_.]", name)
    pattern = re.compile(rf"^{norm}-{re.escape(version)}\.(tar\.gz|zip|tar\.bz2)$", re.IGNORECASE)
    found = [p for p in folder.iterdir() if pattern.match(p.name)]
    problem = ""
    # without build isolation first (fast: this interpreter's setuptools reads the metadata), then
    # with it, for packages whose build backend is not installed here (hatchling, setuptools_scm)
    for isolation in (["--no-build-isolation"], []):
        if found:
            break
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", *isolation,
             "-q", requirement, "-d", str(folder)],
            capture_output=True, text=True, timeout=600,
        )
        found = [p for p in folder.iterdir() if pattern.match(p.name)]
        if not found:
            problem = proc.stderr.strip()[-500:]
    if not found:
        raise ConfigError(f"pip could not download the sdist of {requirement}: {problem}")
    return found[0]


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack an sdist into `dest` (replaced); returns the source root (the single top folder)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")
    entries = [p for p in dest.iterdir()]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


def _git(repo: Path, *args: str) -> str:
    """git in the task repository: no user or system config, nothing the unpacked source could
    configure runs (`shadow_backend.git_state.hardened_env`)."""
    import os

    env = {**os.environ, **_GIT_ENV, **hardened_env(isolated=True)}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout


def make_repo(source: Path) -> str:
    """Turn the unpacked source into a one-commit git repository; returns the commit id.
    Bytecode and test caches are excluded (`.git/info/exclude`) so they never show in diffs.
    Every `.git` the archive holds is removed first (a nested repository would become a gitlink,
    and git runs `git status` inside one, under its config), and the source's `.gitattributes`
    are neutralised (`NEUTRAL_ATTRIBUTES`): blobs are the bytes unpacked."""
    for found in sorted(source.rglob(".git"), key=lambda p: len(p.parts), reverse=True):
        if found.is_dir() and not found.is_symlink():
            shutil.rmtree(found)
        else:
            found.unlink()
    for cache_dir in list(source.rglob("__pycache__")):
        shutil.rmtree(cache_dir, ignore_errors=True)
    _git(source, "init", "-q")
    (source / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (source / ".git" / "info" / "exclude").write_text("__pycache__/\n*.pyc\n.pytest_cache/\n", encoding="utf-8")
    (source / ".git" / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES, encoding="utf-8")
    _git(source, "add", "-A")
    _git(source, "commit", "-q", "-m", "unpacked source distribution")
    return _git(source, "rev-parse", "HEAD").strip()


def pytest_command(source: Path, tests: list[str] | None = None) -> str:
    """The shell command that runs the package's tests (or `tests`) from the repository root.

    It says `python3`, not this interpreter's path, so that a session holding it works from another
    checkout or in a container; it is run (here and when scoring) with the running interpreter's bin
    directory first on PATH (`shadow_backend.scoring.with_interpreter_on_path`)."""
    prefix = "PYTHONDONTWRITEBYTECODE=1 "
    if (source / "src").is_dir():
        prefix += "PYTHONPATH=src "
    selection = " ".join(shlex.quote(t) for t in tests) if tests else ""
    return f"{prefix}python3 -m pytest -q -p no:cacheprovider -o addopts= -rfE {selection}".strip()


def run_tests(workspace: Workspace, source: Path, *, timeout_s: float, tests: list[str] | None = None) -> tuple[int, str]:
    """(exit code, output) of the package's tests (or `tests`) run in `workspace`, a shadow copy of
    `source` (the sandbox applies); exit code -9 on timeout."""
    result = workspace.run(with_interpreter_on_path(pytest_command(source, tests)), timeout_s=timeout_s)
    if result.timed_out:
        return -9, "timed out"
    return result.exit_code, result.stdout + result.stderr


def _is_test_file(path: str) -> bool:
    name = Path(path).name
    parts = Path(path).parts
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or "tests" in parts \
        or "test" in parts or name == "setup.py" or "docs" in parts


# ---------------------------------------------------------------------------------------------
# tasks
# ---------------------------------------------------------------------------------------------
def make_tasks(requirement: str, *, count: int, out_dir: Path, cache_dir: Path, seed: int = 0,
               test_timeout_s: float = 120.0, max_verify_tests: int = 5, setup: str | None = None) -> list[Path]:
    """Make up to `count` task sessions from one PyPI package.

    Args:
        requirement: "NAME==VERSION".
        count: tasks wanted (fewer when the package offers fewer failing mutations).
        out_dir: where the session files go (`task-NAME-VERSION-K.jsonl`).
        cache_dir: downloads, unpacked source and the git repository live here (the sessions'
            `repo` points into it, so keep it).
        seed: order in which mutation candidates are tried.
        test_timeout_s: timeout of one test-suite run.
        max_verify_tests: at most this many failing test ids go into `verify`.
        setup: a project environment set-up command recorded in each session (e.g. "pip install
            -e . pytest"): rollouts and scoring then run the package's tests in it.
    Returns:
        The session files written.
    Raises:
        ConfigError: download failure, or the unmutated tests do not pass.
    """
    if count < 1:
        raise ConfigError("--count must be >= 1")
    archive = download_sdist(requirement, cache_dir)
    source = unpack(archive, cache_dir / "src" / requirement.replace("==", "-"))
    base_commit = make_repo(source)
    with LocalBackend.create(source) as workspace:
        return _mutate(requirement, source, base_commit, workspace, count=count, out_dir=out_dir, seed=seed,
                       test_timeout_s=test_timeout_s, max_verify_tests=max_verify_tests, setup=setup)


def _mutate(requirement: str, source: Path, base_commit: str, workspace: Workspace, *, count: int, out_dir: Path,
            seed: int, test_timeout_s: float, max_verify_tests: int, setup: str | None) -> list[Path]:
    """`make_tasks` once the repository is made: each candidate mutation is written to `source`
    (for its diff) and to `workspace` (where the tests run), then undone in both."""
    code, output = run_tests(workspace, source, timeout_s=test_timeout_s)
    if code != 0:
        raise ConfigError(f"the tests of {requirement} do not pass before any mutation (exit {code}):\n{output[-1500:]}")
    modules = [p for p in sorted(source.rglob("*.py")) if ".git" not in p.parts
               and not _is_test_file(str(p.relative_to(source)))]
    candidates = []
    for module in modules:
        rel = module.relative_to(source).as_posix()
        try:
            candidates.extend(mutations_of(module.read_text(encoding="utf-8"), rel))
        except (SyntaxError, UnicodeDecodeError):
            continue
    random.Random(seed).shuffle(candidates)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = requirement.replace("==", "-")
    written: list[Path] = []
    seen_kinds: dict[str, int] = {}
    for mutation in candidates:
        if len(written) >= count:
            break
        # prefer variety: skip a kind already used twice as often as the rarest one
        if seen_kinds and seen_kinds.get(mutation.kind, 0) > min(seen_kinds.values()) + 1 and len(seen_kinds) >= 3:
            continue
        target = source / mutation.path
        original = target.read_text(encoding="utf-8")
        mutated = mutation.apply(original)
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        target.write_text(mutated, encoding="utf-8")
        workspace.write_bytes(mutation.path, mutated.encode("utf-8"))
        try:
            code, output = run_tests(workspace, source, timeout_s=test_timeout_s)
            failing = sorted(set(_FAILED.findall(output)))
            diff = ["diff", "--binary", *NO_DRIVER_FLAGS]
            bug = _git(source, *diff) if code != 0 and failing else ""
            fix = _git(source, *diff, "-R", "--src-prefix=a/", "--dst-prefix=b/") if bug else ""  # the reverse: the known-good fix
        finally:
            target.write_text(original, encoding="utf-8")
            workspace.write_bytes(mutation.path, original.encode("utf-8"))
        if not bug:
            continue
        verify = pytest_command(source, failing[:max_verify_tests])
        index = len(written)
        start = SessionStart(
            seq=0, ts=time.time(), schema_version=SCHEMA_VERSION, session_id=f"task-{name}-{index}",
            source="task", repo=str(source.resolve()), base_commit=base_commit, base_diff=bug,
            task=(f"Some tests of this project fail: {', '.join(failing[:max_verify_tests])}. "
                  f"Find the bug in the source code and fix it. Do not change the tests. "
                  f"Check with: {verify}"),
            model="", verify=verify, reference_diff=fix, env={"setup": setup, "include": []} if setup else None,
            meta={"package": requirement, "mutation": mutation.kind, "file": mutation.path, "line": mutation.line,
                  "description": mutation.description, "failing_tests": len(failing)},
        )
        path = out_dir / f"task-{name}-{index}.jsonl"
        path.write_text(start.model_dump_json() + "\n", encoding="utf-8")
        written.append(path)
        seen_kinds[mutation.kind] = seen_kinds.get(mutation.kind, 0) + 1
        log.info("task %d: %s %s:%d (%d failing tests)", index, mutation.kind, mutation.path, mutation.line, len(failing))
    return written

