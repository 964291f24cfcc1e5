"""The offline base image (mirror choice, idempotent build) and garbage collection by owner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from shadow_backend import gc
from shadow_backend.docker_backend import DockerBackend
from shadow_backend.image import (
    DEFAULT_PACKAGES,
    DEFAULT_SUITE,
    FALLBACK_MIRROR,
    RECIPE_LABEL,
    build_base_image,
    default_mirror,
    docker_client,
    recipe_of,
)


def _cli(args: list[str]):  # type: ignore[no-untyped-def]
    from recap.cmd_backend import register

    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, args)


def test_default_mirror_reads_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    assert default_mirror(sources_dir=str(tmp_path)) == FALLBACK_MIRROR
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert default_mirror(sources_dir=str(tmp_path)) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("# comment\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    assert default_mirror(sources_dir=str(tmp_path)) == "http://old.example/debian"


def test_build_is_skipped_when_the_image_of_the_same_recipe_exists() -> None:
    build = build_base_image(name="recap-base")
    assert build.built is False
    image = docker_client().images.get("recap-base")
    assert build.image_id == image.id
    assert image.labels[RECIPE_LABEL] == recipe_of(DEFAULT_SUITE, DEFAULT_PACKAGES)
    # another recipe (one more package) is a different key: that image would be rebuilt
    assert recipe_of(DEFAULT_SUITE, (*DEFAULT_PACKAGES, "curl")) != recipe_of(DEFAULT_SUITE, DEFAULT_PACKAGES)
    result = _cli(["backend", "build-image", "--name", "recap-base"])
    assert result.exit_code == 0 and "exists" in result.output


def test_image_has_the_tools_and_a_non_root_user() -> None:
    out = docker_client().containers.run(
        "recap-base", ["bash", "-c", "id -u; python3 --version; git --version; rg --version | head -1"],
        remove=True, network_mode="none",
    ).decode()
    uid, python, git_version, rg = out.splitlines()
    assert uid == "1000"
    assert python.startswith("Python 3.") and git_version.startswith("git version") and rg.startswith("ripgrep")


def test_gc_keeps_live_owners_and_removes_dead_ones(small_repo: Path, tmp_path: Path) -> None:
    live = DockerBackend.create(small_repo)  # first: creating one also runs the start-up gc
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = dead.stdout.strip()
    orphan = tmp_path / "recap-ws-orphan"
    (orphan / "demo").mkdir(parents=True)
    Path(str(orphan) + gc.OWNER_SUFFIX).write_text(json.dumps({"pid": dead_pid, "start": "1", "host": ""}))
    container = docker_client().containers.run(
        "recap-base", ["sleep", "infinity"], detach=True, network_mode="none",
        labels={gc.LABEL: "1", "recap.owner_pid": dead_pid, "recap.owner_start": "1"},
    )
    try:
        report = gc.collect_garbage(temp_root=tmp_path)
        assert str(orphan) in report.dirs and not orphan.exists()
        assert container.name in report.containers
        assert docker_client().containers.list(all=True, filters={"id": container.id}) == []
        assert Path(live.root).exists()
        assert live.run("echo still here", timeout_s=30).stdout == "still here\n"
    finally:
        live.close()


def test_gc_cli() -> None:
    result = _cli(["backend", "gc"])
    assert result.exit_code == 0
    assert "removed" in result.output
