"""What the sandbox promises against a hostile command, written as the attacks it must stop.

A command in a workspace (the model's, or one a repository makes the model run) must not reach
the host: no host UNIX socket (docker.sock, a server in a host temp dir), no secrets (/etc/shadow,
/root, $HOME), no capabilities. And it must stay inside its limits on both backends: memory
(shared memory included), processes (for root too), the private /tmp, and the workspace's disk.
Each limit a command hits is told in its stderr as a `[recap] ...` line. Limits are set low here
so that the attacks stay small; the defaults are in `LocalConfig` and `DockerConfig`.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from shadow_backend import limits
from shadow_backend.limits import cgroups_available
from shadow_backend.local import LocalBackend, LocalConfig

MiB = 2**20
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture
def repo(make_repo: Any) -> Path:
    return make_repo({"a.txt": "a\n"})


def _limited(backend: str, repo: Path, *, memory_mib: int = 256, processes: int = 64, tmp_mib: int = 64,
             disk_mib: int = 64) -> Any:
    """A workspace of `repo` on `backend` with small limits."""
    if backend == "local":
        config = LocalConfig(memory_limit_bytes=memory_mib * MiB, max_processes=processes,
                             tmp_size_bytes=tmp_mib * MiB, disk_quota_bytes=disk_mib * MiB)
        return LocalBackend.create(repo, config=config)
    from shadow_backend.docker_backend import DockerBackend, DockerConfig

    config = DockerConfig(mem_limit=f"{memory_mib}m", pids_limit=processes, tmp_size_bytes=tmp_mib * MiB,
                          disk_quota_bytes=disk_mib * MiB)
    return DockerBackend.create(repo, config=config)


def _python(code: str) -> str:
    return f"python3 -c {shlex.quote(code)}"


# --- the host's sockets -----------------------------------------------------------------------

@pytest.fixture
def unix_server() -> Iterator[tuple[Path, list[int]]]:
    """A UNIX socket server in a host temp dir outside /tmp (which the sandbox replaces anyway)
    that answers b"pong"; yields its path and the list of connections it accepted."""
    folder = Path("/var/tmp") / f"recap-sock-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o755)
    path = folder / "server.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen()
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.sendall(b"pong")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield path, accepted
    server.close()
    path.unlink()
    folder.rmdir()


_CONNECT = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(3)\n"
            "s.connect(sys.argv[1])\nprint(s.recv(4).decode())")


@pytest.mark.parametrize("network", [False, True])
def test_a_unix_socket_server_on_the_host_is_unreachable(repo: Path, unix_server: tuple[Path, list[int]],
                                                         network: bool) -> None:
    path, accepted = unix_server
    with socket.socket(socket.AF_UNIX) as probe:  # the server works from the host
        probe.connect(str(path))
        assert probe.recv(4) == b"pong"
    # with network=True too: what stops it is the socket's absence, not the network namespace
    with LocalBackend.create(repo, network=network) as ws:
        result = ws.run(f"{_python(_CONNECT)} {path}", timeout_s=30)
    assert result.exit_code != 0 and "pong" not in result.stdout
    assert "No such file or directory" in result.stderr
    assert accepted == [1]


@pytest.mark.docker
def test_the_docker_socket_is_unreachable(repo: Path) -> None:
    sock = Path("/var/run/docker.sock")
    assert sock.is_socket(), "dockerd must run for this test (scripts/services.sh)"
    with LocalBackend.create(repo) as ws:
        result = ws.run(f"ls -l {sock} /run /var/run; {_python(_CONNECT)} {sock}", timeout_s=30)
    assert result.exit_code != 0 and "docker.sock" not in result.stdout
    assert "No such file or directory" in result.stderr


# --- the host's secrets -----------------------------------------------------------------------

def test_host_secrets_are_not_visible(repo: Path) -> None:
    home = Path.home()
    marker = home / f".recap-test-secret-{uuid.uuid4().hex[:8]}"
    marker.write_text("hunter2\n")
    try:
        with LocalBackend.create(repo) as ws:
            shown = ws.run(f"cat /etc/shadow /etc/gshadow {marker}; ls -A /root /home {home}", timeout_s=30)
            who = ws.run("id -u; grep CapEff /proc/self/status", timeout_s=30)
    finally:
        marker.unlink()
    assert "hunter2" not in shown.stdout and marker.name not in shown.stdout
    for secret in ("/etc/shadow", "/etc/gshadow"):
        assert f"cat: {secret}: Permission denied" in shown.stderr
    assert f"cat: {marker}: No such file or directory" in shown.stderr
    # what is left of /root or $HOME is the toolchain PATH names (e.g. ~/.pyenv), nothing else
    toolchain = {Path(p).resolve() for p in os.environ["PATH"].split(os.pathsep) if p}
    toolchain |= {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    listed = [line for line in shown.stdout.splitlines() if line and not line.endswith(":")]
    for name in listed:
        assert any(name in t.parts for t in toolchain), f"{name} is visible but no toolchain dir"
    uid, caps = who.stdout.splitlines()
    assert uid != "0" and caps.split() == ["CapEff:", "0000000000000000"]


def test_etc_entries_other_users_cannot_read_are_masked(repo: Path) -> None:
    from shadow_backend.sandbox import etc_secrets

    masked = [path for path, is_dir in etc_secrets() if not is_dir]
    assert "/etc/shadow" in masked
    with LocalBackend.create(repo) as ws:
        result = ws.run(["cat", *masked], timeout_s=30)
    assert result.stdout == "" and result.stderr.count("Permission denied") == len(masked)


def test_the_toolchain_still_runs_tests_in_the_workspace(make_repo: Any) -> None:
    # the interpreter's environment (a virtualenv, pyenv under /root) stays visible, read-only
    repo = make_repo({"calc.py": "def add(a, b):\n    return a + b\n",
                      "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"})
    with LocalBackend.create(repo) as ws:
        result = ws.run(f"{sys.executable} -m pytest -q -p no:cacheprovider tests; touch {sys.prefix}/x",
                        timeout_s=120)
    assert "1 passed" in result.stdout, result.stdout + result.stderr
    assert "Read-only file system" in result.stderr and not (Path(sys.prefix) / "x").exists()


def test_programs_linked_from_path_stay_visible(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /usr/local/bin/node -> /opt/node/bin/node: the link's target prefix is bound, not its neighbours
    prefix = tmp_path / "opt" / "tool"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "share").mkdir()
    (prefix / "share" / "data.txt").write_text("tool data\n")
    tool = prefix / "bin" / "recap-linked-tool"
    tool.write_text('#!/bin/sh\ncat "$(dirname "$(readlink -f "$0")")/../share/data.txt"\n')
    tool.chmod(0o755)
    (tmp_path / "opt" / "secret.txt").write_text("not the tool's\n")
    links = tmp_path / "links"
    links.mkdir()
    (links / "recap-linked-tool").symlink_to(tool)
    monkeypatch.setenv("PATH", f"{links}{os.pathsep}{os.environ['PATH']}")
    with LocalBackend.create(repo) as ws:
        result = ws.run(f"recap-linked-tool; cat {tmp_path}/opt/secret.txt", timeout_s=30)
    assert result.stdout == "tool data\n"
    assert "secret.txt: No such file or directory" in result.stderr


def test_root_and_dev_are_read_only(repo: Path) -> None:
    with LocalBackend.create(repo) as ws:
        result = ws.run("touch /made-here /dev/made-here /etc/made-here", timeout_s=30)
    assert result.stderr.count("Read-only file system") == 3


def test_no_new_user_namespace_inside(repo: Path) -> None:
    # a nested user namespace would hand the command capabilities (over its own mounts)
    with LocalBackend.create(repo) as ws:
        result = ws.run("unshare --user --map-root-user id -u", timeout_s=30)
    assert result.exit_code != 0 and result.stdout == ""
    assert "unshare failed" in result.stderr  # refused by the kernel (user.max_user_namespaces=0)


# --- limits, on both backends -----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_private_tmp_is_bounded(repo: Path, backend: str, where: str) -> None:
    with _limited(backend, repo, tmp_mib=8) as ws:
        result = ws.run(f"head -c {24 * MiB} /dev/zero > {where}/big; stat -c %s {where}/big", timeout_s=60)
    assert "No space left on device" in result.stderr
    assert int(result.stdout) <= 8 * MiB


SHARED_MEMORY = """
import mmap
size = {size}
m = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
for i in range(0, size, 4096):
    m[i] = 1
print("survived")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_anonymous_memory_hits_the_memory_limit(repo: Path, backend: str) -> None:
    with _limited(backend, repo, memory_mib=64) as ws:
        result = ws.run(_python(SHARED_MEMORY.format(size=256 * MiB)), timeout_s=60)
        after = ws.run("echo still here", timeout_s=30)
    assert result.exit_code != 0 and "survived" not in result.stdout
    if backend == "docker" or cgroups_available():
        assert "[recap] memory limit of 64" in result.stderr, result.stderr
    assert after.stdout == "still here\n"


def test_without_a_cgroup_rlimits_stand_in(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # where no cgroup can be made, RLIMIT_AS bounds shared mappings too (and the words say so)
    monkeypatch.setattr(limits, "_layout", lambda: None)
    with _limited("local", repo, memory_mib=256) as ws:
        assert "memory 256 MiB (rlimit)" in ws.origin.sandbox
        result = ws.run(_python(SHARED_MEMORY.format(size=512 * MiB)), timeout_s=60)
    assert result.exit_code != 0 and "survived" not in result.stdout
    assert "Cannot allocate memory" in result.stderr


@pytest.mark.skipif(not cgroups_available(), reason="tmpfs pages count only in a cgroup (told as 'rlimit')")
def test_tmpfs_files_count_as_memory(repo: Path) -> None:
    with _limited("local", repo, memory_mib=64, tmp_mib=512, disk_mib=512) as ws:
        result = ws.run(f"head -c {256 * MiB} /dev/zero > /tmp/big; echo wrote", timeout_s=60)
    assert "wrote" not in result.stdout and result.exit_code != 0
    assert "[recap] memory limit of 64 MiB reached" in result.stderr


FORKS = """
import os, time
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    print("forked", n)
except OSError as exc:
    print("blocked after", n, exc.errno)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_process_cap_holds_even_for_root(repo: Path, backend: str) -> None:
    with _limited(backend, repo, processes=16) as ws:
        result = ws.run(_python(FORKS), timeout_s=60)
        after = ws.run("echo still here", timeout_s=30)
    words, count, errno = result.stdout.split()[:2], int(result.stdout.split()[2]), result.stdout.split()[-1]
    assert words == ["blocked", "after"] and count < 16 and errno == "11", result.stdout
    assert "[recap] process limit of 16 reached" in result.stderr
    assert after.stdout == "still here\n"  # the sleepers were killed with the command


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workspace_has_a_disk_quota(repo: Path, backend: str) -> None:
    with _limited(backend, repo, disk_mib=8) as ws:
        one_file = ws.run(f"head -c {16 * MiB} /dev/zero > big; stat -c %s big", timeout_s=60)
        assert "File too large" in one_file.stderr and int(one_file.stdout) == 8 * MiB
        many = ws.run("for i in $(seq 100); do head -c 1000000 /dev/zero > f$i; sleep 0.02; done; echo all",
                      timeout_s=60)
        assert "all" not in many.stdout and not many.timed_out
        assert "[recap] disk quota of 8 MiB for the workspace reached" in many.stderr, many.stderr
        assert not ws.exists("f100")
        cleaned = ws.run("rm -f big f*; echo cleaned", timeout_s=30)  # deleting is never stopped
        assert cleaned.stdout == "cleaned\n" and "[recap]" not in cleaned.stderr
        assert ws.run(f"head -c {2 * MiB} /dev/zero > ok; echo fine", timeout_s=30).stdout == "fine\n"
