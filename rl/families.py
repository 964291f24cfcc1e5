"""Synthetic verifiable task families: `recap tasks make --family NAME --repo PATH --count N`.

Before spending a GPU on real bugs, check that learning works at all on tasks whose outcome is exact
and whose difficulty is graded. Each family makes tasks from the HEAD commit of any git repository:

    family         difficulty  the task says                                        verify checks
    delete-file    1           Delete the file PATH.                                 PATH is gone
    create-file    2           Create PATH containing exactly this one line: ...     PATH's bytes
    replace-line   3           In PATH, replace line N, which reads ..., by ...      PATH's bytes
    rename-symbol  4           In PATH, rename the word OLD to NEW (all K times)     PATH's bytes
    fix-syntax     5           PATH has a syntax error at line N (Python says ...)   PATH's bytes

"Bytes" means the exact content, except that the final newline may be added or dropped. Every verify
also checks that up to two other files of the repository (witnesses, seeded) are unchanged, so that
deleting everything does not pass "delete PATH". Each task is one session file (`SessionStart` with
source "task", the repository, its HEAD commit, `base_diff` = the start state's edits (fix-syntax
only), `verify`, `reference_diff` = the gold edit). Before a task is written its verify is run in a
real shadow workspace (`shadow_backend.local.LocalBackend`), as scoring runs it: it must fail on the
start state and pass once the gold edit is applied.

Threat model. The repository is untrusted: only regular files whose paths match `SAFE_PATH` (no
leading dot or dash, no quoting, no `..`) are named in tasks; contents are read from git objects,
never executed, and go only into the task text (which the model would read anyway). The agent is
untrusted: the verify is inline in the session, a `python3 -I -c PROGRAM TABLE` whose table maps each
checked path to the SHA-256 digests it may have (or null: absent), so no file the agent can change
takes part in checking: `-I` keeps the workspace (the cwd) off `sys.path` and ignores `PYTHON*`
variables; the interpreter is found first in recap's own bin directory (`with_interpreter_on_path`),
which the sandbox mounts read-only; a symlink or a special file never matches a digest, and a FIFO is
never opened. Limit: in a Docker workspace the image's `python3` runs the verify, and an agent running
as root there could replace it.

The files a verify checks are the task's targets, not a verify script: they appear only inside the
one JSON argument, so `rl.rewards.edit_tests_penalty` does not count an edit of them as an edit of
the verify (tested). Targets are never test files (`rl.rewards.TEST_FILE_GLOBS`), which it protects.

Determinism: the same commit, family, count and seed give the same tasks (fix-syntax keeps only
errors that the running Python reports at the edited line, so on the same Python minor version).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import keyword
import logging
import random
import re
import shlex
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from harness.errors import ConfigError
from harness.session import SCHEMA_VERSION, SessionStart
from harness.workspace import WorkspaceOrigin
from rl.rewards import TEST_FILE_GLOBS
from shadow_backend import git_state
from shadow_backend.local import LocalBackend
from shadow_backend.scoring import run_verify

log = logging.getLogger(__name__)

SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
"""Paths a task may name: nothing a shell, a Markdown reader or `..` could misread."""

MAX_TEXT_BYTES = 64 * 1024
"""Larger files are not used for the text families (replace, rename, fix)."""

VERIFY_PROGRAM = (
    "import hashlib,json,os,sys;t=json.loads(sys.argv[1]);"
    "bad=[p for p,h in t.items() if (os.path.lexists(p) if h is None else not (os.path.isfile(p) "
    "and not os.path.islink(p) and hashlib.sha256(open(p,\"rb\").read()).hexdigest() in h))];"
    "bad and sys.exit(\"not as asked: \"+\" \".join(bad))"
)
"""The verify program: exit 0 when every path of the table is as it says, else 1 naming the others."""

_WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "heron", "iris", "jade", "kelp",
          "lumen", "maple", "nova", "onyx", "pearl", "quartz", "raven", "sage", "tundra", "umber", "vale",
          "willow", "yarrow", "zephyr")
_IDENT = r"(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"
_NAME = re.compile(_IDENT.format(r"[A-Za-z_][A-Za-z0-9_]{3,}"))
_RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | {
    "self", "this", "true", "false", "null", "None", "function", "const", "return", "import", "export",
    "struct", "public", "private", "static", "void", "string", "class", "async", "await"}


@dataclass(frozen=True)
class Draft:
    """One task before checking.

    Attributes:
        task: the instruction the agent gets.
        gold: the edit that solves it, from the start state: path -> the bytes the file must end up
            holding, or None for "absent". These are also what the verify checks.
        start: edits from the HEAD commit to the start state (same shape; empty for most families).
        meta: what was chosen (file, line, names), recorded in the session.
    """

    task: str
    gold: dict[str, bytes | None]
    start: dict[str, bytes | None] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class RepoFiles:
    """The files of a repository's HEAD commit that tasks may name, read from git objects.

    Attributes:
        root: the working tree root. head: the HEAD commit id.
        paths: every regular file of HEAD with a `SAFE_PATH` name, sorted.
        targets: those of `paths` that are not test files (`TEST_FILE_GLOBS`).
    Raises (constructor): ConfigError when `repo` is not a git repository with a commit.
    """

    def __init__(self, repo: str | Path) -> None:
        view = git_state.read_user_view(repo)
        if not view.is_git or view.head is None:
            raise ConfigError(f"{repo} is not a git repository with a commit; --family makes tasks from HEAD")
        self.root, self.head = view.toplevel, view.head
        self._taken = {e.path for e in view.head_entries} | {
            str(parent) for e in view.head_entries for parent in PurePosixPath(e.path).parents}
        self._sha = {e.path: e.sha for e in view.head_entries
                     if e.mode in ("100644", "100755") and SAFE_PATH.fullmatch(e.path)}
        self.paths = sorted(self._sha)
        self.targets = [p for p in self.paths if not is_test_file(p)]
        self._data: dict[str, bytes] = {}

    def taken(self, path: str) -> bool:
        """Whether HEAD has a file or a folder at `path`."""
        return path in self._taken

    def data(self, path: str) -> bytes:
        if path not in self._data:
            sha = self._sha[path]
            self._data[path] = dict(git_state.stream_blobs(self.root, [sha]))[sha]
        return self._data[path]

    def text(self, path: str) -> str | None:
        """The file as text, or None when it is large, binary or not UTF-8."""
        data = self.data(path)
        if len(data) > MAX_TEXT_BYTES or b"\0" in data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None


def is_test_file(path: str) -> bool:
    """Whether `rl.rewards` counts `path` as a test file (an edit there is penalized)."""
    return any(fnmatch.fnmatch(path, g) for g in TEST_FILE_GLOBS)


def verify_command(expect: dict[str, bytes | None]) -> str:
    """The inline verify of `expect` (path -> final bytes, or None for absent): a file passes with
    exactly those bytes, or with its final newline added or dropped."""
    def digests(data: bytes) -> list[str]:
        other = data[:-1] if data.endswith(b"\n") else data + b"\n"
        return [hashlib.sha256(data).hexdigest(), hashlib.sha256(other).hexdigest()]

    table = {path: None if data is None else digests(data) for path, data in sorted(expect.items())}
    return f"python3 -I -c {shlex.quote(VERIFY_PROGRAM)} {shlex.quote(json.dumps(table, separators=(',', ':')))}"


# ---------------------------------------------------------------------------------------------
# the families: (files, rng) -> Draft, or None when this draw found nothing usable
# ---------------------------------------------------------------------------------------------
def delete_file(files: RepoFiles, rng: random.Random) -> Draft | None:
    path = rng.choice(files.targets)
    return Draft(task=f"Delete the file {path}.", gold={path: None}, meta={"file": path})


def create_file(files: RepoFiles, rng: random.Random) -> Draft | None:
    folder = rng.choice(sorted({str(PurePosixPath(p).parent) for p in files.paths}))
    name = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}.txt"
    path = name if folder == "." else f"{folder}/{name}"
    line = " ".join(rng.choice(_WORDS) for _ in range(3)) + f" {rng.randrange(100, 1000)}"
    if files.taken(path):
        return None
    return Draft(task=f"Create the file {path} containing exactly this one line: {line}",
                 gold={path: (line + "\n").encode()}, meta={"file": path, "line": line})


def _showable(line: str) -> bool:
    body = line.rstrip("\r\n").strip()
    return 0 < len(body) <= 120 and body.replace("\t", " ").isprintable()


def replace_line(files: RepoFiles, rng: random.Random) -> Draft | None:
    path = rng.choice(files.targets)
    text = files.text(path)
    if text is None:
        return None
    lines = text.splitlines(keepends=True)
    counts = Counter(lines)
    candidates = [i for i, line in enumerate(lines) if counts[line] == 1 and _showable(line)]
    if not candidates:
        return None
    i = rng.choice(candidates)
    body = lines[i].rstrip("\r\n")
    indent = body[: len(body) - len(body.lstrip())]
    new = " ".join(rng.choice(_WORDS) for _ in range(3))
    lines[i] = indent + new + lines[i][len(body):]
    return Draft(task=f"In {path}, replace line {i + 1}, which reads:\n{body.strip()}\nby this line, keeping its "
                      f"indentation:\n{new}\nChange nothing else.",
                 gold={path: "".join(lines).encode()}, meta={"file": path, "line": i + 1, "old": body, "new": new})


def _fresh_name(old: str, rng: random.Random, text: str) -> str | None:
    for _ in range(5):
        a, b = rng.choice(_WORDS), rng.choice(_WORDS)
        if "_" in old or old.islower():
            new = f"{a}_{b}"
        else:
            new = (a.capitalize() if old[0].isupper() else a) + b.capitalize()
        if new not in text:
            return new
    return None


def rename_symbol(files: RepoFiles, rng: random.Random) -> Draft | None:
    path = rng.choice(files.targets)
    text = files.text(path)
    if text is None:
        return None
    counts = Counter(_NAME.findall(text))
    names = sorted(n for n, k in counts.items() if 2 <= k <= 12 and n not in _RESERVED)
    if not names:
        return None
    old = rng.choice(names)
    new = _fresh_name(old, rng, text)
    if new is None:
        return None
    renamed = re.sub(_IDENT.format(re.escape(old)), new, text)
    return Draft(task=f"In {path}, rename `{old}` to `{new}`: replace all {counts[old]} occurrences of the whole "
                      f"word `{old}` in that file, and change nothing else.",
                 gold={path: renamed.encode()}, meta={"file": path, "old": old, "new": new, "occurrences": counts[old]})


def _syntax_error(source: str, path: str) -> SyntaxError | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return exc
        except ValueError:  # NUL bytes
            return SyntaxError("source code cannot contain null bytes")
    return None


def fix_syntax(files: RepoFiles, rng: random.Random) -> Draft | None:
    """Drop a line's final `:` or `)`; kept only when Python then reports an error at that line."""
    modules = [p for p in files.targets if p.endswith(".py")]
    if not modules:
        return None
    path = rng.choice(modules)
    text = files.text(path)
    if text is None or _syntax_error(text, path) is not None:
        return None
    lines = text.splitlines(keepends=True)
    spots = [i for i, line in enumerate(lines) if line.rstrip().endswith((":", ")")) and _showable(line)]
    for i in rng.sample(spots, min(len(spots), 8)):
        body = lines[i].rstrip()
        broken = lines[:i] + [body[:-1] + lines[i][len(body):]] + lines[i + 1 :]
        error = _syntax_error("".join(broken), path)
        if error is not None and error.lineno == i + 1:
            return Draft(task=f"{path} has a syntax error at line {i + 1} (Python says: {error.msg}). Fix that line "
                              f"and change nothing else.",
                         gold={path: text.encode()}, start={path: "".join(broken).encode()},
                         meta={"file": path, "line": i + 1, "removed": body[-1], "error": error.msg})
    return None


@dataclass(frozen=True)
class Family:
    """A task family: its CLI name, difficulty rank (1 easiest) and maker."""

    name: str
    difficulty: int
    make: Callable[[RepoFiles, random.Random], Draft | None]


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("delete-file", 1, delete_file),
    Family("create-file", 2, create_file),
    Family("replace-line", 3, replace_line),
    Family("rename-symbol", 4, rename_symbol),
    Family("fix-syntax", 5, fix_syntax),
)}
"""Every family by name, easiest first."""


# ---------------------------------------------------------------------------------------------
# making and checking tasks
# ---------------------------------------------------------------------------------------------
def _apply(workspace: Any, edits: dict[str, bytes | None]) -> None:
    for path, data in edits.items():
        if data is None:
            workspace.delete(path)
        else:
            workspace.write_bytes(path, data)


def _checked_diffs(origin: WorkspaceOrigin, draft: Draft, verify: str) -> tuple[str, str] | None:
    """(base_diff, reference_diff) when `verify` fails on the start state and passes after the gold
    edit, in real shadow workspaces; else None."""
    base_diff = ""
    if draft.start:
        with LocalBackend.from_origin(origin) as ws:
            _apply(ws, draft.start)
            base_diff = ws.diff()
    with LocalBackend.from_origin(dataclasses.replace(origin, base_diff=base_diff)) as ws:
        if run_verify(ws, verify, timeout_s=60).passed:
            return None
        _apply(ws, draft.gold)
        reference_diff = ws.diff()
        outcome = run_verify(ws, verify, timeout_s=60)
        if not outcome.passed:
            log.warning("a gold edit failed its own verify (skipped): %s", outcome.output[-300:])
            return None
    return base_diff, reference_diff


def make_family_tasks(family: str, *, repo: str | Path, count: int, out_dir: Path, seed: int = 0,
                      witnesses: int = 2, attempts_per_task: int = 50) -> list[Path]:
    """Make up to `count` tasks of one family from the HEAD commit of `repo`.

    Args:
        family: a name in `FAMILIES`.
        repo: a git working tree (any folder inside one).
        count: tasks wanted; fewer (with a warning) when the repository offers fewer distinct ones.
        out_dir: where the sessions go (`FAMILY-sSEED-K.jsonl`).
        seed: seeds every choice; the same seed and commit give the same tasks.
        witnesses: other files each verify checks are unchanged.
        attempts_per_task: draws per wanted task before giving up.
    Returns:
        The session files written.
    Raises:
        ConfigError: unknown family, count < 1, not a git repository with a commit, or no file to use.
    """
    if family not in FAMILIES:
        raise ConfigError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    if count < 1:
        raise ConfigError("--count must be >= 1")
    spec = FAMILIES[family]
    files = RepoFiles(repo)
    if not files.targets:
        raise ConfigError(f"{files.root} has no file a task can name (regular, plain name, not a test file)")
    rng = random.Random(f"{family}:{seed}")
    origin = WorkspaceOrigin(repo=str(files.root), base_commit=files.head)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    seen: set[str] = set()
    for _ in range(count * attempts_per_task):
        if len(written) >= count:
            break
        draft = spec.make(files, rng)
        if draft is None or draft.task in seen or any(is_test_file(p) for p in draft.gold):
            continue
        seen.add(draft.task)
        others = [p for p in files.paths if p not in draft.gold and p not in draft.start]
        expect = {**{p: files.data(p) for p in rng.sample(others, min(witnesses, len(others)))}, **draft.gold}
        verify = verify_command(expect)
        diffs = _checked_diffs(origin, draft, verify)
        if diffs is None:
            continue
        session_id = f"{family}-s{seed}-{len(written)}"
        start = SessionStart(
            seq=0, ts=time.time(), schema_version=SCHEMA_VERSION, session_id=session_id, source="task",
            repo=str(files.root), base_commit=files.head, base_diff=diffs[0], task=draft.task, model="",
            verify=verify, reference_diff=diffs[1],
            meta={"family": family, "difficulty": spec.difficulty, "seed": seed, **draft.meta},
        )
        path = out_dir / f"{session_id}.jsonl"
        path.write_text(start.model_dump_json() + "\n", encoding="utf-8")
        written.append(path)
        log.info("task %s: %s", session_id, draft.task.splitlines()[0])
    if len(written) < count:
        log.warning("%s: made %d of %d tasks (the repository offers no more distinct ones)", family, len(written), count)
    return written
