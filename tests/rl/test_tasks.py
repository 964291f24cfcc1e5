"""Task making: AST mutations, and a whole `make_tasks` run on a small package (a local sdist in
the download cache, so no network is needed)."""

import ast
import io
import subprocess
import sys
import tarfile

import pytest

from harness.errors import ConfigError
from harness.session import read_session
from rl.rollout import origin_of
from rl.tasks import make_tasks, mutations_of
from shadow_backend.local import LocalBackend
from shadow_backend.scoring import run_verify

SOURCE = '''"""Tiny maths."""


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def span(items):
    total = 0
    for item in items:
        total = total + 1
    return max(items) - min(items), total


def power(x, n):
    return pow(x, n)
'''

TESTS = '''from tinymath import clamp, power, span


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_span():
    assert span([3, 9, 4]) == (6, 3)


def test_power():
    assert power(2, 3) == 8
'''


def test_each_mutation_kind_is_found_and_stays_valid_python():
    found = list(mutations_of(SOURCE, "tinymath.py"))
    kinds = {m.kind for m in found}
    assert kinds == {"flip_comparison", "off_by_one", "drop_statement", "swap_arguments"}
    flip = next(m for m in found if m.kind == "flip_comparison")
    assert flip.apply(SOURCE).count("x >= low") == 1 and flip.description == "x < low -> x >= low"
    swap = next(m for m in found if m.kind == "swap_arguments")
    assert swap.apply(SOURCE).count("pow(n, x)") == 1
    for m in found:
        ast.parse(m.apply(SOURCE))
    dropped = [m for m in found if m.kind == "drop_statement"]
    # never the only statement of a block, never a def or a docstring
    assert all("def " not in SOURCE[m.start : m.end] for m in dropped)
    assert not any(SOURCE[m.start : m.end].strip() == "total = total + 1" for m in dropped)  # sole statement of the loop
    assert any("total = 0" in SOURCE[m.start : m.end] for m in dropped)


def _sdist(path, extra=None):
    """A source distribution of tinymath; `extra` is a folder added as it is (hostile content)."""
    with tarfile.open(path, "w:gz") as tf:
        for name, text in (("tinymath.py", SOURCE), ("test_tinymath.py", TESTS), ("setup.py", "")):
            data = text.encode()
            info = tarfile.TarInfo(f"tinymath-1.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for item in sorted(extra.iterdir()) if extra else ():
            tf.add(item, f"tinymath-1.0/{item.name}")


def test_make_tasks_writes_sessions_whose_verify_fails_then_passes_with_the_fix(tmp_path, monkeypatch):
    # A PATH whose first python3 is useless: the sessions must not depend on it, nor on this
    # checkout's venv path; verify runs with the running interpreter first on PATH.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\nexit 97\n")
    (fake_bin / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:/usr/bin:/bin")
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    _sdist(cache / "downloads" / "tinymath-1.0.tar.gz")
    paths = make_tasks("tinymath==1.0", count=3, out_dir=tmp_path / "tasks", cache_dir=cache, seed=1)
    assert len(paths) == 3
    kinds = set()
    for path in paths:
        start = read_session(path).start
        assert start.source == "task" and start.verify and start.base_commit
        assert start.verify.startswith("PYTHONDONTWRITEBYTECODE=1 python3 -m pytest ")
        assert sys.prefix not in start.verify and sys.prefix not in start.task
        kinds.add(start.meta["mutation"])
        assert "tinymath.py" in start.base_diff and "test_" not in start.base_diff.split("\n")[0]
        with LocalBackend.from_origin(origin_of(start)) as ws:  # what rollouts and replays do
            failing = run_verify(ws, start.verify, timeout_s=120)
            assert not failing.passed and failing.tests_failed, failing.output
            subprocess.run(["git", "apply", "-"], cwd=ws.root, input=start.reference_diff, text=True, check=True)
            fixed = run_verify(ws, start.verify, timeout_s=120)
            assert fixed.passed and fixed.tests_passed and not fixed.tests_failed, fixed.output
    assert len(kinds) >= 2


def test_a_hostile_sdist_runs_no_git_config_on_the_host(tmp_path):
    # The archive ships .gitattributes naming drivers and a nested repository (vendor/.git) whose
    # config has an fsmonitor and that driver: a gitlink would make `git diff` run `git status`
    # inside it, under that config.
    markers = tmp_path / "markers"
    markers.mkdir()
    extra = tmp_path / "extra"
    vendor = extra / "vendor"
    vendor.mkdir(parents=True)
    (extra / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (vendor / "f.txt").write_text("x\n")
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    script = (f"git init -q && git add f.txt && git -c user.name=a -c user.email=a@b commit -qm v"
              f" && git config core.fsmonitor 'touch {markers}/fsmonitor; false #'"
              f" && git config filter.evil.clean 'touch {markers}/clean; cat'"
              f" && git config diff.evil.textconv 'touch {markers}/textconv; cat'"
              f" && printf '* filter=evil\\n' > .gitattributes && echo y > f.txt && touch -d 2001-01-01 f.txt")
    subprocess.run(["bash", "-c", script], cwd=vendor, env=env, check=True)
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    _sdist(cache / "downloads" / "tinymath-1.0.tar.gz", extra)
    paths = make_tasks("tinymath==1.0", count=1, out_dir=tmp_path / "tasks", cache_dir=cache, seed=1)
    assert len(paths) == 1 and sorted(p.name for p in markers.iterdir()) == []
    start = read_session(paths[0]).start
    assert "tinymath.py" in start.base_diff and "vendor" not in start.base_diff
    assert not (cache / "src" / "tinymath-1.0" / "vendor" / ".git").exists()


def test_bad_requirements_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="NAME==VERSION"):
        make_tasks("tinymath>=1", count=1, out_dir=tmp_path, cache_dir=tmp_path)
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    with tarfile.open(cache / "downloads" / "broken-1.0.tar.gz", "w:gz") as tf:
        data = b"def test_x():\n    assert False\n"
        info = tarfile.TarInfo("broken-1.0/test_broken.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    with pytest.raises(ConfigError, match="do not pass before any mutation"):
        make_tasks("broken==1.0", count=1, out_dir=tmp_path / "t", cache_dir=cache)
