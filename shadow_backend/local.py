"""The local shadow backend: a workspace is a private copy of the repository in a temp directory.

    tmp/recap-ws-XXXX/
        <name>/          the workspace root: the files the user sees, plus the agent's `.git`
        <name>.git/      recap's git directory of the root (`git_state.ShadowRepo`), out of reach
        home/            $HOME of the commands

`LocalBackend.create` copies what the user sees (HEAD + staged + unstaged + untracked-not-ignored
files, then unsaved editor buffers) without writing anything in the user's repository.
`LocalBackend.from_origin` rebuilds the same start state from a recorded `WorkspaceOrigin`.

Commands run with the root as cwd, in their own session and process group, with a scrubbed
environment, and output bounded while it is read. When bubblewrap works they run in `bwrap`
(`shadow_backend.sandbox`); `origin.sandbox` says what applies.

Threat model: sandbox
---------------------
Commands (and what they start) are untrusted: the model wrote them, or the repository did. They see
the toolchain and /etc's public files read-only, their workspace and $HOME read-write, a private
size-limited /tmp, and nothing else of the host: no secrets (/etc/shadow, /root, /home), no host
UNIX socket (docker.sock, /run), no network unless `network=True`; they run without capabilities in
their own user, PID, IPC and mount namespaces (see `shadow_backend.sandbox` for the exact list).
Each command gets its own cgroup where this process can make one (`shadow_backend.limits`): memory
(shared memory and tmpfs included) and a process cap that holds for root; elsewhere rlimits stand
in (RLIMIT_AS, RLIMIT_NPROC, which root escapes), and `origin.sandbox` says "rlimit". The workspace
may grow by `disk_quota_bytes` (one file by as much: RLIMIT_FSIZE); a command that goes past it is
stopped. A limit a command runs into is told at the end of its stderr (`[recap] memory limit of
4 GiB reached: ...`). With `sandbox="none"` or without bubblewrap only the limits apply: commands see
the host as the user.

With a project environment (`env`, `shadow_backend.environment`) commands see the workspace at
/workspace and the environment's virtualenv read-only at /recap/env instead of recap's own
interpreter environment; its set-up command runs once per key in the same sandbox with the network
on (see the threat model there).

Threat model: git
-----------------
Trusted: recap, the host's git, the user's global and system git config. Untrusted: everything
in a workspace (files, `.gitattributes`, nested repositories, the agent's `.git`: config, hooks,
index, refs), every session file (its `origin.repo`, `base_commit`, `base_diff`) and the user's
repository, its `.git/config` included (it may be someone else's, or unpacked from anywhere).

- Host-side git never reads config a command can write: recap's repository of a workspace is
  `<name>.git/` beside the root, which bwrap never binds writable (only the root and home are;
  under /tmp the private /tmp hides it altogether). The root's `.git` is the agent's copy, made
  once by `seal` and never read by recap, so the agent may do anything to it.
- Every host git command runs under `git_state.hardened_env`: fsmonitor off, hooks at
  /dev/null, no transport (no lazy fetch), no user or system config for recap's repositories;
  every diff with `--no-ext-diff --no-textconv`; the tree's `.gitattributes` are outranked by
  `git_state.NEUTRAL_ATTRIBUTES`, so no filter or diff driver is ever looked up; nested
  repositories are never added (git would run inside them).
- The user's repository is read with plumbing only (never a checkout, a filter, a hook or an
  index write), so its own config runs nothing, whoever owns it; a start state from a session
  file is rebuilt from blobs read that way and checked out by recap's repository, where git
  refuses paths with `..`, `.git` or a symlinked parent.
- With `sandbox="none"` commands run on the host as the user: nothing above is a boundary then.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, Sequence

from harness.errors import ConfigError, WorkspaceError
from harness.workspace import CommandResult, Environment, WorkspaceOrigin, check_path, confine, special_file_error
from shadow_backend import environment, gc, git_state, limits, sandbox
from shadow_backend.sandbox import bwrap_works

logger = logging.getLogger(__name__)

_DRAIN_GRACE_S = 0.5
"""After the main process exits, how long to keep reading output its leftovers still write."""

@dataclass(frozen=True)
class LocalConfig:
    """How commands run in a local workspace.

    Attributes:
        sandbox: "auto" uses bubblewrap when it works and runs unsandboxed otherwise; "bwrap"
            requires it (`WorkspaceError` when it does not work); "none" never uses it.
        memory_limit_bytes: memory of one command, all its processes together, shared memory
            and tmpfs files included (a cgroup's limit; the kernel kills a process of the command
            when it is reached), plus RLIMIT_DATA of each process (an allocation beyond it fails at
            once). Without a writable cgroup: RLIMIT_AS of each process instead. None: no limit.
        max_processes: processes and threads of one command alive at once (the cgroup's
            pids.max, which holds for root; without a cgroup RLIMIT_NPROC, which root escapes).
            None: no limit.
        tmp_size_bytes: size of the sandbox's private /tmp and of its /dev/shm (each a tmpfs;
            writes beyond fail with "No space left on device").
        disk_quota_bytes: how much the workspace (its files, git data and the commands' $HOME)
            may grow beyond its size when it was made; also the largest file a command may write
            (RLIMIT_FSIZE: "File too large"). A command that goes past it is stopped. None: no quota.
        max_output_bytes: per stream, how much output is kept (head and tail halves); the rest
            is counted and dropped while reading, so a command printing gigabytes costs no memory.
        setup_timeout_s: how long a project environment's set-up command may run (seconds).
    """

    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    memory_limit_bytes: int | None = 4 * 2**30
    max_processes: int | None = 4096
    tmp_size_bytes: int = 2**30
    disk_quota_bytes: int | None = 4 * 2**30
    max_output_bytes: int = 2**20
    setup_timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.sandbox not in ("auto", "bwrap", "none"):
            raise ConfigError(f"sandbox must be 'auto', 'bwrap' or 'none', got {self.sandbox!r}")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < 2**24:
            raise ConfigError("memory_limit_bytes below 16 MiB leaves no room for a shell; use None for no limit")
        if self.max_processes is not None and self.max_processes < 1:
            raise ConfigError("max_processes must be at least 1 (or None for no limit)")
        if self.tmp_size_bytes < 2**20:
            raise ConfigError("tmp_size_bytes must be at least 1 MiB")
        if self.disk_quota_bytes is not None and self.disk_quota_bytes < 2**20:
            raise ConfigError("disk_quota_bytes must be at least 1 MiB (or None for no quota)")
        if self.max_output_bytes < 1024:
            raise ConfigError("max_output_bytes must be at least 1024")


class BoundedCapture:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest (`feed` chunks,
    then `text()`: head, a `[... N bytes cut while reading ...]` line, tail). Any backend that
    reads command output may use it."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.half)]

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        if not cut:
            return head + self.tail.decode("utf-8", "replace")
        return f"{head}\n[... {cut:,} bytes cut while reading ...]\n{self.tail.decode('utf-8', 'replace')}"


def _limits_preexec(config: LocalConfig, cgroup: limits.CommandCgroup | None):
    """What the child does before exec: join the command's cgroup, set the rlimits that stand in
    for what no cgroup bounds, and let a too-large write fail with EFBIG instead of a signal."""
    def apply() -> None:
        if cgroup is not None:
            cgroup.enter()
        if config.memory_limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (config.memory_limit_bytes,) * 2)
            if cgroup is None:  # shared mappings are not data: bound the address space instead
                resource.setrlimit(resource.RLIMIT_AS, (config.memory_limit_bytes,) * 2)
        if config.max_processes is not None and cgroup is None:
            resource.setrlimit(resource.RLIMIT_NPROC, (config.max_processes,) * 2)
        if config.disk_quota_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (config.disk_quota_bytes,) * 2)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _run_process(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
                 config: LocalConfig, running: set[int], quota: limits.DiskQuota | None = None) -> CommandResult:
    """Run `argv` in a new session and its own cgroup (where one can be made); kill its process
    group on timeout, once it has exited, when the disk `quota` is used up, and when anything
    (Ctrl-C) interrupts the wait. `running` holds the group id while it may be killed. Limits the
    command ran into are told at the end of its stderr, one `[recap] ...` line each."""
    started = time.monotonic()
    cgroup = limits.CommandCgroup.create(memory_bytes=config.memory_limit_bytes, max_processes=config.max_processes)
    try:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    preexec_fn=_limits_preexec(config, cgroup))
        except OSError as exc:
            return CommandResult(126, "", f"cannot start {argv[0]}: {exc.strerror}", False, time.monotonic() - started)
        running.add(proc.pid)
        try:
            out, err, timed_out, stopped = _collect(proc, limit=started + timeout_s, config=config, quota=quota)
        finally:
            running.discard(proc.pid)
            try:  # the leader is not reaped yet, so its group id can't have been reused
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            exit_code = proc.wait()
        notes = [stopped] if stopped else []
        if cgroup is not None:
            notes += cgroup.hits()
        if quota is not None and not stopped and (over := quota.check()):
            notes.append(over)
    finally:
        if cgroup is not None:
            cgroup.close()
    return CommandResult(exit_code, out, limits.tell(err, notes), timed_out, time.monotonic() - started)


def _collect(proc: subprocess.Popen, *, limit: float, config: LocalConfig,
             quota: limits.DiskQuota | None) -> tuple[str, str, bool, str | None]:
    """Read a started command's stdout and stderr until it exits (and its pipes close), the
    monotonic deadline `limit`, or the disk `quota` is used up (checked every `quota.interval_s`).
    Returns (stdout, stderr, timed_out, why the quota stopped it or None); does not reap it."""
    captures = {proc.stdout: BoundedCapture(config.max_output_bytes), proc.stderr: BoundedCapture(config.max_output_bytes)}
    pidfd = os.pidfd_open(proc.pid)  # readable once the main process exits (it is not reaped)
    open_streams, exited, timed_out, stopped = len(captures), False, False, None
    next_check = time.monotonic() + (quota.interval_s if quota else float("inf"))
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(pidfd, selectors.EVENT_READ, None)
            for stream, capture in captures.items():
                os.set_blocking(stream.fileno(), False)
                selector.register(stream, selectors.EVENT_READ, capture)
            while open_streams or not exited:
                now = time.monotonic()
                if now >= limit:
                    timed_out = not exited
                    break
                if quota is not None and now >= next_check:
                    if stopped := quota.check():
                        break
                    next_check = time.monotonic() + quota.interval_s
                for key, _ in selector.select(timeout=min(limit, next_check) - now):
                    if key.data is None:
                        exited = True
                        selector.unregister(pidfd)
                        limit = min(limit, time.monotonic() + _DRAIN_GRACE_S)  # leftovers may hold the pipes
                    elif chunk := os.read(key.fd, 65536):
                        key.data.feed(chunk)
                    else:
                        selector.unregister(key.fileobj)
                        open_streams -= 1
    finally:
        os.close(pidfd)
        for stream in captures:
            stream.close()
    out, err = (c.text() for c in captures.values())
    return out, err, timed_out, stopped


def _force_rmtree(path: Path) -> None:
    def retry(func, target, _exc):  # a command may have made directories read-only
        os.chmod(os.path.dirname(target), 0o700)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, 0o700)
        func(target)

    if path.exists():
        shutil.rmtree(path, onerror=retry)


class LocalWorkspace:
    """A workspace in a local temp directory; implements `harness.workspace.Workspace`.

    Make one with `LocalBackend.create`, `LocalBackend.from_origin` or `fork`. Use as a context
    manager or call `close()`.

    Attributes:
        origin: how the start state was made (what a session records).
        start_commit: id of the sealed `start` commit inside the workspace's own git repository.
        network: whether commands may use the network.
        config: command limits and sandbox choice.
        env_dir: the built project environment commands run in (`shadow_backend.environment`), or None.
    """

    def __init__(self, *, tmp: Path, root: Path, origin: WorkspaceOrigin, start_commit: str,
                 network: bool, config: LocalConfig, env_dir: Path | None = None) -> None:
        self._tmp, self._root = tmp, root
        self._home = tmp / "home"
        self._home.mkdir(exist_ok=True)
        self.start_commit = start_commit
        self.network = network
        self.config = config
        self.env_dir = env_dir
        self._bwrap = _use_bwrap(config)
        self.origin = dataclasses.replace(origin, sandbox=_sandbox_words(self._bwrap, network, config))
        self._git = git_state.ShadowRepo(_git_dir_of(root), root)
        self._closed = False
        self._running: set[int] = set()
        self._quota = limits.DiskQuota([tmp], config.disk_quota_bytes) if config.disk_quota_bytes else None

    # --- Workspace protocol ---------------------------------------------------------------

    @property
    def root(self) -> str:
        return str(self._root)

    def read_bytes(self, path: str) -> bytes:
        """The file's bytes. Opened without blocking and checked once open (`_read_regular`)."""
        return _read_regular(confine(self._root, path), path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write through a temp file and a rename: forks sharing hard links never see it."""
        target = confine(self._root, path)
        if target.is_dir():
            raise IsADirectoryError(21, "Is a directory", path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a parent is a file
            raise NotADirectoryError(20, "Not a directory", path) from None
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".recap-write-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp_name, target.stat().st_mode & 0o7777 if target.exists() else 0o644)
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise

    def delete(self, path: str) -> None:
        pure = PurePosixPath(check_path(path))
        entry = confine(self._root, str(pure.parent)) / pure.name
        if not entry.is_symlink():  # a symlink itself is removed, wherever it points
            entry = confine(self._root, path)
            if entry.is_dir():
                raise IsADirectoryError(21, "Is a directory", path)
            if not entry.exists():
                raise FileNotFoundError(2, "No such file or directory", path)
        entry.unlink()

    def exists(self, path: str) -> bool:
        return confine(self._root, path).exists()

    def is_dir(self, path: str) -> bool:
        return confine(self._root, path).is_dir()

    def list_files(self, path: str = ".") -> list[str]:
        target = confine(self._root, path)
        if not target.exists():
            raise FileNotFoundError(2, "No such file or directory", path)
        return self._git.list_files(target.relative_to(self._root).as_posix())

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        env = self._command_env()
        host_path = env["PATH"].replace(environment.ENV_MOUNT, str(self.env_dir / "venv")) if self.env_dir else env["PATH"]
        if not argv or (os.sep not in argv[0] and shutil.which(argv[0], path=host_path) is None):
            return CommandResult(127, "", f"command not found: {argv[0] if argv else '(empty)'}", False, 0.0)
        if self._bwrap:
            argv = self._bwrap_argv() + argv
        if self._quota is not None:
            self._quota.start()
        return _run_process(argv, cwd=self._root, env=env, timeout_s=timeout_s, config=self.config,
                            running=self._running, quota=self._quota)

    def interrupt(self) -> None:
        """Kill the process groups of the commands running now (from any thread); each `run` then
        returns what its command printed so far. For cancelling a session mid-command."""
        for pgid in list(self._running):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def diff(self) -> str:
        return self._git.diff_worktree(self.start_commit)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._git.close()
            _discard_tmp(self._tmp)

    # --- beyond the protocol --------------------------------------------------------------

    def fork(self, n: int) -> list["LocalWorkspace"]:
        """`n` independent copies of the current state (files, sealed history, start commit).

        Raises: `ValueError` for n < 1; `WorkspaceError` when copying fails (nothing is leaked).
        """
        from shadow_backend import fork as fork_copy

        if n < 1:
            raise ValueError(f"fork needs n >= 1, got {n}")
        forks: list[LocalWorkspace] = []
        try:
            for _ in range(n):
                tmp = _claimed_tmp(self._tmp.parent)
                try:  # reflinks where the file system has them, else hard-linked git objects + cp
                    fork_copy.copy_tree(_git_dir_of(self._root), _git_dir_of(tmp / self._root.name),
                                        link_objects="objects")
                    fork_copy.copy_tree(self._root, tmp / self._root.name)
                    forks.append(LocalWorkspace(tmp=tmp, root=tmp / self._root.name, origin=self.origin,
                                                start_commit=self.start_commit, network=self.network,
                                                config=self.config, env_dir=self.env_dir))
                except BaseException:
                    _discard_tmp(tmp)
                    raise
        except BaseException:
            for ws in forks:
                ws.close()
            raise
        return forks

    def __enter__(self) -> "LocalWorkspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalWorkspace(root={self.root!r}, sandbox={self.origin.sandbox!r})"

    def _command_env(self) -> dict[str, str]:
        path = os.environ.get("PATH", os.defpath)
        variables = {"PATH": environment.command_path(path), "VIRTUAL_ENV": environment.ENV_MOUNT} if self.env_dir else {}
        return {
            "PATH": path,
            "HOME": str(self._home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "TMPDIR": "/tmp",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "NO_COLOR": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **variables,
        }

    def _bwrap_argv(self) -> list[str]:
        if self.env_dir is None:
            return sandbox.bwrap_argv(writable=[self._root, self._home], chdir=self._root,
                                      path_var=self._command_env()["PATH"], hidden=[Path(self.origin.repo) / ".git"],
                                      network=self.network, tmp_size_bytes=self.config.tmp_size_bytes)
        return _env_bwrap_argv(self._root, self._home, [(self.env_dir / "venv", environment.ENV_MOUNT, False)],
                               repo=self.origin.repo, network=self.network, config=self.config)


def _env_bwrap_argv(root: Path, home: Path, binds: list[tuple[Path, str, bool]], *, repo: str, network: bool,
                    config: LocalConfig, hide_git: bool = False) -> list[str]:
    """The sandbox of a workspace with a project environment: the workspace at WORKSPACE_MOUNT,
    `binds` (the environment), the base interpreter instead of recap's virtualenv; `hide_git`
    shows the workspace's .git empty (for the set-up: see `_build_environment`)."""
    empty = [f"{environment.WORKSPACE_MOUNT}/.git"] if hide_git and (root / ".git").is_dir() else []
    path_var = environment.command_path(os.environ.get("PATH", os.defpath))
    return sandbox.bwrap_argv(writable=[home], chdir=environment.WORKSPACE_MOUNT, path_var=path_var,
                              hidden=[Path(repo) / ".git"], network=network, tmp_size_bytes=config.tmp_size_bytes,
                              binds=[(root, environment.WORKSPACE_MOUNT, True), *binds],
                              prefixes=[os.path.dirname(os.path.dirname(environment.base_interpreter()))],
                              empty=empty)


def _prepare_environment(env: Environment, *, repo: str, root: Path, home: Path,
                         config: LocalConfig) -> tuple[Environment, Path]:
    """Build `env` for the workspace at `root` (or reuse the cached build of its key), copy its
    overlay and include files into `root`; returns (env with key and set-up output, its directory).

    Raises: WorkspaceError when bubblewrap does not work (the environment's paths need its mounts),
    the set-up command fails (its output is in the message), or it came from a session file
    (`Environment.from_session`) and is not built yet."""
    if not _use_bwrap(config):
        raise WorkspaceError("a project environment on the local backend needs bubblewrap (the venv and the "
                             "workspace are mounted at fixed paths); use --setup none or the docker backend")
    interpreter = environment.base_interpreter()
    if env.include and Path(repo).is_dir():
        environment.copy_includes(Path(repo), root, env.include)
    key = environment.environment_key(env, root, interpreter=interpreter)
    with environment.locked(key) as env_dir:
        if environment.is_ready(env_dir):
            environment.apply_overlay(env_dir / "overlay", root)
        elif env.from_session:
            raise WorkspaceError(
                f"the session records the environment set-up command {env.setup!r}, which is not built on this "
                "machine; a session file is untrusted and a set-up command runs with network access, so it is "
                "not run unless you say so: --setup recorded runs it, --setup CMD runs yours, --setup none uses none")
        else:
            _build_environment(env, key, env_dir, repo=repo, root=root, home=home, config=config)
        output = (env_dir / "output.txt").read_text(encoding="utf-8")
    return dataclasses.replace(env, key=key, output=output), env_dir


def _build_environment(env: Environment, key: str, env_dir: Path, *, repo: str, root: Path, home: Path,
                       config: LocalConfig) -> None:
    """Run the set-up command of `env` in the workspace at `root` (network on, the venv being built
    and the pip cache writable), save what it wrote into the workspace as the overlay, and rename
    the result to `env_dir` once complete. Call with the key's lock held.

    The workspace's sealed .git is hidden from the set-up: its history is not the project's (no
    tags), so a version computed from it (setuptools_scm, hatch-vcs) would be wrong, e.g. 0.1.dev1,
    and make pip pick ancient releases of the packages that depend on the project. Without it an
    sdist's version comes from PKG-INFO; a checkout states its own version in the set-up command
    (`SETUPTOOLS_SCM_PRETEND_VERSION=1.2.3 pip install -e .`)."""
    building = env_dir.with_name(f"{key}.building-{os.getpid()}")
    _force_rmtree(building)
    (building / "venv").mkdir(parents=True)
    try:
        before = environment.file_states(root)
        binds = [(building / "venv", environment.ENV_MOUNT, True),
                 (environment.pip_cache(), environment.PIP_CACHE_MOUNT, True)]
        argv = _env_bwrap_argv(root, home, binds, repo=repo, network=True, config=config, hide_git=True)
        variables = {"HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp",
                     "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1",
                     "PATH": environment.command_path(os.environ.get("PATH", os.defpath)),
                     **environment.setup_variables()}
        script = environment.setup_script(env, interpreter=environment.base_interpreter())
        result = _run_process([*argv, "bash", "-c", script], cwd=root, env=variables,
                              timeout_s=config.setup_timeout_s, config=config, running=set())
        output = environment.bounded_output(result.stdout + result.stderr)
        if result.exit_code != 0 or result.timed_out:
            why = "timed out" if result.timed_out else f"exit {result.exit_code}"
            raise WorkspaceError(f"the environment set-up `{env.setup}` failed ({why}):\n{output[-4000:]}")
        environment.save_overlay(root, before, building / "overlay")
        (building / "output.txt").write_text(output, encoding="utf-8")
        (building / "ready").write_text(key, encoding="utf-8")
        _force_rmtree(env_dir)
        os.replace(building, env_dir)
        logger.info("environment %s built in %.1f s", key, result.duration_s)
    finally:
        _force_rmtree(building)


def _read_regular(target: Path, path: str) -> bytes:
    """Read `target` (`path` for messages; symlinks already resolved) if it is a regular file when
    opened. `O_NONBLOCK` keeps the open from waiting on a FIFO a command put there after `confine`
    looked (`fstat` then refuses it), `O_NOFOLLOW` from following a symlink put there.

    Raises: NotRegularFile, IsADirectoryError, OSError."""
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", path)
        if not stat.S_ISREG(mode):
            raise special_file_error(path, mode)
        return handle.read()


def _use_bwrap(config: LocalConfig) -> bool:
    if config.sandbox == "none":
        return False
    works = bwrap_works()
    if config.sandbox == "bwrap" and not works:
        raise WorkspaceError("sandbox='bwrap' was asked for but bubblewrap does not work here")
    return works


def _sandbox_words(bwrap: bool, network: bool, config: LocalConfig) -> str:
    if bwrap:
        where = (f"bwrap: {'network allowed' if network else 'no network'}, toolchain read-only, "
                 f"no host secrets or sockets, /tmp {limits.size_words(config.tmp_size_bytes)}")
    else:
        where = "none: sandbox disabled by config" if config.sandbox == "none" else "none: bubblewrap unavailable"
    how = "cgroup" if limits.cgroups_available() else "rlimit"
    bounds = [f"memory {limits.size_words(config.memory_limit_bytes)} ({how})" if config.memory_limit_bytes else "",
              f"{config.max_processes} processes ({how})" if config.max_processes else "",
              f"disk quota {limits.size_words(config.disk_quota_bytes)}" if config.disk_quota_bytes else ""]
    return "; ".join([where, ", ".join(b for b in bounds if b) or "no limits"])


class LocalBackend:
    """Makes `LocalWorkspace`s. Stateless: both constructors are class methods."""

    name = "local"

    @classmethod
    def create(cls, repo: str | os.PathLike[str], *, buffers: dict[str, str] | None = None,
               network: bool = False, parent_dir: str | os.PathLike[str] | None = None,
               config: LocalConfig | None = None, env: Environment | None = None) -> LocalWorkspace:
        """A workspace holding what the user sees in `repo`, plus unsaved `buffers`.

        Args:
            repo: a git working tree (or any directory inside one; its top level is used), or a
                plain directory (then `origin.base_commit` is None and every file is a change).
            buffers: unsaved editor buffers, workspace-relative path -> full text.
            network: let commands use the network.
            parent_dir: where to make the temp directory (default: the system temp dir).
            env: the project environment commands run in (`shadow_backend.environment.resolve`):
                built by its set-up command, or reused from the cache; None: the host toolchain.
        Raises:
            WorkspaceError: `repo` is not a directory, git failed, or the environment's set-up failed.
            PathOutsideWorkspace: a buffer path leaves the workspace.
        """
        view = git_state.read_user_view(repo)
        with _Building(view.toplevel.name, parent_dir) as build:
            git_state.copy_files(view.toplevel, build.root, view.files)
            shadow = git_state.ShadowRepo.init(build.git_dir, build.root, exclude=view.exclude)
            user_tree = shadow.import_worktree(force=view.is_git)
            missing = shadow.missing_blobs(e.sha for e in view.head_entries)
            if missing:  # HEAD versions of files the user changed or deleted
                shadow.store_blobs(git_state.stream_blobs(view.toplevel, missing))
            base_tree = shadow.tree_from_entries(view.head_entries)
            origin = WorkspaceOrigin(repo=str(view.toplevel), base_commit=view.head, buffers=dict(buffers or {}),
                                     env=env)
            return build.finish(shadow, base_tree, user_tree, origin, network=network, config=config)

    @classmethod
    def from_origin(cls, origin: WorkspaceOrigin, *, network: bool = False,
                    parent_dir: str | os.PathLike[str] | None = None,
                    config: LocalConfig | None = None) -> LocalWorkspace:
        """Rebuild the start state recorded in `origin`: `origin.repo` at `base_commit` (its blobs
        as stored: no filter or eol conversion), then `base_diff` applied (`git apply --binary`),
        then the buffers, then `origin.env` (rebuilt or reused from the cache).

        Raises:
            WorkspaceError: the commit is missing from `origin.repo`, it holds a path git refuses,
                or the diff does not apply.
        """
        with _Building(Path(origin.repo).name or "workspace", parent_dir) as build:
            shadow = git_state.ShadowRepo.init(build.git_dir, build.root)
            base_tree = git_state.EMPTY_TREE
            if origin.base_commit is not None:
                entries = git_state.read_commit(origin.repo, origin.base_commit)
                shadow.store_blobs(git_state.stream_blobs(origin.repo, (e.sha for e in entries)))
                base_tree = shadow.checkout(entries)
            shadow.apply(origin.base_diff)
            user_tree = shadow.snapshot(force=True)
            return build.finish(shadow, base_tree, user_tree, origin, network=network, config=config)


def _git_dir_of(root: Path) -> Path:
    """recap's git directory of the workspace root `root`: beside it, out of the sandbox's reach."""
    return root.with_name(root.name + ".git")


def _claimed_tmp(parent_dir: str | os.PathLike[str] | None) -> Path:
    """A new `recap-ws-*` temp directory, claimed for this process at once (`gc.claim_dir`), so
    that `recap backend gc` removes it if the process is killed while the workspace is built or
    copied. The workspace that takes it over keeps the claim; `_discard_tmp` ends both."""
    tmp = Path(tempfile.mkdtemp(prefix="recap-ws-", dir=parent_dir)).resolve()
    gc.claim_dir(tmp)
    return tmp


def _discard_tmp(tmp: Path) -> None:
    """Remove a workspace temp directory (read-only parts included) and its owner record."""
    _force_rmtree(tmp)
    gc.release_dir(tmp)


class _Building:
    """The temp directory of a workspace under construction: claimed for gc from the start,
    removed with its claim if construction fails, handed to the workspace if it succeeds."""

    def __init__(self, name: str, parent_dir: str | os.PathLike[str] | None) -> None:
        self.tmp = _claimed_tmp(parent_dir)
        self.root = self.tmp / name
        self.git_dir = _git_dir_of(self.root)
        try:
            self.root.mkdir()
        except BaseException:
            _discard_tmp(self.tmp)
            raise

    def __enter__(self) -> "_Building":
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            _discard_tmp(self.tmp)

    def finish(self, shadow: git_state.ShadowRepo, base_tree: str, user_tree: str, origin: WorkspaceOrigin, *,
               network: bool, config: LocalConfig | None) -> LocalWorkspace:
        """Write buffers, set up the environment (what its set-up writes into the workspace is part
        of the start state), commit `base` and `start`, and hand over the workspace."""
        config = config or LocalConfig()
        for path, text in origin.buffers.items():
            target = confine(self.root, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode("utf-8", "surrogateescape"))
        env_dir = None
        if origin.env is not None:
            (self.tmp / "home").mkdir(exist_ok=True)
            env, env_dir = _prepare_environment(origin.env, repo=origin.repo, root=self.root, home=self.tmp / "home",
                                                config=config)
            origin = dataclasses.replace(origin, env=env)
            start_tree = shadow.snapshot(force=True)
        else:
            start_tree = shadow.snapshot(force=True, paths=origin.buffers) if origin.buffers else user_tree
        base = shadow.commit(base_tree, parent=None, message="base")
        start = shadow.commit(start_tree, parent=base, message="start")
        shadow.seal(base=base, start=start)
        base_diff = shadow.diff_trees(base_tree, user_tree)
        shadow.close()
        origin = dataclasses.replace(origin, base_diff=base_diff)
        return LocalWorkspace(tmp=self.tmp, root=self.root, origin=origin, start_commit=start,
                              network=network, config=config, env_dir=env_dir)
