"""What only the Docker backend promises: a locked-down container per workspace, a non-root user,
labels for gc, independent forks, and nothing left behind by `close()`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from harness.errors import ConfigError, WorkspaceError
from shadow_backend.docker_backend import DockerBackend, DockerConfig, DockerWorkspace
from shadow_backend.image import docker_client


@pytest.fixture(scope="module")
def workspace(small_repo: Path) -> Iterator[DockerWorkspace]:
    ws = DockerBackend.create(small_repo, buffers={"notes.txt": "unsaved\n"}, mem_limit="512m", pids_limit=64)
    yield ws
    ws.close()


def test_container_is_locked_down_and_labelled(workspace: DockerWorkspace) -> None:
    container = docker_client().containers.get(workspace.container_name)
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["Memory"] == 512 * 2**20
    assert host["PidsLimit"] == 64
    assert host["NanoCpus"] == 10**9
    assert host["CapDrop"] == ["ALL"]
    labels = container.labels
    assert labels["recap.workspace"] == "1"
    assert labels["recap.owner_pid"] == str(os.getpid())
    assert float(labels["recap.created"]) > 0
    assert "network_mode=none" in workspace.origin.sandbox


def test_commands_run_as_non_root_in_the_workspace(workspace: DockerWorkspace) -> None:
    result = workspace.run("id -u; pwd; cat notes.txt; ls pkg", timeout_s=30)
    uid, cwd, notes, *listing = result.stdout.splitlines()
    assert int(uid) != 0
    assert cwd == "/workspace"
    assert notes == "unsaved"
    assert listing == ["__init__.py", "calc.py"]
    denied = workspace.run("touch /etc/recap-was-here", timeout_s=30)
    assert denied.exit_code != 0 and "Read-only file system" in denied.stderr


def test_host_and_container_see_the_same_files(workspace: DockerWorkspace) -> None:
    workspace.write_bytes("deep/new/dir/file.txt", b"from host\n")
    appended = workspace.run("echo from container >> deep/new/dir/file.txt && echo x > made_inside.txt", timeout_s=30)
    assert appended.exit_code == 0, appended.stderr
    assert workspace.read_bytes("deep/new/dir/file.txt") == b"from host\nfrom container\n"
    assert "made_inside.txt" in workspace.list_files()
    diff = workspace.diff()
    assert "+from container" in diff and "b/made_inside.txt" in diff
    workspace.delete("made_inside.txt")
    workspace.delete("deep/new/dir/file.txt")
    assert "made_inside.txt" not in workspace.diff()


def test_argv_commands_and_missing_programs(workspace: DockerWorkspace) -> None:
    echoed = workspace.run(["printf", "%s|", "a b", "c"], timeout_s=30)
    assert echoed.stdout == "a b|c|"
    missing = workspace.run(["no-such-program-here"], timeout_s=30)
    assert missing.exit_code == 127


def test_forks_are_independent_containers(workspace: DockerWorkspace) -> None:
    workspace.write_bytes("state.txt", b"before fork\n")
    forks = workspace.fork(2)
    try:
        names = {f.container_name for f in forks} | {workspace.container_name}
        assert len(names) == 3
        forks[0].run("echo changed >> state.txt", timeout_s=30)
        assert forks[0].read_bytes("state.txt") == b"before fork\nchanged\n"
        assert forks[1].read_bytes("state.txt") == b"before fork\n"
        assert workspace.read_bytes("state.txt") == b"before fork\n"
        assert forks[1].diff() == workspace.diff()
    finally:
        for f in forks:
            f.close()
        workspace.delete("state.txt")


def test_close_removes_container_and_directory(small_repo: Path) -> None:
    ws = DockerBackend.create(small_repo)
    name, tmp = ws.container_name, Path(ws.root).parent
    assert tmp.is_dir()
    ws.close()
    ws.close()
    assert not tmp.exists()
    assert not Path(str(tmp) + ".recap-owner").exists()
    assert docker_client().containers.list(all=True, filters={"name": name}) == []
    with pytest.raises(WorkspaceError):
        ws.run("true", timeout_s=5)


def test_bad_settings_are_refused(small_repo: Path) -> None:
    with pytest.raises(ConfigError, match="pids_limit"):
        DockerConfig(pids_limit=1)
    with pytest.raises(ConfigError, match="mem_limit"):
        DockerConfig(mem_limit="lots")
    with pytest.raises(WorkspaceError, match="build-image"):
        DockerBackend.create(small_repo, image="recap-no-such-image")


def test_container_git_works_after_host_side_diffs(small_repo: Path) -> None:
    with DockerBackend.create(small_repo) as ws:
        for i in range(10):
            ws.write_bytes(f"gen/f{i}.txt", f"content {i}\n".encode())
        assert "b/gen/f9.txt" in ws.diff()  # host git stores objects here
        done = ws.run("git add -A && git -c user.name=a -c user.email=b commit -qm agent && git log --format=%s",
                      timeout_s=30)
        assert done.exit_code == 0, done.stderr
        assert done.stdout.splitlines() == ["agent", "start", "base"]
        assert "b/gen/f9.txt" in ws.diff()


def test_a_vanished_container_is_a_workspace_error(small_repo: Path) -> None:
    with DockerBackend.create(small_repo) as ws:
        docker_client().containers.get(ws.container_name).remove(force=True)
        with pytest.raises(WorkspaceError, match="failed to run"):
            ws.run("true", timeout_s=10)
