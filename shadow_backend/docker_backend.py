"""The Docker shadow backend: the local workspace's files, commands run in a locked-down container.

Each `DockerWorkspace` owns one host directory (built exactly like a local workspace, by
`LocalBackend`) bind-mounted at `/workspace` into ONE container of the base image
(`recap backend build-image`). File operations and `diff()` happen host-side, with the local
backend's semantics; `run()` execs inside the container:

- `network_mode="none"`, CPU (`cpus`), memory (`mem_limit`, no extra swap) and pids
  (`pids_limit`) limits, all capabilities dropped, `no-new-privileges`;
- as a non-root user: the host's uid when it is not root, else the image's `recap` user (uid
  1000), to which the workspace files, the agent's `.git` included, are handed;
- PID 1 is an init (running as root, out of the user's reach) that reaps orphans; when a command
  ends, whatever it left running is SIGKILLed, and on timeout every process of the command's user
  in the container is SIGKILLed from a second exec (`kill -KILL -1`), which takes the whole tree,
  double-forked and `setsid` escapees included; the result then says `timed_out=True`. Commands
  in one workspace therefore run one at a time (a lock); use `fork` for parallel work;
- a command killed by a signal exits 128+N (bash's convention), e.g. 137 for the OOM killer;
- stdout/stderr are kept up to `max_output_bytes` each (head and tail, with a marker).

Containers carry labels (`recap.workspace=1`, owner pid/start/host, created time) so that
`recap backend gc` (run also at start-up, once per process) removes what a crash left behind.

Threat model: git
-----------------
Trusted: recap, the host's git and Docker daemon, the image. Untrusted: whatever runs in the
container and everything it can write, i.e. the whole bind-mounted root: files,
`.gitattributes`, nested repositories and the agent's `.git` (config, hooks, index, refs), as
well as session files and the user's repository (see `shadow_backend.local`).

- Host-side git (`diff()`, `list_files()`, forks, replay) works on recap's git directory beside
  the root on the host, which is not mounted into the container; the container's `.git` is the
  agent's copy, never read by the host. So no git config, hook or attribute written in the
  container reaches a host git command, and host git writes nothing the container sees but the
  working tree it was asked to check out.
- Every host git command runs as in the local backend (`git_state.hardened_env`: fsmonitor off,
  hooks off, no transport, no user config; diffs without external diff or textconv; the tree's
  attributes neutralised; nested repositories never added), so even the working tree it reads
  names no program to run.
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
        max_output_bytes: bytes kept per stream (stdout, stderr) of one command; the middle of
            longer output is dropped and a marker says how many bytes.
        kill_grace_s: seconds to wait for the output stream to close after the kill.
    """

    image: str = DEFAULT_IMAGE
    cpus: float = 1.0
    mem_limit: str = "1g"
    pids_limit: int = 256
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
        if not self.mem_limit or self.mem_limit[-1].lower() not in "0123456789bkmg":
            raise ConfigError(f"mem_limit={self.mem_limit!r}: use Docker notation such as '512m' or '1g'")

    @property
    def sandbox(self) -> str:
        return (
            f"docker: network_mode=none, image={self.image}, cpus={self.cpus:g}, mem_limit={self.mem_limit}, "
            f"pids_limit={self.pids_limit}, non-root user, caps dropped"
        )


_WRAPPER = 'exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; rc=$?; kill -KILL -1; kill -KILL -1; exit $rc'
"""Runs the command, then SIGKILLs whatever it left behind (background jobs, a fork bomb): every
process of the command user except this shell. Its `$0` is "recap"; a missing program exits 127."""


_COMMAND_ENV = {
    "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp", "PAGER": "cat",
    "GIT_PAGER": "cat", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1",
}
"""What commands see besides the image's PATH: the same variables as in a local workspace."""


def _exec_user() -> tuple[int, int]:
    """The (uid, gid) commands run as inside the container: never root."""
    if os.geteuid() == 0:
        return USER_UID, USER_UID
    return os.geteuid(), os.getegid()


def _hand_over(root: str, uid: int, gid: int, *, start: str | None = None) -> None:
    """Give the container user the files under `root` (all of them, or only `start` and what lies
    below it). Host git does not mind: it reads recap's git directory, which stays the host's."""
    if uid == os.geteuid():
        return
    top = start or root
    for path in [top] + [os.path.join(d, n) for d, dirs, files in os.walk(top) for n in dirs + files]:
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
        return self._files.diff()

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

        def pump() -> None:
            for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                if chunk_out:
                    out.feed(chunk_out)
                if chunk_err:
                    err.feed(chunk_err)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        reader.join(timeout_s)
        timed_out = reader.is_alive()
        if timed_out:
            self._kill_user_processes()
            reader.join(self.config.kill_grace_s)
        duration = time.monotonic() - started
        code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -9 if timed_out or code is None else int(code)
        return CommandResult(exit_code, out.text(), err.text(), timed_out, duration)

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
