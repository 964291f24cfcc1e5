"""Git plumbing for the local shadow backend, through GitPython.

Two sides:

- The user's repository is only ever *read*: `git ls-files`, `git ls-tree`, `git cat-file` and a
  `read-tree`/`checkout-index` into a temporary index file. Nothing is written under the user's
  `.git` (no worktree metadata, no index refresh: `GIT_OPTIONAL_LOCKS=0`).
- The workspace's own repository (`ShadowRepo`) is a fresh `git init` holding exactly two commits,
  `base` (the user's HEAD tree) and `start` (base + the user's changes + unsaved buffers), so the
  agent sees no history it was not given. Its git commands ignore the user's global and system
  config and use a fixed identity and date, so the same trees always give the same commit ids.

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
from io import BytesIO
from pathlib import Path
from typing import Iterable, Iterator

import git
from gitdb.base import IStream

from harness.errors import WorkspaceError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""The id of git's empty tree (SHA-1 repositories)."""

_GITLINK = "160000"

_READ_ONLY_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
_SHADOW_ENV = {
    **_READ_ONLY_ENV,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_LITERAL_PATHSPECS": "1",
    "GIT_AUTHOR_NAME": "recap",
    "GIT_AUTHOR_EMAIL": "recap@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",
    "GIT_COMMITTER_NAME": "recap",
    "GIT_COMMITTER_EMAIL": "recap@localhost",
    "GIT_COMMITTER_DATE": "@0 +0000",
}


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


def _trusted(repo: git.Repo) -> git.Repo:
    """`repo` with its git commands run read-only and with `safe.directory` set to its own working
    tree (or git dir), so a repository owned by another user (a mounted volume, files unpacked by
    root) is readable instead of failing with "detected dubious ownership". The exception covers
    only the repository the user named, and only recap's read-only commands on it; it is passed as
    command-line config (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, git >= 2.31),
    appended after any the caller's environment already holds."""
    first = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    repo.git.update_environment(**_READ_ONLY_ENV, GIT_CONFIG_COUNT=str(first + 1),
                                **{f"GIT_CONFIG_KEY_{first}": "safe.directory",
                                   f"GIT_CONFIG_VALUE_{first}": repo.working_tree_dir or repo.git_dir})
    return repo


def read_user_view(path: str | os.PathLike[str]) -> UserView:
    """Read the state of the repository containing `path` (or the plain directory `path`).

    Raises:
        WorkspaceError: `path` is not a directory.
    """
    directory = Path(path).resolve()
    if not directory.is_dir():
        raise WorkspaceError(f"{directory} is not a directory")
    try:
        repo = git.Repo(directory, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return UserView(directory, None, (), tuple(_walk_plain(directory)), b"", is_git=False)
    if repo.bare or repo.working_tree_dir is None:
        raise WorkspaceError(f"{directory} is a bare repository; give a working tree")
    with _trusted(repo):
        cmd = repo.git
        top = Path(repo.working_tree_dir)
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
        exclude_file = Path(repo.git_dir) / "info" / "exclude"
        exclude = exclude_file.read_bytes() if exclude_file.is_file() else b""
    return UserView(top, head, tuple(entries), tuple(files), exclude, is_git=True)


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
    """The `paths` that are files or symlinks under `root` (deleted paths, submodule and
    nested-repository directories are left out); one `lstat` each."""
    out = []
    for rel in paths:
        try:
            mode = os.lstat(os.path.join(root, rel)).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            out.append(rel)
    return out


def _is_special(path: Path) -> bool:
    """Whether `path` is a FIFO, socket or device (not a file, directory or symlink; no symlink followed)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


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


def read_blobs(repo_path: Path, shas: Iterable[str]) -> dict[str, bytes]:
    """Contents of blobs of the user's repository, by id."""
    with _trusted(git.Repo(repo_path)) as repo:
        return {sha: repo.odb.stream(bytes.fromhex(sha)).read() for sha in set(shas)}


def checkout_commit(repo_path: str | os.PathLike[str], commit: str, dest: Path) -> list[TreeEntry]:
    """Write the files of `commit` into `dest` through a temporary index; return its blobs.

    The user's index and working tree are not touched. Raises `WorkspaceError` when the commit is
    not in the repository, or is something git would read as an option (it may come from a
    session file: `--index-output=FILE` would write FILE on the host).
    """
    if commit.startswith("-"):
        raise WorkspaceError(f"refused commit {commit!r}: a commit id cannot start with '-'")
    try:
        repo = git.Repo(repo_path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise WorkspaceError(f"{repo_path} is not a git repository: {exc}") from exc
    with _trusted(repo), tempfile.TemporaryDirectory(prefix="recap-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            repo.git.read_tree(commit, env=env)
            repo.git.checkout_index("-a", "-f", f"--prefix={dest}/", env=env)
            out = repo.git.ls_tree("-r", "-z", "--full-tree", commit, env=env, stdout_as_string=False)
        except git.GitCommandError as exc:
            raise WorkspaceError(f"cannot check out {commit} of {repo_path}: {exc.stderr.strip()}") from exc
    return _parse_entries(out, with_type=True)


# ---------------------------------------------------------------------------------------------
# The workspace's own repository


class ShadowRepo:
    """The sealed git repository inside a workspace root.

    Its main index is the agent's (commands may run `git add`); recap's own bookkeeping uses a
    private index file outside the root (`private_index`), so `diff()` and `list_files()` stay
    right whatever the agent does to the repository's index or refs.
    """

    def __init__(self, root: Path, *, private_index: Path) -> None:
        self.root = root
        self.private_index = private_index
        self._repo = git.Repo(root)
        self._repo.git.update_environment(**_SHADOW_ENV)

    @classmethod
    def init(cls, root: Path, *, private_index: Path, exclude: bytes = b"") -> "ShadowRepo":
        repo = git.Repo.init(root, initial_branch="main")
        with repo.config_writer() as cfg:
            cfg.set_value("core", "checkStat", "minimal")  # forks copy files: inodes change
            cfg.set_value("core", "trustctime", "false")
            cfg.set_value("gc", "auto", "0")
        if exclude:
            (Path(repo.git_dir) / "info").mkdir(exist_ok=True)
            (Path(repo.git_dir) / "info" / "exclude").write_bytes(exclude)
        repo.close()
        return cls(root, private_index=private_index)

    def close(self) -> None:
        self._repo.close()

    def _git(self, *args: str, index: Path | None = None, stdin: bytes | None = None) -> bytes:
        env = {"GIT_INDEX_FILE": str(index)} if index is not None else None
        try:
            if stdin is None:
                return self._repo.git.execute(["git", *args], env=env, stdout_as_string=False,
                                              strip_newline_in_stdout=False)
            with _TempFile(stdin) as handle:
                return self._repo.git.execute(["git", *args], env=env, istream=handle,
                                              stdout_as_string=False, strip_newline_in_stdout=False)
        except git.GitCommandError as exc:
            raise WorkspaceError(f"git {args[0]} failed in the workspace: {exc.stderr.strip()}") from exc

    def import_worktree(self, *, force: bool) -> str:
        """Put every file of the working tree into the (still empty) repository and the main index
        and return the tree id. `force` takes ignored files too.

        Blobs go through one `git fast-import` stream into a single pack, which costs far fewer
        file-system operations than `git add` writing one loose object per file.
        """
        listing = ["ls-files", "-z", "--others"] + ([] if force else ["--exclude-standard"])
        paths = sorted(_existing_files(self.root, _split_z(self._git(*listing))))
        ref = "refs/recap/import"
        proc = self._repo.git.execute(["git", "fast-import", "--quiet", "--done"], istream=subprocess.PIPE,
                                      as_process=True)
        try:
            write = proc.proc.stdin.write
            write(b"commit %s\ncommitter recap <recap@localhost> 0 +0000\ndata 0\n" % ref.encode())
            for rel in paths:
                full = os.path.join(self.root, rel)
                info = os.lstat(full)
                if stat.S_ISLNK(info.st_mode):
                    mode, data = b"120000", os.fsencode(os.readlink(full))
                else:
                    mode = b"100755" if info.st_mode & 0o100 else b"100644"
                    with open(full, "rb") as handle:
                        data = handle.read()
                write(b"M %s inline %s\ndata %d\n" % (mode, _fast_import_path(rel), len(data)))
                write(data)
                write(b"\n")
            write(b"\ndone\n")
            proc.proc.stdin.close()
            proc.wait()
        except (git.GitCommandError, OSError) as exc:
            raise WorkspaceError(f"git fast-import failed in the workspace: {exc}") from exc
        tree = self._git("rev-parse", f"{ref}^{{tree}}").decode().strip()
        self._git("update-ref", "-d", ref)
        self._git("read-tree", tree)
        self._git("update-index", "-q", "--refresh")  # stat data, so later `add -A` hashes only changes
        return tree

    def snapshot(self, *, force: bool, paths: Iterable[str] = ()) -> str:
        """Stage the working tree (all of it, or only `paths`) into the main index and return its
        tree id. `force` stages ignored files too (files the user sees although ignored)."""
        paths = list(paths)
        args = ["add", "--force"] if force else ["add"]
        self._git(*args, *(["--", *paths] if paths else ["-A"]))
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

    def store_blobs(self, blobs: dict[str, bytes]) -> None:
        for sha, data in blobs.items():
            stored = self._repo.odb.store(IStream("blob", len(data), BytesIO(data))).hexsha.decode()
            if stored != sha:
                raise WorkspaceError(f"blob {sha} was stored as {stored}")

    def commit(self, tree: str, *, parent: str | None, message: str) -> str:
        args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
        return self._git(*args).decode().strip()

    def seal(self, *, base: str, start: str) -> None:
        """Point `main` (checked out) and the tags `base`, `start` at the two commits and copy the
        main index (which must hold `start`'s tree) as the private index."""
        refs = f"update refs/heads/main {start}\ncreate refs/tags/base {base}\ncreate refs/tags/start {start}\n"
        self._git("update-ref", "--stdin", stdin=refs.encode())
        shutil.copyfile(Path(self._repo.git_dir) / "index", self.private_index)

    def diff_trees(self, old: str, new: str) -> str:
        return self._diff(old, new)

    def diff_worktree(self, start: str) -> str:
        """Binary-safe diff of the working tree (new, modified, deleted files) against `start`.
        A tracked file a command replaced by a FIFO, socket or device shows as deleted (git can
        store none of them; untracked ones are left out)."""
        with _fifos_unblocked(self.root):
            tracked = _split_z(self._git("ls-files", "-z", "--cached", index=self.private_index))
            special = [rel for rel in tracked if _is_special(self.root / rel)]
            if special:
                self._git("update-index", "-z", "--force-remove", "--stdin", index=self.private_index,
                          stdin="\0".join(special).encode("utf-8", "surrogateescape"))
            self._git("add", "-A", index=self.private_index)
            return self._diff("--cached", start, index=self.private_index)

    def _diff(self, *revs: str, index: Path | None = None) -> str:
        """`git diff --binary`, always valid UTF-8: a text file that is not UTF-8 gets a binary patch
        (its text hunks could not go into a JSON session, nor survive decoding)."""
        flags = ["--binary", "--no-renames", "--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/"]
        raw = self._git("diff", *flags, *revs, index=index)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        names = _split_z(self._git("diff", "--name-only", "-z", "--no-renames", *revs, index=index))
        sections = raw.split(b"\ndiff --git ")  # one per file, in --name-only order
        undecodable = [name for name, section in zip(names, sections) if not _is_utf8(section)]
        attributes = self.private_index.with_name("binary.attributes")
        attributes.write_text("".join(f"{_attribute_pattern(name)} binary\n" for name in undecodable),
                              encoding="utf-8", errors="surrogateescape")
        raw = self._git("-c", f"core.attributesFile={attributes}", "diff", *flags, *revs, index=index)
        return raw.decode("utf-8", "replace")  # only a non-UTF-8 file *name* can still be undecodable

    def apply(self, patch: str) -> None:
        """Apply a diff made by `diff_*` to the working tree."""
        if patch:
            self._git("apply", "--binary", "--whitespace=nowarn", "-",
                      stdin=patch.encode("utf-8", "surrogateescape"))

    def list_files(self, path: str) -> list[str]:
        """Existing files under `path` (tracked in the private index, or untracked not ignored).

        Works whatever a command did to the workspace's `.git` (deleted `HEAD`, or all of it): then
        the listing goes through an empty stand-in repository next to the private index, which
        still honours the `.gitignore` files (not the workspace's `info/exclude`). A FIFO where git
        reads ignore rules counts as empty (`_fifos_unblocked`)."""
        listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", path]
        with _fifos_unblocked(self.root):
            try:
                out = self._git(*listing, index=self.private_index)
            except WorkspaceError:
                stand_in = self.private_index.with_name("stand-in.git")
                if not (stand_in / "HEAD").is_file():
                    self._git("init", "--bare", "-q", str(stand_in))
                out = self._git(f"--git-dir={stand_in}", f"--work-tree={self.root}", *listing,
                                index=self.private_index)
        return sorted(_existing_files(self.root, dict.fromkeys(_split_z(out))))
