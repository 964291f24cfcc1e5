"""Project environments: where the set-up comes from, its key, include files, and the local
backend's venv (built for real in a private cache, with bubblewrap)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, WorkspaceError
from harness.workspace import Environment
from shadow_backend import environment
from shadow_backend.local import LocalBackend
from shadow_backend.mine import split_test_changes
from shadow_backend.sandbox import bwrap_works
from shadow_backend.scoring import score_workspace

needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="local environments need bubblewrap")


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_detection_from_the_project_files(tmp_path: Path) -> None:
    assert environment.detect_setup(tmp_path) is None
    _write(tmp_path, {"requirements.txt": "attrs\n", "requirements-docs.txt": "sphinx\n",
                      "pyproject.toml": '[project]\nname = "p"\n[project.optional-dependencies]\ntests = ["hypothesis"]\n'})
    assert environment.detect_setup(tmp_path) == "pip install -r requirements.txt && pip install -e '.[tests]' && pip install pytest"
    (tmp_path / "pyproject.toml").write_text("not toml [")
    assert environment.detect_setup(tmp_path) == "pip install -r requirements.txt && pip install -e . && pip install pytest"


def test_resolve_order_option_then_recap_toml_then_detection(tmp_path: Path) -> None:
    _write(tmp_path, {"setup.py": "", "recap.toml": '[env]\ninclude = ["gen/*.py"]\n'})
    assert environment.resolve(tmp_path, "make deps") == Environment(setup="make deps", include=("gen/*.py",))
    assert environment.resolve(tmp_path, "none") is None
    assert environment.resolve(tmp_path).setup == "pip install -e . && pip install pytest"
    assert environment.resolve(tmp_path, detect=False) == Environment(setup="true", include=("gen/*.py",))
    (tmp_path / "recap.toml").write_text('[env]\nsetup = "npm ci"\n')
    assert environment.resolve(tmp_path) == Environment(setup="npm ci")
    (tmp_path / "recap.toml").write_text('[env]\nsetup = "npm ci"\ncommand = "x"\n')
    with pytest.raises(ConfigError, match="unknown key.*command"):
        environment.resolve(tmp_path)
    (tmp_path / "recap.toml").write_text('[env]\ninclude = "one"\n')
    with pytest.raises(ConfigError, match="include"):
        environment.resolve(tmp_path)


def test_key_follows_the_defining_files_only(tmp_path: Path) -> None:
    env = Environment(setup="pip install -e .")
    _write(tmp_path, {"pyproject.toml": "[project]\nname='a'\n", "src/a.py": "x = 1\n"})
    key = environment.environment_key(env, tmp_path, interpreter="/usr/bin/python3")
    (tmp_path / "src/a.py").write_text("x = 2\n")
    assert environment.environment_key(env, tmp_path, interpreter="/usr/bin/python3") == key
    assert environment.environment_key(env, tmp_path, interpreter="/usr/bin/python3.12") != key
    assert environment.environment_key(Environment(setup="pip install ."), tmp_path, interpreter="/usr/bin/python3") != key
    (tmp_path / "requirements-dev.txt").write_text("pytest\n")
    assert environment.environment_key(env, tmp_path, interpreter="/usr/bin/python3") != key


def test_include_copies_ignored_files_and_refuses_to_leave_the_repository(tmp_path: Path) -> None:
    repo = _write(tmp_path / "repo", {"pkg/_version.py": "v = '1'\n", "pkg/a.py": ""})
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", repo / "pkg" / "_link.py")
    root = tmp_path / "ws"
    root.mkdir()
    assert environment.copy_includes(repo, root, ("pkg/_*.py",)) == ["pkg/_version.py"]
    assert (root / "pkg/_version.py").read_text() == "v = '1'\n" and not (root / "pkg/_link.py").exists()
    for bad in ("../secret", "/etc/passwd", " "):
        with pytest.raises(ConfigError):
            environment.copy_includes(repo, root, (bad,))


def test_overlay_and_includes_never_write_through_a_symlink_out_of_the_workspace(tmp_path: Path) -> None:
    from harness.errors import PathOutsideWorkspace

    outside = tmp_path / "outside"
    outside.mkdir()
    overlay = _write(tmp_path / "overlay", {"gen/evil.py": "x", "link.py": "y"})
    root = tmp_path / "ws"
    root.mkdir()
    os.symlink(outside, root / "gen")
    os.symlink(outside / "target.py", root / "link.py")
    with pytest.raises(PathOutsideWorkspace):
        environment.apply_overlay(overlay, root)
    repo = _write(tmp_path / "repo", {"gen/evil.py": "x"})
    with pytest.raises(PathOutsideWorkspace):
        environment.copy_includes(repo, root, ("gen/*.py",))
    (root / "gen").unlink()
    environment.apply_overlay(overlay, root)  # a symlink at the file itself is replaced, not followed
    assert list(outside.iterdir()) == [] and (root / "link.py").read_text() == "y" and not (root / "link.py").is_symlink()


def test_clean_path_drops_recap_and_other_virtualenvs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    path = os.pathsep.join([str(Path(sys.prefix) / "bin"), str(venv / "bin"), "/usr/bin", "/bin", "/usr/bin"])
    assert environment.clean_path(path) == "/usr/bin:/bin"
    assert environment.command_path(path) == "/recap/env/bin:/usr/bin:/bin"


def test_split_test_changes_keeps_source_in_the_reference() -> None:
    diff = ("diff --git a/pkg/a.py b/pkg/a.py\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-x\n+y\n"
            "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1 @@\n-t\n+u\n"
            "diff --git a/pkg/conftest.py b/pkg/conftest.py\n--- a/pkg/conftest.py\n+++ b/pkg/conftest.py\n@@ -1 +1 @@\n-c\n+d\n")
    source, tests = split_test_changes(diff)
    assert source.startswith("diff --git a/pkg/a.py") and "tests/" not in source and "conftest" not in source
    assert tests.count("diff --git") == 2 and source + tests == diff


def test_test_patch_is_applied_before_verify(make_repo: Any) -> None:
    repo = make_repo({"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": "def test_placeholder():\n    pass\n"})
    patch = ("diff --git a/test_calc.py b/test_calc.py\n--- a/test_calc.py\n+++ b/test_calc.py\n@@ -1,2 +1,3 @@\n"
             "-def test_placeholder():\n-    pass\n+from calc import add\n+def test_add():\n+    assert add(2, 3) == 5\n")
    verify = "python3 -m pytest -q -p no:cacheprovider test_calc.py::test_add"
    with LocalBackend.create(repo) as ws:
        [fixed] = ws.fork(1)
        with fixed:
            assert score_workspace(ws, diff="", verify=verify, reference_diff=None, test_patch=patch)["verify_passed"] is False
            fixed.write_bytes("calc.py", b"def add(a, b):\n    return a + b\n")
            assert score_workspace(fixed, diff="", verify=verify, reference_diff=None, test_patch=patch)["verify_passed"]
            # the agent wrote the same test file: the patch does not apply, verify fails and says why
            fixed.write_bytes("test_calc.py", b"something else\n")
            score = score_workspace(fixed, diff="", verify=verify, reference_diff=None, test_patch=patch)
            assert score["verify_passed"] is False and "does not apply" in score["verify_output"]


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RECAP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@needs_bwrap
def test_local_environment_is_built_once_read_only_and_its_files_reach_every_workspace(
        make_repo: Any, private_cache: Path) -> None:
    repo = make_repo({".gitignore": "gen.py\n", "app.py": "import gen\nprint(gen.V)\n"})
    env = Environment(setup="echo V = 7 > gen.py && echo built >> $VIRTUAL_ENV/marker && echo set-up ran")
    with LocalBackend.create(repo, env=env) as first:
        assert first.origin.env.output.strip() == "set-up ran" and first.diff() == ""
        ran = first.run("python app.py; which python; echo $VIRTUAL_ENV; test -w /recap/env || echo read-only", timeout_s=60)
        assert ran.stdout.split() == ["7", "/recap/env/bin/python", "/recap/env", "read-only"], ran.stderr
        assert first.run("pip install six", timeout_s=60).exit_code != 0  # no network, read-only venv
    with LocalBackend.create(repo, env=env) as second, LocalBackend.from_origin(second.origin) as rebuilt:
        for ws in (second, rebuilt):
            assert ws.origin.env.key == first.origin.env.key and ws.diff() == ""
            assert ws.run("python app.py", timeout_s=60).stdout == "7\n"
    assert (private_cache / "envs" / first.origin.env.key / "venv" / "marker").read_text() == "built\n"


@needs_bwrap
def test_failing_set_up_is_an_error_with_its_output_and_is_not_cached(make_repo: Any, private_cache: Path) -> None:
    repo = make_repo({"a.py": ""})
    with pytest.raises(WorkspaceError, match="(?s)exit 3.*broken on purpose"):
        LocalBackend.create(repo, env=Environment(setup="echo broken on purpose; exit 3"))
    assert not any(p.is_dir() for p in (private_cache / "envs").iterdir())


@pytest.mark.docker
def test_docker_base_image_has_python_pip_and_venv(make_repo: Any) -> None:
    """Fault 6: the image had python3 only (rebuild an older one: recap backend build-image --force)."""
    from shadow_backend.docker_backend import DockerBackend

    with DockerBackend.create(make_repo({"a.py": ""})) as ws:
        ran = ws.run("python --version && python -m pip --version && python -m venv --help > /dev/null", timeout_s=60)
        assert ran.exit_code == 0, ran.stdout + ran.stderr


def test_mined_session_splits_the_fix_from_its_tests(make_repo: Any, tmp_path: Path) -> None:
    from harness.session import read_session
    from shadow_backend.mine import mine_sessions
    from tests.conftest import run_git

    repo = make_repo({"calc.py": "def add(a, b):\n    return a - b\n"})
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "Fix add")
    [mined] = mine_sessions(repo, out_dir=tmp_path / "mined", rev_range="HEAD~1..HEAD", verify="pytest -q",
                            setup="pip install pytest")
    start = read_session(mined.path).start
    assert "calc.py" in start.reference_diff and "tests/" not in start.reference_diff
    assert start.test_patch.startswith("diff --git a/tests/test_calc.py") and "calc.py b/calc.py" not in start.test_patch
    assert start.env == {"setup": "pip install pytest", "include": []}
