"""The Docker shadow backend: the local workspace's files, commands run in a locked-down container.

Each `DockerWorkspace` owns one host directory (built exactly like a local workspace, by
`LocalBackend`) bind-mounted at `/workspace` into ONE container of the base image
(`recap backend build-image`). File operations and `diff()` happen host-side, with the local
backend's semantics; `run()` execs inside the container:

- `network_mode="none"`, CPU (`cpus`), memory (`mem_limit`, no extra swap) and pids
  (`pids_limit`) limits, all capabilities dropped, `no-new-privileges`;
- as a non-root user: the host's uid when it is not root, else the image's `recap` user (uid
  1000), to which the workspace files are handed (the root directory and `.git` stay the host's,
  group-writable, so that host-side git keeps trusting them);
- PID 1 is an init (running as root, out of the user's reach) that reaps orphans; when a command
  ends, whatever it left running is SIGKILLed, and on timeout every process of the command's user
  in the container is SIGKILLed from a second exec (`kill -KILL -1`), which takes the whole tree,
  double-forked and `setsid` escapees included; the result then says `timed_out=True`. Commands
  in one workspace therefore run one at a time (a lock); use `fork` for parallel work;
- a command killed by a signal exits 128+N (bash's convention), e.g. 137 for the OOM killer;
- stdout/stderr are kept up to `max_output_bytes` each (head and tail, with a marker).

Threat model: sandbox

Commands, and whatever they start, are untrusted; the host, dockerd and the base image are trusted.
A command sees the image's files (a read-only root file system) and the workspace (read-write at
/workspace), a private /tmp and /dev/shm of `tmp_size_bytes` each, and no network. It runs as a
non-root user without capabilities (`no-new-privileges`), in the container's cgroup: memory (shared
memory and tmpfs included) up to `mem_limit`, at most `pids_limit` processes. The workspace, a host
directory, may grow by `disk_quota_bytes` (one file by as much: RLIMIT_FSIZE inside, "File too
large"); the host checks its size while a command runs and stops one that goes past it. A limit a
command runs into is told at the end of its stderr (`[recap] memory limit of 1g reached: ...`, read
from the container's cgroup events where the host shows them). Not covered: kernel or dockerd bugs,
CPU time beyond `cpus`.

Containers carry labels (`recap.workspace=1`, owner pid/start/host, created time) so that
`recap backend gc` (run also at start-up, once per process) removes what a crash left behind.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Sequence

from harness.errors import ConfigError, WorkspaceError
from harness.workspace import CommandResult, WorkspaceOrigin
from shadow_backend import gc
from shadow_backend.limits import ContainerEvents, DiskQuota, size_words, tell
from shadow_backend.image import DEFAULT_IMAGE, USER_UID, WORKDIR, docker_client, image_exists
from shadow_backend.local import BoundedCapture, LocalBackend

log = logging.getLogger(__name__)

_startup_gc_done = False
_startup_lock = threading.Lock()


@dataclass(frozen=True)
class DockerConfig:
    """Settings of a Docker workspace.

    Attributes:
        image: base image (built by `recap backend build-image`).
        cpus: CPU quota in cores (fractions allowed).
        mem_limit: memory limit in Docker notation ("512m", "1g"); swap is not added on top.
        pids_limit: most processes/threads alive at once in the container.
        tmp_size_bytes: size of the container's /tmp (also its $HOME) and of its /dev/shm, each a
            tmpfs; the rest of the container's file system is read-only.
        disk_quota_bytes: how much the workspace (bind-mounted from the host) may grow beyond its
            size when it was made; also the largest file a command may write (RLIMIT_FSIZE). A
            command that goes past it is stopped (checked from the host). None: no quota.
        max_output_bytes: bytes kept per stream (stdout, stderr) of one command; the middle of
            longer output is dropped and a marker says how many bytes.
        kill_grace_s: seconds to wait for the output stream to close after the kill.
    """

    image: str = DEFAULT_IMAGE
    cpus: float = 1.0
    mem_limit: str = "1g"
    pids_limit: int = 256
    tmp_size_bytes: int = 2**30
    disk_quota_bytes: int | None = 4 * 2**30
    max_output_bytes: int = 1_000_000
    kill_grace_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.image:
            raise ConfigError("image must be a Docker image name, e.g. recap-base")
        if not 0 < self.cpus <= (os.cpu_count() or 1):
            raise ConfigError(f"cpus={self.cpus} must be in (0, {os.cpu_count()}] (cores of this machine)")
        if self.pids_limit < 8:
            raise ConfigError(f"pids_limit={self.pids_limit} is too small for a shell; use at least 8")
        if self.max_output_bytes < 1024:
            raise ConfigError("max_output_bytes must be at least 1024")
        if self.tmp_size_bytes < 2**20:
            raise ConfigError("tmp_size_bytes must be at least 1 MiB")
        if self.disk_quota_bytes is not None and self.disk_quota_bytes < 2**20:
            raise ConfigError("disk_quota_bytes must be at least 1 MiB (or None for no quota)")
        if not self.mem_limit or self.mem_limit[-1].lower() not in "0123456789bkmg":
            raise ConfigError(f"mem_limit={self.mem_limit!r}: use Docker notation such as '512m' or '1g'")

    @property
    def sandbox(self) -> str:
        return (
            f"docker: network_mode=none, image={self.image}, cpus={self.cpus:g}, mem_limit={self.mem_limit}, "
            f"pids_limit={self.pids_limit}, /tmp {size_words(self.tmp_size_bytes)}, "
            f"disk quota {size_words(self.disk_quota_bytes) if self.disk_quota_bytes else 'none'}, "
            "read-only root, non-root user, caps dropped"
        )


_WRAPPER = 'trap "" XFSZ; exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; rc=$?; kill -KILL -1; kill -KILL -1; exit $rc'
"""Runs the command, then SIGKILLs whatever it left behind (background jobs, a fork bomb): every
process of the command user except this shell. Its `$0` is "recap"; a missing program exits 127.
SIGXFSZ is ignored, so a write past RLIMIT_FSIZE fails with "File too large" instead of killing."""


_COMMAND_ENV = {
    "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp", "PAGER": "cat",
    "GIT_PAGER": "cat", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1",
}
"""What commands see besides the image's PATH: the same variables as in a local workspace."""


def _ulimits(config: DockerConfig) -> list[Any]:
    import docker.types

    quota = config.disk_quota_bytes
    fsize = [docker.types.Ulimit(name="fsize", soft=quota, hard=quota)] if quota else []
    return [*fsize, docker.types.Ulimit(name="core", soft=0, hard=0)]


def _exec_user() -> tuple[int, int]:
    """The (uid, gid) commands run as inside the container: never root."""
    if os.geteuid() == 0:
        return USER_UID, USER_UID
    return os.geteuid(), os.getegid()


def _hand_over(root: str, uid: int, gid: int, *, start: str | None = None) -> None:
    """Give the container user the files under `root` (all of them, or only `start` and what lies
    below it). The root directory and `.git` stay the host's, group-writable for `gid`, so that
    host git does not call them 'dubious ownership'."""
    if uid == os.geteuid():
        return
    keep = {os.path.realpath(root), os.path.realpath(os.path.join(root, ".git"))}
    top = start or root
    for path in [top] + [os.path.join(d, n) for d, dirs, files in os.walk(top) for n in dirs + files]:
        if os.path.realpath(path) in keep:
            os.chown(path, os.geteuid(), gid)
            os.chmod(path, 0o775)
        else:
            os.chown(path, uid, gid, follow_symlinks=False)


class DockerWorkspace:
    """A workspace whose files live on the host and whose commands run in a container.

    Matches `harness.workspace.Workspace`. Create with `DockerBackend.create` / `from_origin`.
    """

    def __init__(self, files: Any, config: DockerConfig, client: Any) -> None:
        self._files = files
        self.config = config
        self._client = client
        self._uid, self._gid = _exec_user()
        self._closed = False
        self._run_lock = threading.Lock()
        self.origin: WorkspaceOrigin = replace(files.origin, sandbox=config.sandbox)
        _hand_over(files.root, self._uid, self._gid)
        self._quota = DiskQuota([files.root], config.disk_quota_bytes) if config.disk_quota_bytes else None
        owner = gc.owner_record()
        try:
            self._container = client.containers.run(
                config.image,
                command=["sleep", "infinity"],
                name=f"recap-ws-{uuid.uuid4().hex[:12]}",
                detach=True,
                init=True,
                user="0:0",  # only the idle keeper; commands exec as the non-root user
                network_mode="none",
                nano_cpus=int(config.cpus * 1e9),
                mem_limit=config.mem_limit,
                memswap_limit=config.mem_limit,
                pids_limit=config.pids_limit,
                read_only=True,
                tmpfs={"/tmp": f"size={config.tmp_size_bytes},mode=1777"},
                shm_size=config.tmp_size_bytes,
                ulimits=_ulimits(config),
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                volumes={files.root: {"bind": WORKDIR, "mode": "rw"}},
                working_dir=WORKDIR,
                labels={
                    gc.LABEL: "1",
                    "recap.owner_pid": owner["pid"],
                    "recap.owner_start": owner["start"],
                    "recap.owner_host": owner["host"],
                    "recap.created": f"{time.time():.0f}",
                    "recap.root": files.root,
                },
            )
        except Exception as exc:
            files.close()
            raise WorkspaceError(f"could not start a container of image {config.image!r}: {exc}") from None
        self._events = ContainerEvents(self._container.id)

    # -- files: host-side, the local backend's semantics ------------------------------------
    @property
    def root(self) -> str:
        return self._files.root

    @property
    def container_name(self) -> str:
        return self._container.name

    def read_bytes(self, path: str) -> bytes:
        return self._files.read_bytes(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        from harness.workspace import confine

        target = confine(self.root, path)
        first_new = target
        while not first_new.parent.exists():
            first_new = first_new.parent
        self._files.write_bytes(path, data)
        _hand_over(self.root, self._uid, self._gid, start=str(first_new))

    def delete(self, path: str) -> None:
        self._files.delete(path)

    def exists(self, path: str) -> bool:
        return self._files.exists(path)

    def is_dir(self, path: str) -> bool:
        return self._files.is_dir(path)

    def list_files(self, path: str = ".") -> list[str]:
        return self._files.list_files(path)

    def diff(self) -> str:
        diff = self._files.diff()
        if self._uid != os.geteuid():
            # Host git just stored objects: let the container user add to the directories it made.
            objects = os.path.join(self.root, ".git", "objects")
            with os.scandir(objects) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and entry.stat().st_uid != self._uid:
                        os.chown(entry.path, self._uid, self._gid)
        return diff

    # -- commands: inside the container ---------------------------------------------------
    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        """Run `command` in the container with /workspace as cwd (see `Workspace.run`).

        Raises: WorkspaceError when the workspace is closed or the container is gone."""
        if self._closed:
            raise WorkspaceError("the workspace is closed")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s={timeout_s} must be positive")
        import docker.errors

        inner = ["bash", "-c", command] if isinstance(command, str) else list(command)
        with self._run_lock:
            try:
                return self._run(["bash", "-c", _WRAPPER, "recap", *inner], timeout_s)
            except docker.errors.DockerException as exc:
                raise WorkspaceError(f"container {self.container_name} failed to run the command: {exc}") from None

    def _run(self, argv: list[str], timeout_s: float) -> CommandResult:
        api = self._client.api
        started = time.monotonic()
        exec_id = api.exec_create(
            self._container.id, argv, user=f"{self._uid}:{self._gid}", workdir=WORKDIR,
            environment=_COMMAND_ENV,
        )["Id"]
        out, err = BoundedCapture(self.config.max_output_bytes), BoundedCapture(self.config.max_output_bytes)
        events = self._events.count()

        def pump() -> None:
            for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                if chunk_out:
                    out.feed(chunk_out)
                if chunk_err:
                    err.feed(chunk_err)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stopped = self._wait(reader, started + timeout_s)
        timed_out = reader.is_alive() and not stopped
        if reader.is_alive():
            self._kill_user_processes()
            reader.join(self.config.kill_grace_s)
        duration = time.monotonic() - started
        code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -9 if timed_out or code is None else int(code)
        notes = [stopped] if stopped else []
        notes += self._events.hits(events, memory=self.config.mem_limit, processes=self.config.pids_limit)
        if self._quota is not None and not stopped and (over := self._quota.check()):
            notes.append(over)
        return CommandResult(exit_code, out.text(), tell(err.text(), notes), timed_out, duration)

    def _wait(self, reader: threading.Thread, deadline: float) -> str | None:
        """Wait for the command's output to end, up to the monotonic `deadline`, checking the disk
        quota meanwhile; returns why the quota stops the command, or None."""
        if self._quota is not None:
            self._quota.start()
        while reader.is_alive() and (left := deadline - time.monotonic()) > 0:
            reader.join(left if self._quota is None else min(left, self._quota.interval_s))
            if reader.is_alive() and self._quota is not None and (stopped := self._quota.check()):
                return stopped
        return None

    def interrupt(self) -> None:
        """Kill the commands running now (from any thread); each `run` then returns what its command
        printed so far. For cancelling a session mid-command."""
        import docker.errors

        try:
            self._kill_user_processes()
        except docker.errors.DockerException:  # closed meanwhile: nothing runs any more
            pass

    def _kill_user_processes(self) -> None:
        """SIGKILL every process of the command user in the container (the kill itself excepted)."""
        api = self._client.api
        killer = api.exec_create(self._container.id, ["bash", "-c", "kill -KILL -1; true"],
                                 user=f"{self._uid}:{self._gid}")["Id"]
        api.exec_start(killer)

    # -- lifecycle ------------------------------------------------------------------------
    def fork(self, n: int) -> list["DockerWorkspace"]:
        """`n` independent workspaces in this one's current state, each with its own container."""
        copies = self._files.fork(n)
        made: list[DockerWorkspace] = []
        try:
            for files in copies:
                made.append(DockerWorkspace(files, self.config, self._client))
        except Exception:
            for ws in made:
                ws.close()
            for files in copies[len(made) + 1 :]:
                files.close()
            raise
        return made

    def close(self) -> None:
        """Remove the container and the host directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        import docker.errors

        try:
            self._container.remove(force=True)
        except docker.errors.NotFound:
            pass
        self._files.close()

    def __enter__(self) -> "DockerWorkspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _startup(config: DockerConfig) -> Any:
    global _startup_gc_done
    client = docker_client()
    with _startup_lock:
        if not _startup_gc_done:
            report = gc.collect_garbage()
            if report.containers or report.dirs:
                log.info("start-up gc removed %d containers, %d dirs", len(report.containers), len(report.dirs))
            _startup_gc_done = True
    if not image_exists(client, config.image):
        raise WorkspaceError(
            f"Docker image {config.image!r} not found; build it with `recap backend build-image --name {config.image}`"
        )
    return client


class DockerBackend:
    """Creates `DockerWorkspace`s (keyword options as in `DockerConfig`)."""

    @staticmethod
    def create(
        repo: str | os.PathLike[str],
        *,
        buffers: dict[str, str] | None = None,
        image: str = DEFAULT_IMAGE,
        cpus: float = 1.0,
        mem_limit: str = "1g",
        pids_limit: int = 256,
        config: DockerConfig | None = None,
    ) -> DockerWorkspace:
        """A workspace of `repo` (HEAD plus the user's changes plus `buffers`) in a container.

        Raises: WorkspaceError (no daemon, no image, repository problems); ConfigError.
        """
        config = config or DockerConfig(image=image, cpus=cpus, mem_limit=mem_limit, pids_limit=pids_limit)
        client = _startup(config)
        return DockerWorkspace(LocalBackend.create(repo, buffers=buffers), config, client)

    @staticmethod
    def from_origin(origin: WorkspaceOrigin, *, config: DockerConfig | None = None) -> DockerWorkspace:
        """A workspace in exactly the start state `origin` describes (for replay)."""
        config = config or DockerConfig()
        client = _startup(config)
        return DockerWorkspace(LocalBackend.from_origin(origin), config, client)
