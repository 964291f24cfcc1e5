"""The `Workspace` protocol: the only way tools touch files and run commands.

The consumer (the harness) owns the interface; backends in `shadow_backend` (local directory,
Docker container) match it structurally. Paths are POSIX, relative to the workspace root, and
every one goes through `confine`: anything that would leave the root or reach the sealed `.git`
raises `PathOutsideWorkspace`, a path no file system can hold raises `InvalidPath`, and a FIFO,
socket or device raises `NotRegularFile` (all `ToolError`s: the policy reads them).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol, Sequence, runtime_checkable

from harness.errors import InvalidPath, NotRegularFile, PathOutsideWorkspace


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command.

    Attributes:
        exit_code: the process exit status; -9 (or the negated signal) when killed, 127 when the
            program was not found.
        stdout, stderr: decoded as UTF-8 with replacement; not yet truncated.
        timed_out: True when the timeout fired and the process group was killed.
        duration_s: wall-clock seconds.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float


@runtime_checkable
class Workspace(Protocol):
    """An isolated replica of a repository where the agent acts.

    All `path` arguments are workspace-relative POSIX paths ("." is the root).
    Errors: `PathOutsideWorkspace` for a path leaving the root or reaching `.git` (through symlinks
    too), `InvalidPath` for a path no file system can hold, `NotRegularFile` for a FIFO, socket or
    device (never opened, so never blocking), `FileNotFoundError`, `IsADirectoryError`,
    `NotADirectoryError` and other `OSError`s as for the host file system.
    """

    @property
    def root(self) -> str:
        """Where the files live on the host (for display and host-side tools)."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or overwrite a file, creating parent directories."""
        ...

    def delete(self, path: str) -> None:
        """Delete a file (not a directory)."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def list_files(self, path: str = ".") -> list[str]:
        """Every file below `path`, recursively, sorted, as workspace-relative POSIX paths.

        `.git` and paths ignored by the repository's `.gitignore` are left out.
        """
        ...

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        """Run a command with the workspace root as cwd.

        A `str` runs through `bash -c`; a sequence is executed directly. On timeout the whole
        process group is killed and the result has `timed_out=True` (no exception).
        """
        ...

    def interrupt(self) -> None:
        """Kill the commands running now; callable from any thread (cancelling a session
        mid-command). Each interrupted `run` returns what its command printed so far."""
        ...

    def diff(self) -> str:
        """Unified diff (git format, `a/` `b/` prefixes) of the current state against the start state."""
        ...

    def close(self) -> None:
        """Release every resource (directories, containers). Idempotent."""
        ...


MAX_NAME_BYTES = 255
"""Longest file name (one path component) a path may hold, in UTF-8 bytes (Linux's NAME_MAX)."""

MAX_PATH_BYTES = 4095
"""Longest host path (workspace root + relative path) a path may resolve to, in bytes (PATH_MAX - 1)."""

MAX_PATH_DEPTH = 256
"""Most components a workspace path may have: deeper trees would overflow Python's recursion in
directory walks (`os.walk`, `shutil.rmtree`) of the backend."""

_SEALED = ".git"
"""No path may reach a directory (or file) of this name, compared case-insensitively as git's own
`verify_path` does (a case-insensitive file system maps `.GIT` to `.git`)."""


def check_path(path: object) -> str:
    """Validate a workspace-relative path given by the policy, before it touches the file system.

    Returns:
        `path` unchanged.
    Raises:
        PathOutsideWorkspace: not a string, empty, absolute or `~`, with a `..` or a `.git` component.
        InvalidPath: a NUL byte, a lone surrogate (no file name can hold one), a component longer
            than `MAX_NAME_BYTES`, or more than `MAX_PATH_DEPTH` components.
    """
    if not isinstance(path, str) or path == "":
        raise PathOutsideWorkspace("empty path; use '.' for the workspace root")
    shown = _shown(path)
    if "\0" in path:
        raise InvalidPath(f"path {shown} refused: it contains a NUL byte")
    try:
        encoded = os.fsencode(path)  # surrogateescape: the undecodable bytes of a listed name pass
    except UnicodeEncodeError:
        raise InvalidPath(f"path {shown} refused: it contains a lone surrogate, "
                          "which no file name can hold") from None
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise PathOutsideWorkspace(f"absolute path {shown} refused: use a path relative to the workspace root")
    if ".." in pure.parts:
        raise PathOutsideWorkspace(f"path {shown} refused: '..' is not allowed")
    if len(pure.parts) > MAX_PATH_DEPTH:
        raise InvalidPath(f"path {shown} refused: {len(pure.parts):,} components, "
                          f"at most {MAX_PATH_DEPTH} are allowed")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > MAX_NAME_BYTES:
        raise InvalidPath(f"path {shown} refused: a name of {len(longest):,} bytes, "
                          f"at most {MAX_NAME_BYTES} are allowed")
    if any(part.lower() == _SEALED for part in pure.parts):
        raise PathOutsideWorkspace(f"path {shown} refused: the .git directory is sealed")
    return path


def _shown(path: str) -> str:
    """`path` for an error message: quoted, escaped, at most 200 characters."""
    text = repr(path)  # escapes NUL bytes and lone surrogates
    return text if len(text) <= 200 else f"{text[:120]}...{text[-40:]} ({len(path):,} characters)"


def confine(root: str | os.PathLike[str], path: str) -> Path:
    """Resolve a workspace-relative `path` under `root` on the host file system.

    The one check every path the policy gives goes through (the backends call it for each file
    operation). Threat model: `path` and everything in the workspace (symlinks, FIFOs, devices,
    sockets, a `.git` made by a command) are untrusted; the root itself is trusted. The path is
    validated (`check_path`), then resolved through every symlink (chains included), and the
    *resolved* path must stay inside `root`, hold no `.git` component and, if it exists, be a
    regular file or a directory. Callers that open the result must still open it without blocking
    (`O_NONBLOCK`) and check what they opened: a command may swap the file in between.

    Returns:
        The absolute host path (symlinks resolved).
    Raises:
        PathOutsideWorkspace, InvalidPath: `check_path` refuses it.
        PathOutsideWorkspace: it resolves (through symlinks) outside `root` or into a `.git`, or
            through a symlink chain too long to follow.
        InvalidPath: it resolves to a host path longer than `MAX_PATH_BYTES`.
        NotRegularFile: it resolves to a FIFO, socket or device.
    """
    check_path(path)
    base = Path(root).resolve()
    try:
        target = (base / path).resolve()
    except (RecursionError, RuntimeError):  # a very long symlink chain (or a loop, before 3.13)
        raise PathOutsideWorkspace(f"path {_shown(path)} refused: too many levels of symbolic links") from None
    if target != base and base not in target.parents:
        raise PathOutsideWorkspace(f"path {_shown(path)} refused: it resolves outside the workspace")
    if any(part.lower() == _SEALED for part in target.relative_to(base).parts):
        raise PathOutsideWorkspace(f"path {_shown(path)} refused: it leads into the sealed .git directory")
    if len(os.fsencode(target)) > MAX_PATH_BYTES:
        raise InvalidPath(f"path {_shown(path)} refused: longer than {MAX_PATH_BYTES:,} bytes on the host")
    try:
        mode = target.stat().st_mode
    except OSError:  # missing (the caller says so), a loop, or a dangling link
        return target
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise special_file_error(path, mode)
    return target


def special_file_error(path: str, mode: int) -> NotRegularFile:
    """The error for `path`, whose `st_mode` is `mode`, being a FIFO, socket or device."""
    kinds = [(stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    kind = next((words for test, words in kinds if test(mode)), "a special file")
    return NotRegularFile(f"{_shown(path)} is {kind}, not a regular file or a directory; file tools refuse it")


@dataclass(frozen=True)
class Environment:
    """The project's own toolchain, made by a set-up command (`shadow_backend.environment`).

    Attributes:
        setup: the shell command that builds it (e.g. "pip install -e . pytest"), run once per key
            with network access, in a fresh virtualenv that is first on the commands' PATH.
        include: git-ignored files or glob patterns (workspace-relative) copied from the user's
            checkout into every workspace.
        key: what the built environment is cached under (a hash of `setup`, `include`, the files
            that define the environment and the interpreter); "" until a backend has built it.
        output: the set-up command's output when it was built (bounded), "" until then.
        from_session: the set-up command was read from a session file, which is untrusted: a
            backend reuses a cached build of its key but never runs it (set-up commands have the
            network); the user's `--setup recorded` clears this. Not recorded in sessions.
    """

    setup: str
    include: tuple[str, ...] = ()
    key: str = ""
    output: str = ""
    from_session: bool = False


@dataclass(frozen=True)
class WorkspaceOrigin:
    """Where a shadow workspace came from: what a session records to rebuild its start state.

    Attributes:
        repo: the user's repository (absolute path) or a description of the source.
        base_commit: the commit the workspace starts from (None for a non-git directory).
        base_diff: binary-safe unified diff from `base_commit` to the start state
            (staged + unstaged + untracked-not-ignored changes).
        buffers: unsaved editor buffers applied on top (workspace-relative path -> text).
        sandbox: how commands are isolated, in words ("bwrap: no network", "none: bubblewrap missing",
            "docker: network_mode=none").
        env: the project environment commands run in (None: the host toolchain as it is).
    """

    repo: str
    base_commit: str | None = None
    base_diff: str = ""
    buffers: dict[str, str] = field(default_factory=dict)
    sandbox: str = ""
    env: Environment | None = None
