"""Git plumbing of the shadow backend, through GitPython, with every host-side git command
unable to run anything a repository or a workspace configures.

Two sides:

- The user's repository is only ever *read*, with plumbing (`ls-files`, `ls-tree`, `cat-file`)
  under `hardened_env`: nothing is written under its `.git` (`GIT_OPTIONAL_LOCKS=0`, no index
  refresh, no checkout there), its fsmonitor and hooks are forced off, no transport may run (a
  partial clone's lazy fetch would start the remote's command) and no filter, textconv or external
  diff is ever asked for. That holds for a repository owned by another user too, which is why
  recap may read one (with an explicit `GIT_DIR`) where plain `git status` refuses: the
  repository's own config is parsed but nothing in it is executed. `core.worktree` pointing away
  from the directory that holds `.git` is refused, and no path through a symlinked directory is
  copied, so a repository cannot make recap copy host files into a workspace.
- The workspace's repository (`ShadowRepo`) lives in a git directory *outside* the workspace root
  (`GIT_DIR`, `GIT_WORK_TREE`), which neither sandbox can write; it holds exactly two commits,
  `base` (the user's HEAD tree) and `start` (base + the user's changes + unsaved buffers), so the
  agent sees no history it was not given. `seal` puts a copy of it at `root/.git` for the agent's
  own git commands; recap never reads that copy again. The workspace's git commands read no user
  or system config (only the git directory's own config, which recap wrote), use a fixed identity
  and date (the same trees always give the same commit ids), and neutralise the working tree's
  `.gitattributes` (`NEUTRAL_ATTRIBUTES` in `info/attributes`): files are taken as the bytes on
  disk, with no filter, eol conversion, encoding or diff driver. Nested repositories in the
  working tree are never added (no gitlinks), so git never runs inside one.

Limits: submodules (gitlinks) are left out of the workspace; clean/smudge filters (Git LFS, eol
conversion) are not applied, files are taken as the bytes on disk, so a repository whose working
files differ from their blobs through a filter shows those files as changed in `base_diff`. A path
inside a repository stands for the whole repository (its top level).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import git

from harness.errors import WorkspaceError
from shadow_backend.fork import copy_tree

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""The id of git's empty tree (SHA-1 repositories)."""

_GITLINK = "160000"

NEUTRAL_ATTRIBUTES = "* -text !eol !diff -filter -ident !working-tree-encoding\n"
"""`info/attributes` of a repository recap writes to: it outranks every `.gitattributes` of the
working tree, so files are stored as the bytes on disk (no eol conversion, encoding, ident or
filter) and diffs use git's own text/binary detection (no diff driver, hence no textconv)."""

_NO_CODE_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.attributesFile", os.devnull),
    ("submodule.recurse", "false"),
)
"""Command-line config (it outranks every config file) of every host-side git command."""

_NO_CODE_ENV = {
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "",  # no transport at all, whatever the config allows (lazy fetch, ext::)
    "GIT_NO_LAZY_FETCH": "1",  # git >= 2.44 says it directly
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
}

_IDENTITY_ENV = {
    "GIT_LITERAL_PATHSPECS": "1",
    "GIT_AUTHOR_NAME": "recap",
    "GIT_AUTHOR_EMAIL": "recap@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",
    "GIT_COMMITTER_NAME": "recap",
    "GIT_COMMITTER_EMAIL": "recap@localhost",
    "GIT_COMMITTER_DATE": "@0 +0000",
}

NO_DRIVER_FLAGS = ("--no-ext-diff", "--no-textconv")
"""Flags of every `git diff` recap runs: no external diff program, no textconv."""


def hardened_env(*, isolated: bool) -> dict[str, str]:
    """Environment variables (to lay over `os.environ`) under which a host-side git command runs
    nothing that a repository, a working tree or a workspace configures.

    Forced off: fsmonitor (run on every index read), hooks, the user's attributes file, submodule
    recursion, every transport (so no lazy fetch, `ext::` or `uploadpack` command); replace refs
    are ignored too (objects are what their ids say).
    Filters, textconv and external diffs are never *asked for* by recap's commands (plumbing, or
    `diff` with `NO_DRIVER_FLAGS`; `ShadowRepo` adds `NEUTRAL_ATTRIBUTES`). The settings go in as
    command-line config (`GIT_CONFIG_COUNT`, git >= 2.31), which outranks every config file and
    reaches the git processes git itself starts; they are appended after any the caller's
    environment already holds.

    Args:
        isolated: also ignore the user's global and system config (for repositories recap owns).
    """
    first = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    env = dict(_NO_CODE_ENV, GIT_CONFIG_COUNT=str(first + len(_NO_CODE_CONFIG)))
    for n, (key, value) in enumerate(_NO_CODE_CONFIG, start=first):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    if isolated:
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return env


@dataclass(frozen=True)
class TreeEntry:
    """One blob of a tree: git mode ("100644", "100755", "120000"), blob id, POSIX path."""

    mode: str
    sha: str
    path: str


def _split_z(output: bytes) -> list[str]:
    return [p for p in output.decode("utf-8", "surrogateescape").split("\0") if p]


def _parse_entries(output: bytes, *, with_type: bool) -> list[TreeEntry]:
    """Parse `ls-tree -r -z` ("mode type sha\\tpath") or `ls-files -s -z` ("mode sha stage\\tpath")."""
    entries = []
    for record in _split_z(output):
        meta, path = record.split("\t", 1)
        fields = meta.split()
        mode, sha = (fields[0], fields[2]) if with_type else (fields[0], fields[1])
        if mode != _GITLINK:
            entries.append(TreeEntry(mode, sha, path))
    return entries


class _TempFile:
    """A named temporary file holding `data`, for GitPython's `istream` (it needs a real fd)."""

    def __init__(self, data: bytes) -> None:
        self._file = tempfile.TemporaryFile()
        self._file.write(data)
        self._file.seek(0)

    def __enter__(self):
        return self._file

    def __exit__(self, *exc: object) -> None:
        self._file.close()


# ---------------------------------------------------------------------------------------------
# The user's repository (read only)


@dataclass(frozen=True)
class UserView:
    """What the user sees in a repository, read without writing to it.

    Attributes:
        toplevel: the working tree root.
        head: the HEAD commit id, or None for a non-git directory or an unborn branch.
        head_entries: the blobs of HEAD's tree (empty when `head` is None).
        files: every file the user sees (tracked and not deleted, plus untracked not ignored).
        exclude: the repository's `.git/info/exclude` text (b"" when absent).
        is_git: False for a plain directory.
    """

    toplevel: Path
    head: str | None
    head_entries: tuple[TreeEntry, ...]
    files: tuple[str, ...]
    exclude: bytes
    is_git: bool


def open_user_repo(path: str | os.PathLike[str], *, search_parents: bool = True) -> git.Repo:
    """The repository at (or, with `search_parents`, containing) `path`, its git commands run
    under `hardened_env` with `GIT_DIR` and `GIT_WORK_TREE` given explicitly. They execute nothing
    the repository configures, so they may read a repository another user owns (an explicit
    `GIT_DIR` skips git's ownership check, which exists because a plain `git status` there would
    run that user's fsmonitor).

    Raises:
        WorkspaceError: not a git repository, a bare one, or one whose working tree is not the
            directory holding `.git` (`core.worktree`): recap would copy files from elsewhere.
    """
    try:
        repo = git.Repo(path, search_parent_directories=search_parents)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise WorkspaceError(f"{path} is not a git repository: {exc}") from None
    if repo.bare or repo.working_tree_dir is None:
        repo.close()
        raise WorkspaceError(f"{path} is a bare repository; give a working tree")
    top = Path(repo.working_tree_dir).resolve()
    holder = next((d for d in (Path(path).resolve(), *Path(path).resolve().parents)
                   if os.path.lexists(d / ".git")), None)
    with repo.config_reader("repository") as config:
        worktree = str(config.get_value("core", "worktree", ""))
    if holder != top or (worktree and (Path(repo.git_dir) / worktree).resolve() != top):
        repo.close()
        raise WorkspaceError(f"the repository at {holder or top} sets its working tree elsewhere "
                             f"(core.worktree = {worktree or top}); recap reads only the directory that holds .git")
    repo.git.update_environment(**hardened_env(isolated=False), GIT_DIR=str(Path(repo.git_dir).resolve()),
                                GIT_WORK_TREE=str(top))
    return repo


def read_user_view(path: str | os.PathLike[str]) -> UserView:
    """Read the state of the repository containing `path` (or the plain directory `path`).

    Raises:
        WorkspaceError: `path` is not a directory, or see `open_user_repo`.
    """
    directory = Path(path).resolve()
    if not directory.is_dir():
        raise WorkspaceError(f"{directory} is not a directory")
    try:
        git.Repo(directory, search_parent_directories=True).close()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return UserView(directory, None, (), tuple(_existing_files(directory, _walk_plain(directory))), b"",
                        is_git=False)
    with open_user_repo(directory) as repo:
        cmd = repo.git
        top = Path(repo.working_tree_dir).resolve()
        try:
            listed = cmd.ls_files("-z", "--cached", "--others", "--exclude-standard",
                                  stdout_as_string=False)
            files = _existing_files(top, dict.fromkeys(_split_z(listed)))
            try:
                head = repo.head.commit.hexsha
            except ValueError:  # unborn branch: no commit yet
                head = None
            entries: list[TreeEntry] = []
            if head is not None:
                out = cmd.ls_tree("-r", "-z", "--full-tree", head, stdout_as_string=False)
                entries = _parse_entries(out, with_type=True)
        except git.GitCommandError as exc:  # e.g. a config git cannot parse
            raise WorkspaceError(f"git cannot read the repository at {top}: {_stderr(exc)}") from None
        exclude = _read_inside(Path(repo.git_dir), "info/exclude")
    return UserView(top, head, tuple(entries), tuple(files), exclude, is_git=True)


def _stderr(exc: git.GitCommandError) -> str:
    return (exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr)).strip()


def _read_inside(directory: Path, rel: str) -> bytes:
    """The regular file `directory/rel` (b"" when absent, or when it or a parent is a symlink
    leading elsewhere or it is not a regular file: a repository cannot make recap read host files)."""
    target = directory / rel
    try:
        if target.resolve().parent != directory.resolve() / Path(rel).parent:
            return b""
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        return handle.read() if stat.S_ISREG(os.fstat(fd).st_mode) else b""


def read_commit(repo_path: str | os.PathLike[str], commit: str) -> list[TreeEntry]:
    """The blobs of `commit` (a full commit id) of the repository containing `repo_path`
    (gitlinks left out).

    Raises: `WorkspaceError` when it is not a repository, `commit` is not a full id (a session
    file could pass an option) or the commit is not in the repository.
    """
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise WorkspaceError(f"base commit {commit!r} is not a full commit id")
    with open_user_repo(repo_path) as repo:
        try:
            out = repo.git.ls_tree("-r", "-z", "--full-tree", f"{commit}^{{commit}}", "--", stdout_as_string=False)
        except git.GitCommandError as exc:
            raise WorkspaceError(f"cannot read {commit} of {repo_path}: {_stderr(exc)}") from None
    return _parse_entries(out, with_type=True)


def stream_blobs(repo_path: str | os.PathLike[str], shas: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """(id, content) of blobs of the user's repository, one at a time (`cat-file --batch`).

    Raises: `WorkspaceError` when a blob is missing.
    """
    with open_user_repo(repo_path) as repo:
        for sha in dict.fromkeys(shas):
            try:
                yield sha, repo.odb.stream(bytes.fromhex(sha)).read()
            except (ValueError, git.GitCommandError, OSError) as exc:
                raise WorkspaceError(f"cannot read blob {sha} of {repo_path}: {exc}") from None


def _fast_import_path(path: str) -> bytes:
    """A path as `git fast-import` reads it: C-quoted when it starts with '"' or holds a newline."""
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b'"') and b"\n" not in raw:
        return raw
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _attribute_pattern(path: str) -> str:
    """A .gitattributes pattern matching exactly `path` (glob characters escaped, C-quoted)."""
    escaped = re.sub(r"([*?\[\\])", r"\\\1", "/" + path)
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _existing_files(root: Path, paths: Iterable[str]) -> list[str]:
    """The `paths` that are regular files or symlinks under `root`, reached without passing through
    a symlink (deleted paths, paths below a symlinked directory, FIFOs, devices, sockets, submodule
    and nested-repository directories are left out); one `lstat` each, one `realpath` per parent."""
    real_root = os.path.realpath(root)
    parent_ok: dict[str, bool] = {"": True}
    out = []
    for rel in paths:
        parent = os.path.dirname(rel)
        if parent not in parent_ok:
            parent_ok[parent] = os.path.realpath(os.path.join(root, parent)) == os.path.join(real_root, parent)
        if not parent_ok[parent]:
            continue
        try:
            mode = os.lstat(os.path.join(root, rel)).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            out.append(rel)
    return out


_STALL_S = 1.0
"""How long a git command reading the worktree runs before FIFOs that may block it are opened."""


@contextlib.contextmanager
def _fifos_unblocked(root: Path) -> Iterator[None]:
    """Keep git from waiting forever on a FIFO while the body runs it over the worktree.

    git opens `.gitignore`, `.gitattributes` and `.git/info/exclude` with a blocking `open()`; a
    command may have made any of them a FIFO. Once the body has run `_STALL_S` seconds, and every
    `_STALL_S` after, each FIFO under `root` is opened for writing without blocking and closed at
    once: a git waiting to read one goes on and reads it as empty. Costs nothing unless git stalls.
    """
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(_STALL_S):
            for fifo in _fifos_under(root):
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC))
                except OSError:  # ENXIO: nobody is reading it now
                    pass

    thread = threading.Thread(target=unblock, name="recap-fifo-unblock", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _fifos_under(root: Path) -> Iterator[str]:
    """Every FIFO below `root`, `.git` included (no symlink followed; one stat per odd entry)."""
    pending = [str(root)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                try:
                    if stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode):
                        yield entry.path
                except OSError:
                    continue


def _walk_plain(directory: Path) -> Iterable[str]:
    for dirpath, dirnames, filenames in os.walk(directory):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and d not in links]
        base = Path(dirpath).relative_to(directory)
        for name in filenames + links:
            yield (base / name).as_posix()


def copy_files(source: Path, dest: Path, paths: Iterable[str]) -> None:
    """Copy files (keeping symlinks as symlinks, and modes) from `source` to `dest`."""
    made: set[Path] = set()
    for rel in paths:
        src, dst = source / rel, dest / rel
        if dst.parent not in made:
            dst.parent.mkdir(parents=True, exist_ok=True)
            made.add(dst.parent)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


def apply_to(worktree: str | os.PathLike[str], patch: str) -> None:
    """Apply a workspace diff (`ShadowRepo.diff_*`) to the directory `worktree`, the user's
    checkout, byte for byte: `git apply` runs against a throwaway repository of recap's, so nothing
    of the repository at `worktree` is read (config, attributes, hooks, index) and none of its
    filters runs. git refuses paths with `..`, `.git` or a symlinked parent.

    Raises: `WorkspaceError` with git's message when the diff does not apply (then nothing changed).
    """
    with tempfile.TemporaryDirectory(prefix="recap-apply-") as tmp:
        ShadowRepo.init(Path(tmp) / "git", Path(worktree)).apply(patch)


# ---------------------------------------------------------------------------------------------
# The workspace's own repository


class ShadowRepo:
    """The workspace's git repository: a git directory outside the workspace root, the root its
    working tree.

    Its index is recap's own; `seal` gives the agent a copy at `root/.git` (commands may run
    `git add`, `git commit` there), which recap never reads, so `diff()` and `list_files()` stay
    right whatever the agent does to its repository, and nothing the agent writes there (config,
    hooks, attributes) reaches a host-side git command. Files enter the index only through
    `_stage` (never `git add`), which leaves nested repositories out: with no gitlink in the
    index, git never looks inside one (it would run `git status` there, under that repository's
    config).
    """

    def __init__(self, git_dir: Path, worktree: Path) -> None:
        self.git_dir, self.root = git_dir, worktree
        self._cmd = git.Git(worktree)
        self._cmd.update_environment(**_IDENTITY_ENV, **hardened_env(isolated=True), GIT_DIR=str(git_dir),
                                     GIT_WORK_TREE=str(worktree), GIT_INDEX_FILE=str(git_dir / "index"))

    @classmethod
    def init(cls, git_dir: Path, worktree: Path, *, exclude: bytes = b"") -> "ShadowRepo":
        """A new empty repository in `git_dir` (which must not exist) for the working tree `worktree`."""
        repo = cls(git_dir, worktree)
        repo._git("init", "--quiet", "--initial-branch=main")
        repo._git("config", "--unset", "core.worktree")  # init recorded GIT_WORK_TREE; the agent's copy finds its own
        for key, value in (("core.checkStat", "minimal"),  # forks copy files: inodes change
                           ("core.trustctime", "false"), ("gc.auto", "0")):
            repo._git("config", key, value)
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES, encoding="utf-8")
        (git_dir / "info" / "exclude").write_bytes(exclude)
        return repo

    def close(self) -> None:
        self._cmd.clear_cache()

    def _git(self, *args: str, index: Path | None = None, stdin: bytes | None = None) -> bytes:
        env = {"GIT_INDEX_FILE": str(index)} if index is not None else None
        try:
            if stdin is None:
                return self._cmd.execute(["git", *args], env=env, stdout_as_string=False,
                                         strip_newline_in_stdout=False)
            with _TempFile(stdin) as handle:
                return self._cmd.execute(["git", *args], env=env, istream=handle,
                                         stdout_as_string=False, strip_newline_in_stdout=False)
        except git.GitCommandError as exc:
            raise WorkspaceError(f"git {args[0]} failed in the workspace: {_stderr(exc)}") from exc

    def _fast_import(self, write_stream: Callable[[Callable[[bytes], object]], None]) -> None:
        """Run one `git fast-import` (one pack), `write_stream(write)` writing its commands."""
        proc = self._cmd.execute(["git", "fast-import", "--quiet", "--done"], istream=subprocess.PIPE,
                                 as_process=True)
        try:
            write_stream(proc.proc.stdin.write)
            proc.proc.stdin.write(b"done\n")
            proc.proc.stdin.close()
            proc.wait()
        except (git.GitCommandError, OSError) as exc:
            raise WorkspaceError(f"git fast-import failed in the workspace: {exc}") from exc
        finally:
            if proc.proc.poll() is None:  # the stream failed half-way: nothing of it is kept
                proc.proc.kill()
                proc.proc.wait()

    def _import_tree(self, files: Iterable[tuple[bytes, str, bytes]]) -> str:
        """The id of a tree holding `files` (mode, path, content), stored through `_fast_import`."""
        ref = "refs/recap/import"

        def stream(write: Callable[[bytes], object]) -> None:
            write(b"commit %s\ncommitter recap <recap@localhost> 0 +0000\ndata 0\n" % ref.encode())
            for mode, rel, data in files:
                write(b"M %s inline %s\ndata %d\n" % (mode, _fast_import_path(rel), len(data)))
                write(data)
                write(b"\n")
            write(b"\n")  # the end of the commit

        self._fast_import(stream)
        tree = self._git("rev-parse", f"{ref}^{{tree}}").decode().strip()
        self._git("update-ref", "-d", ref)
        return tree

    def import_worktree(self, *, force: bool) -> str:
        """Put every file of the working tree into the (still empty) repository and the index and
        return the tree id. `force` takes ignored files too.

        Blobs go through one `git fast-import` stream into a single pack, which costs far fewer
        file-system operations than `git add` writing one loose object per file.
        """
        listing = ["ls-files", "-z", "--others"] + ([] if force else ["--exclude-standard"])
        paths = sorted(_existing_files(self.root, _split_z(self._git(*listing))))

        def files() -> Iterator[tuple[bytes, str, bytes]]:
            for rel in paths:
                full = os.path.join(self.root, rel)
                if os.path.islink(full):
                    yield b"120000", rel, os.fsencode(os.readlink(full))
                    continue
                with open(full, "rb") as handle:
                    yield (b"100755" if os.fstat(handle.fileno()).st_mode & 0o100 else b"100644"), rel, handle.read()

        tree = self._import_tree(files())
        self._git("read-tree", tree)
        self._git("update-index", "-q", "--refresh")  # stat data, so later staging hashes only changes
        return tree

    def checkout(self, entries: Sequence[TreeEntry]) -> str:
        """Write the files of `entries` (their blobs stored already) into the empty working tree
        and the index; return the tree id. Paths git refuses (`..`, `.git`, through a symlink)
        fail with `WorkspaceError`."""
        tree = self.tree_from_entries(entries)
        self._git("read-tree", tree)
        self._git("checkout-index", "--all", "--force", "-u")  # -u: stat data in the index
        return tree

    def _stage(self, *, force: bool, paths: Sequence[str] = ()) -> None:
        """Bring the index up to the working tree (all of it, or `paths`): changed and new regular
        files and symlinks in, deleted ones (and ones now below a symlink or turned into a
        directory) out. `force` takes ignored new files too. Directories, nested repositories
        included, are never added."""
        spec = ["--", *paths] if paths else []
        tracked = _split_z(self._git("ls-files", "-z", "--modified", "--deleted", *spec))
        new = _split_z(self._git("ls-files", "-z", "--others", *([] if force else ["--exclude-standard"]), *spec))
        present = _existing_files(self.root, dict.fromkeys(tracked + new))
        gone = set(tracked).difference(present)
        if gone:
            self._git("update-index", "-z", "--force-remove", "--stdin", stdin=_join_z(sorted(gone)))
        if present:
            self._git("update-index", "-z", "--add", "--remove", "--replace", "--stdin", stdin=_join_z(present))

    def snapshot(self, *, force: bool, paths: Iterable[str] = ()) -> str:
        """Stage the working tree (all of it, or only `paths`) into the index and return its tree
        id. `force` stages ignored files too (files the user sees although ignored)."""
        self._stage(force=force, paths=list(paths))
        return self._git("write-tree").decode().strip()

    def tree_from_entries(self, entries: Iterable[TreeEntry]) -> str:
        """Build a tree from blob entries (the blobs must be in this repository)."""
        info = "".join(f"{e.mode} {e.sha}\t{e.path}\0" for e in entries).encode("utf-8", "surrogateescape")
        with tempfile.TemporaryDirectory(prefix="recap-index-") as tmp:
            index = Path(tmp) / "index"
            self._git("update-index", "-z", "--add", "--index-info", index=index, stdin=info)
            return self._git("write-tree", index=index).decode().strip()

    def missing_blobs(self, shas: Iterable[str]) -> list[str]:
        wanted = sorted(set(shas))
        if not wanted:
            return []
        out = self._git("cat-file", "--batch-check", stdin=("\n".join(wanted) + "\n").encode()).decode()
        return [line.split()[0] for line in out.splitlines() if line.endswith(" missing")]

    def store_blobs(self, blobs: Iterable[tuple[str, bytes]]) -> None:
        """Store (id, content) blobs, read one at a time, in one pack. Raises `WorkspaceError` if a
        content does not match its id."""
        shas: list[str] = []

        def stream(write: Callable[[bytes], object]) -> None:
            for sha, data in blobs:
                shas.append(sha)
                write(b"blob\ndata %d\n" % len(data))
                write(data)
                write(b"\n")

        self._fast_import(stream)
        if missing := self.missing_blobs(shas):
            raise WorkspaceError(f"blobs {', '.join(missing[:3])} were stored under other ids")

    def commit(self, tree: str, *, parent: str | None, message: str) -> str:
        args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
        return self._git(*args).decode().strip()

    def seal(self, *, base: str, start: str) -> None:
        """Point `main` (checked out) and the tags `base`, `start` at the two commits (the index
        must hold `start`'s tree) and give the agent its copy of the repository at `root/.git`."""
        refs = f"update refs/heads/main {start}\ncreate refs/tags/base {base}\ncreate refs/tags/start {start}\n"
        self._git("update-ref", "--stdin", stdin=refs.encode())
        agent_git = self.root / ".git"
        if os.path.lexists(agent_git):
            raise WorkspaceError(f"{agent_git} exists already")
        copy_tree(self.git_dir, agent_git, link_objects=None)

    def diff_trees(self, old: str, new: str) -> str:
        return self._diff(old, new)

    def diff_worktree(self, start: str) -> str:
        """Binary-safe diff of the working tree (new, modified, deleted files) against `start`.
        A tracked file a command replaced by a FIFO, socket or device shows as deleted (git can
        store none of them; untracked ones are left out)."""
        with _fifos_unblocked(self.root):
            self._stage(force=False)
            return self._diff("--cached", start)

    def _diff(self, *revs: str) -> str:
        """`git diff --binary`, always valid UTF-8: a text file that is not UTF-8 gets a binary patch
        (its text hunks could not go into a JSON session, nor survive decoding)."""
        flags = ["--binary", "--no-renames", "--no-color", *NO_DRIVER_FLAGS, "--src-prefix=a/", "--dst-prefix=b/"]
        raw = self._git("diff", *flags, *revs)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        names = _split_z(self._git("diff", "--name-only", "-z", "--no-renames", *revs))
        sections = raw.split(b"\ndiff --git ")  # one per file, in --name-only order
        undecodable = [name for name, section in zip(names, sections) if not _is_utf8(section)]
        attributes = self.git_dir / "info" / "attributes"  # the only file that outranks the tree's
        attributes.write_text(NEUTRAL_ATTRIBUTES + "".join(f"{_attribute_pattern(name)} binary\n" for name in undecodable),
                              encoding="utf-8", errors="surrogateescape")
        try:
            raw = self._git("diff", *flags, *revs)
        finally:
            attributes.write_text(NEUTRAL_ATTRIBUTES, encoding="utf-8")
        return raw.decode("utf-8", "replace")  # only a non-UTF-8 file *name* can still be undecodable

    def apply(self, patch: str) -> None:
        """Apply a diff made by `diff_*` to the working tree."""
        if patch:
            self._git("apply", "--binary", "--whitespace=nowarn", "-",
                      stdin=patch.encode("utf-8", "surrogateescape"))

    def list_files(self, path: str) -> list[str]:
        """Existing files under `path` (tracked in the index, or untracked not ignored). A FIFO where
        git reads ignore rules counts as empty (`_fifos_unblocked`)."""
        with _fifos_unblocked(self.root):
            out = self._git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", path)
        return sorted(_existing_files(self.root, dict.fromkeys(_split_z(out))))


def _join_z(paths: Iterable[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)
