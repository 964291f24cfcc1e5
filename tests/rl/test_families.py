"""Synthetic task families (`rl.families`), each on a small git repository made here and on a real
public package (the inflection 0.5.1 sdist from PyPI, downloaded once into the user's cache).

For every task: the start state fails its verify in a real shadow workspace; the edit the task
text describes, made through the workspace, passes it and equals the session's reference diff; a
near miss fails, and so does the right edit plus deleting everything else. Plus determinism by
seed, the CLI, a hostile repository, and an agent that plants modules or a FIFO for the verify."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.errors import ConfigError
from harness.session import read_session
from recap.cli import app
from rl.families import FAMILIES, SAFE_PATH, make_family_tasks
from rl.rewards import RewardConfig, RolloutRecord, changed_files, score_rollout
from rl.rollout import origin_of
from rl.tasks import download_sdist, make_repo, unpack
from shadow_backend.local import LocalBackend
from shadow_backend.scoring import run_verify

SMALL = {
    "README.md": "# shapes\n\nA small library of shapes.\n",
    "src/shapes.py": (
        "import math\n\n\nclass Circle:\n    def __init__(self, radius):\n        self.radius = radius\n\n"
        "    def area(self):\n        return math.pi * self.radius ** 2\n\n\n"
        "def describe(shape):\n    if isinstance(shape, Circle):\n        return f\"circle of radius {shape.radius}\"\n"
        "    return repr(shape)\n"
    ),
    "src/util.js": "function clampValue(value, low, high) {\n  return Math.min(Math.max(value, low), high);\n}\n"
                   "module.exports = { clampValue };\n",
    "data/notes.txt": "first note\nsecond note\n",
    "tests/test_shapes.py": "from src.shapes import Circle\n\n\ndef test_area():\n    assert Circle(1).area() > 3\n",
    "logo.bin": bytes(range(256)),
}


def git(root: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def committed(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory) -> Path:
    return committed(tmp_path_factory.mktemp("small") / "repo", SMALL)


@pytest.fixture(scope="module")
def package_repo(tmp_path_factory) -> Path:
    """The unpacked inflection 0.5.1 sdist as a one-commit repository (as `recap tasks make --pypi` makes it)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recap" / "test-sdists"
    source = unpack(download_sdist("inflection==0.5.1", cache), tmp_path_factory.mktemp("pkg") / "src")
    make_repo(source)
    return source


# -- solving a task from its text, as an agent that reads it exactly would ----------------------

def solve(ws, task: str) -> None:
    if m := re.fullmatch(r"Delete the file (\S+)\.", task):
        ws.delete(m[1])
    elif m := re.fullmatch(r"Create the file (\S+) containing exactly this one line: (.+)", task):
        ws.write_bytes(m[1], (m[2] + "\n").encode())
    elif m := re.fullmatch(r"In (\S+), replace line (\d+), which reads:\n(.+)\nby this line, keeping its "
                           r"indentation:\n(.+)\nChange nothing else\.", task):
        lines = ws.read_bytes(m[1]).decode().splitlines(keepends=True)
        i, body = int(m[2]) - 1, lines[int(m[2]) - 1].rstrip("\r\n")
        assert body.strip() == m[3]
        lines[i] = body[: len(body) - len(body.lstrip())] + m[4] + lines[i][len(body):]
        ws.write_bytes(m[1], "".join(lines).encode())
    elif m := re.fullmatch(r"In (\S+), rename `(\w+)` to `(\w+)`: replace all (\d+) occurrences of the whole "
                           r"word `\2` in that file, and change nothing else\.", task):
        text, n = re.subn(rf"\b{m[2]}\b", m[3], ws.read_bytes(m[1]).decode())
        assert n == int(m[4])
        ws.write_bytes(m[1], text.encode())
    elif m := re.fullmatch(r"(\S+) has a syntax error at line (\d+) \(Python says: .+\)\. Fix that line and "
                           r"change nothing else\.", task):
        lines = ws.read_bytes(m[1]).decode().splitlines(keepends=True)
        i = int(m[2]) - 1
        body = lines[i].rstrip()
        for closing in ":)":
            fixed = "".join(lines[:i] + [body + closing + lines[i][len(body):]] + lines[i + 1:])
            try:
                compile(fixed, m[1], "exec")
            except SyntaxError:
                continue
            ws.write_bytes(m[1], fixed.encode())
            return
        raise AssertionError(f"no one-character fix at line {i + 1}")
    else:
        raise AssertionError(f"a task text no solver knows: {task!r}")


def near_miss(ws, family: str, meta: dict) -> None:
    """An edit close to the right one, which must not pass."""
    path = meta["file"]
    if family == "delete-file":
        ws.write_bytes(path, b"")  # emptied, not deleted
    elif family == "create-file":
        ws.write_bytes(path, (meta["line"] + "0\n").encode())
    elif family == "replace-line":  # the new line inserted, the old one kept
        lines = ws.read_bytes(path).decode().splitlines(keepends=True)
        lines.insert(meta["line"] - 1, meta["new"] + "\n")
        ws.write_bytes(path, "".join(lines).encode())
    elif family == "rename-symbol":  # only the first occurrence
        ws.write_bytes(path, re.sub(rf"\b{meta['old']}\b", meta["new"], ws.read_bytes(path).decode(), count=1).encode())
    elif family == "fix-syntax":  # the broken line dropped
        lines = ws.read_bytes(path).decode().splitlines(keepends=True)
        del lines[meta["line"] - 1]
        ws.write_bytes(path, "".join(lines).encode())


def passes(ws, verify: str) -> bool:
    return run_verify(ws, verify, timeout_s=60).passed


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("source", ["small_repo", "package_repo"])
def test_each_task_fails_at_start_passes_when_done_as_told_and_fails_on_a_near_miss(family, source, request, tmp_path):
    repo = request.getfixturevalue(source)
    paths = make_family_tasks(family, repo=repo, count=2, out_dir=tmp_path / "tasks", seed=3)
    assert len(paths) == 2
    for path in paths:
        start = read_session(path).start
        assert start.source == "task" and start.base_commit == git(repo, "rev-parse", "HEAD").strip()
        assert start.meta["family"] == family and start.meta["difficulty"] == FAMILIES[family].difficulty
        assert SAFE_PATH.fullmatch(start.meta["file"]) and not start.meta["file"].startswith("tests/")
        assert bool(start.base_diff) == (family == "fix-syntax")
        with LocalBackend.from_origin(origin_of(start)) as ws:  # what rollouts and evals do
            assert not passes(ws, start.verify)
            solve(ws, start.task)
            assert passes(ws, start.verify)
            diff = ws.diff()
            assert diff == start.reference_diff
            # a correct edit is a full success for the rewards: the target is no test and no verify script
            record = RolloutRecord(stop_reason="finish", diff=diff, changed_files=changed_files(diff),
                                   verify=start.verify, verify_passed=True, tool_calls=1)
            assert score_rollout(record, RewardConfig())[0] == 1.0
            for other in ws.list_files():  # the right edit, then everything else deleted
                if other not in diff:
                    ws.delete(other)
            assert not passes(ws, start.verify)
        with LocalBackend.from_origin(origin_of(start)) as ws:
            near_miss(ws, family, start.meta)
            assert not passes(ws, start.verify)


def test_the_same_seed_makes_the_same_tasks_and_another_seed_others(package_repo, tmp_path):
    def made(seed: int, name: str) -> list[dict]:
        paths = make_family_tasks("replace-line", repo=package_repo, count=3, out_dir=tmp_path / name, seed=seed)
        return [read_session(p).start.model_dump(exclude={"ts"}) for p in paths]

    first = made(5, "a")
    assert made(5, "b") == first
    assert [s["task"] for s in made(6, "c")] != [s["task"] for s in first]


def test_the_cli_makes_family_tasks_and_wants_exactly_one_source(small_repo, tmp_path):
    runner = CliRunner()
    out = tmp_path / "tasks"
    result = runner.invoke(app, ["tasks", "make", "--family", "create-file", "--repo", str(small_repo),
                                 "--count", "3", "--out", str(out), "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "3 task session(s)" in result.output and len(list(out.glob("create-file-s1-*.jsonl"))) == 3
    for args, message in (([], "exactly one of --pypi"), (["--pypi", "x==1", "--family", "delete-file"], "exactly one of --pypi"),
                          (["--family", "nope"], "unknown task family 'nope'; known: delete-file, create-file")):
        result = runner.invoke(app, ["tasks", "make", "--repo", str(small_repo), "--out", str(out), *args])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
        assert "Traceback" not in result.output


def test_a_hostile_repository_gets_no_odd_name_into_a_task(tmp_path):
    hostile = {
        "-rf": "x\n", "a b.txt": "x\n", "$(touch pwned).txt": "x\n", ".hidden": "x\n", "q'uote.txt": "x\n",
        "x\ny.txt": "x\n", "tests/test_only.py": "def test():\n    pass\n", "ok.txt": "the only plain name\n",
    }
    repo = committed(tmp_path / "repo", hostile)
    (repo / "link.txt").symlink_to("ok.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")
    named = set()
    for seed in range(4):
        for path in make_family_tasks("delete-file", repo=repo, count=1, out_dir=tmp_path / f"t{seed}", seed=seed):
            named.add(read_session(path).start.meta["file"])
    assert named == {"ok.txt"}
    assert not (repo / "pwned").exists() and not Path("pwned").exists()

    bare = committed(tmp_path / "bare", {"tests/test_x.py": "x = 1\n", ".env": "SECRET=1\n"})
    with pytest.raises(ConfigError, match="no file a task can name"):
        make_family_tasks("delete-file", repo=bare, count=1, out_dir=tmp_path / "none")
    with pytest.raises(ConfigError, match="not a git repository with a commit"):
        plain = tmp_path / "plain"
        plain.mkdir()
        (plain / "a.txt").write_text("a\n")
        make_family_tasks("delete-file", repo=plain, count=1, out_dir=tmp_path / "n")


def test_the_verify_ignores_modules_planted_in_the_workspace_symlinks_and_fifos(small_repo, tmp_path):
    (path,) = make_family_tasks("create-file", repo=small_repo, count=1, out_dir=tmp_path / "tasks", seed=2)
    start = read_session(path).start
    target, line = start.meta["file"], start.meta["line"]
    with LocalBackend.from_origin(origin_of(start)) as ws:
        for module in ("json.py", "hashlib.py", "os.py", "sitecustomize.py", "usercustomize.py"):
            ws.write_bytes(module, b"import os\nos._exit(0)\n")  # would "pass" if the verify imported it
        assert not passes(ws, start.verify)
        ws.write_bytes("right.txt", (line + "\n").encode())
        ws.run(["ln", "-s", f"{ws.root}/right.txt", target], timeout_s=10)
        assert not passes(ws, start.verify)  # a symlink to the right bytes is not the file
        ws.delete(target)
        ws.run(["mkfifo", target], timeout_s=10)
        began = time.monotonic()
        assert not passes(ws, start.verify) and time.monotonic() - began < 30  # never opened
    table = json.loads(shlex.split(start.verify)[-1])
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in table[target]) and line not in start.verify
