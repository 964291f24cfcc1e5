"""Fixtures of the shadow backend tests: small git repositories and workspaces on both backends.

Docker tests need a running dockerd and the `recap-base` image (`recap backend build-image`);
CI provides both (scripts/services.sh). They are never skipped: without them they fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from shadow_support import SMALL_FILES, make_repo

BACKENDS = ("local", "docker")


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("repo") / "demo", SMALL_FILES)


@pytest.fixture(scope="module", params=BACKENDS)
def shared_workspace(request: pytest.FixtureRequest, small_repo: Path) -> Iterator[object]:
    """One workspace per backend for a whole test module (containers cost ~0.5 s each)."""
    from shadow_backend.backends import open_backend

    workspace = open_backend(request.param, small_repo)
    yield workspace
    workspace.close()
