"""What the file tools promise when the paths and the files they meet are hostile.

Everything the model writes is untrusted, and so is everything in the workspace (a repository may
ship symlinks, a command may make FIFOs). Each promise below is kept with the inputs that once
broke it (issue 10, faults 3, 5 and 6), through the real tools on real workspaces:

1. The sealed `.git` can't be reached by any file tool: not through a symlink the repository
   ships (`gitlink -> .git`) or a command makes, a chain of links, a link to the root
   (`self/.git`), an absolute link, `a/../.git`, nor a case variant (`.GIT`). read_file,
   write_file, edit_file, delete_file, list_dir, glob, grep and outline answer with an error
   observation, and `.git` is left as it was.
2. list_dir, glob and grep keep working after a command deletes `.git/HEAD` or all of `.git`, or
   deletes the directory being listed.
3. A path no file system can hold (a NUL byte, a lone surrogate, a 256-, 4,096- or
   100,000-character name, 2,001 components) is an error observation that says why; nothing is
   written. Names of 255 bytes, 256 components and non-UTF-8 names a listing shows still work.
4. A FIFO, socket or device in the workspace is refused by every tool and never opened, so nothing
   blocks (every test here has a timeout); grep, glob and list_dir over a directory holding one
   still answer. Host git, which opens `.gitignore`, `.gitattributes` and `.git/info/exclude`
   blindly, reads a FIFO there as empty, and the diff shows a tracked file turned FIFO as deleted.
5. An agent run making these calls gets error observations and finishes normally.

Promises 1, 2 and 4 are checked on both backends (the Docker ones are marked `docker`).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from harness.agent import Agent
from harness.config import AgentConfig, RecapConfig
from harness.errors import NotRegularFile
from harness.policies.scripted import ScriptedPolicy
from harness.session import Observation, SessionWriter, read_session
from harness.toolcall import CLOSE, OPEN
from harness.tools import default_registry
from test_agent_support import call as scripted_call

pytestmark = pytest.mark.timeout(180)

REGISTRY = default_registry()
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]

FILES = {
    "README.md": "hello from the readme\n",
    ".gitignore": "*.log\n",
    "notes.txt": "hello notes\n",
    "pkg/calc.py": "def add(a, b):\n    return a + b\n",
}

HOSTILE_SETUP = " && ".join([
    "ln -s .git made", "ln -s made chain1", "ln -s chain1 chain2", "ln -s chain2 chain3",
    "ln -s . self", "ln -s .git/hooks hooks", 'ln -s "$PWD/.git" abs', "mkdir -p a",
    "rm notes.txt", "mkfifo notes.txt", "mkfifo pipe.py", "ln -s notes.txt fifolink",
    "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
])
"""What a command does in the shared workspace: links into `.git` (made, chained, to the root,
absolute), a tracked file replaced by a FIFO, an untracked FIFO, a link to a FIFO, a socket."""


def git(root: Path, *args: str) -> None:
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root), "PATH": os.defpath,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def make_repo(root: Path, files: dict[str, str] = FILES) -> Path:
    """A committed repository of `files` that also ships the symlink `gitlink -> .git`."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "gitlink").symlink_to(".git")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "initial")
    return root


def open_ws(backend: str, repo: Path) -> Any:
    if backend == "local":
        from shadow_backend.local import LocalBackend

        return LocalBackend.create(repo)
    from shadow_backend.docker_backend import DockerBackend

    return DockerBackend.create(repo)


def tool(ws: Any, name: str, **args: Any):
    return REGISTRY.call(name, args, ws)


@pytest.fixture(scope="module", params=BACKENDS)
def hostile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One workspace per backend after `HOSTILE_SETUP` ran in it (the tools only get refusals
    there, so the tests can share it)."""
    ws = open_ws(request.param, make_repo(tmp_path_factory.mktemp("hostile")))
    made = ws.run(HOSTILE_SETUP, timeout_s=60)
    assert made.exit_code == 0, made.stderr
    yield ws
    ws.close()


@pytest.fixture
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """Factory `fresh(backend)`: a new workspace of `make_repo`, closed after the test."""
    opened: list[Any] = []

    def open_(backend: str) -> Any:
        opened.append(open_ws(backend, make_repo(tmp_path / f"repo{len(opened)}")))
        return opened[-1]

    yield open_
    for ws in opened:
        ws.close()


def git_state(ws: Any) -> dict[str, bytes]:
    """Every file under the workspace's `.git` (host side) with its bytes."""
    top = Path(ws.root) / ".git"
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


# --- 1. the sealed .git ----------------------------------------------------------------------

SEALED = ["gitlink/config", "gitlink/HEAD", "made/config", "chain3/config", "self/.git/config", "self/gitlink/HEAD",
          "hooks", "abs/config", "a/../.git/config", ".git", ".git/config", ".GIT/config", ".Git/HEAD"]
"""Paths into `.git`: through a shipped link, a command's link, a chain, the root, an absolute link
(outside the workspace on Docker, where it names /workspace), `..`, case variants."""

CALLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "read_file": lambda p: {"path": p},
    "write_file": lambda p: {"path": p, "content": "[core]\n\tfsmonitor = touch owned\n"},
    "edit_file": lambda p: {"path": p, "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = touch owned"},
    "delete_file": lambda p: {"path": p},
    "list_dir": lambda p: {"path": p},
    "glob": lambda p: {"pattern": p + "/*"},
    "grep": lambda p: {"pattern": "core", "path": p},
    "outline": lambda p: {"path": p},
}
REFUSED_SEALED = ("leads into the sealed .git directory", "the .git directory is sealed", "'..' is not allowed",
                  "resolves outside the workspace", "patterns are relative to the workspace root")


@pytest.mark.parametrize("path", SEALED)
@pytest.mark.parametrize("name", CALLS)
def test_no_tool_reaches_the_sealed_git_directory(hostile: Any, name: str, path: str) -> None:
    before = git_state(hostile)
    result = tool(hostile, name, **CALLS[name](path))
    assert result.is_error and result.error_kind == "tool_error", result.output
    assert any(reason in result.output for reason in REFUSED_SEALED), result.output
    assert git_state(hostile) == before


def test_links_into_git_are_listed_as_names_but_not_followed(hostile: Any) -> None:
    listed = tool(hostile, "glob", pattern="*")
    assert not listed.is_error
    assert {"gitlink", "made", "chain3", "hooks"} <= set(listed.output.splitlines())
    found = tool(hostile, "grep", pattern="repositoryformatversion")  # in .git/config only
    assert not found.is_error and found.output.startswith("no matches"), found.output


# --- 2. listing survives a broken repository -------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("breakage", ["rm .git/HEAD", "rm -rf .git"])
def test_listing_works_after_a_command_breaks_the_repository(fresh: Callable[[str], Any], backend: str,
                                                             breakage: str) -> None:
    ws = fresh(backend)
    broken = ws.run(f"{breakage} && echo x > debug.log && echo y > new.txt", timeout_s=60)
    assert broken.exit_code == 0, broken.stderr
    for _ in range(2):  # and it stays so
        tree = tool(ws, "list_dir", path=".")
        assert not tree.is_error, tree.output
        assert {"pkg/", "  calc.py", "README.md", "new.txt", "notes.txt"} <= set(tree.output.splitlines())
        assert "debug.log" not in tree.output  # .gitignore still honoured
        assert tool(ws, "glob", pattern="**/*.py").output == "pkg/calc.py"
        assert tool(ws, "grep", pattern="hello", include="*.md").output == "README.md:1:hello from the readme"


@pytest.mark.parametrize("backend", BACKENDS)
def test_listing_a_directory_a_command_deleted_is_an_observation(fresh: Callable[[str], Any], backend: str) -> None:
    ws = fresh(backend)
    assert not tool(ws, "list_dir", path="pkg").is_error
    assert ws.run("rm -rf pkg", timeout_s=60).exit_code == 0
    gone = tool(ws, "list_dir", path="pkg")
    assert gone.is_error and "pkg: no such directory" in gone.output
    assert tool(ws, "glob", pattern="pkg/**/*.py").output == "no files match 'pkg/**/*.py' (pkg does not exist)"
    assert "pkg" not in tool(ws, "list_dir", path=".").output


# --- 3. paths no file system can hold ----------------------------------------------------------

ODD = {
    "a\0b.txt": "contains a NUL byte",
    "caf\ud800.txt": "contains a lone surrogate",
    "n" * 256: "a name of 256 bytes, at most 255",
    "n" * 4096: "a name of 4,096 bytes, at most 255",
    "n" * 100_000: "a name of 100,000 bytes, at most 255",
    "z/" * 2000 + "f": "2,001 components, at most 256",
}
PATH_TOOLS = [name for name in CALLS if name != "glob"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ws = open_ws("local", make_repo(tmp_path_factory.mktemp("plain")))
    yield ws
    ws.close()


@pytest.mark.parametrize("path", ODD, ids=["nul", "surrogate", "name256", "name4096", "name100000", "depth2001"])
@pytest.mark.parametrize("name", PATH_TOOLS)
def test_a_path_no_file_system_holds_is_an_error_observation(plain: Any, name: str, path: str) -> None:
    result = tool(plain, name, **CALLS[name](path))
    assert result.is_error and result.error_kind == "tool_error", result.output
    assert ODD[path] in result.output
    assert len(result.output) < 400  # the path is shown shortened
    assert plain.diff() == ""


@pytest.mark.parametrize("pattern", ODD, ids=["nul", "surrogate", "name256", "name4096", "name100000", "depth2001"])
def test_glob_with_such_a_pattern_answers(plain: Any, pattern: str) -> None:
    result = tool(plain, "glob", pattern=pattern)
    assert result.output.startswith("no files match") or "components, at most 256" in result.output, result.output


@pytest.mark.parametrize("field", ["pattern", "include"])
def test_grep_with_a_nul_byte_answers(plain: Any, field: str) -> None:
    result = tool(plain, "grep", **{"pattern": "hello", field: "a\0b"})
    assert result.is_error and "NUL byte" in result.output


def test_longest_name_and_deepest_path_still_work(fresh: Callable[[str], Any]) -> None:
    ws = fresh("local")
    for path in ["n" * 255, "d/" * 255 + "f"]:
        written = tool(ws, "write_file", path=path, content="deep\n")
        assert not written.is_error, written.output
        assert tool(ws, "read_file", path=path).output == "     1\tdeep"
    assert f"b/{'n' * 255}" in ws.diff() and f"b/{'d/' * 255}f" in ws.diff()


def test_a_non_utf8_name_from_a_listing_can_be_read(tmp_path: Path) -> None:
    repo = tmp_path / "latin"
    repo.mkdir()
    (repo / os.fsdecode(b"caf\xe9.txt")).write_text("bytes in the name\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    ws = open_ws("local", repo)
    try:
        listed = tool(ws, "glob", pattern="*.txt").output
        assert listed == "caf\\udce9.txt"  # the byte 0xe9 as the escape of its surrogate
        arguments = '{"path": "%s"}' % listed  # as JSON it names the file again
        assert REGISTRY.call("read_file", arguments, ws).output == "     1\tbytes in the name"
    finally:
        ws.close()


# --- 4. FIFOs, sockets, devices ----------------------------------------------------------------

SPECIAL = {"notes.txt": "a FIFO (named pipe)", "pipe.py": "a FIFO (named pipe)", "fifolink": "a FIFO (named pipe)",
           "sock": "a socket"}
"""A tracked file a command replaced by a FIFO, an untracked FIFO, a link to a FIFO, a socket."""


@pytest.mark.parametrize("path", SPECIAL)
@pytest.mark.parametrize("name", PATH_TOOLS)
def test_no_tool_opens_a_fifo_or_a_socket(hostile: Any, name: str, path: str) -> None:
    result = tool(hostile, name, **CALLS[name](path))
    assert result.is_error and result.error_kind == "tool_error", result.output
    assert f"{path!r} is {SPECIAL[path]}, not a regular file or a directory" in result.output
    assert stat.S_ISFIFO(os.stat(Path(hostile.root) / "notes.txt").st_mode)  # not replaced


@pytest.mark.parametrize("pattern", ["hello", "(?<=hel)lo"], ids=["ripgrep", "python"])
def test_searching_and_listing_a_directory_with_special_files_answer(hostile: Any, pattern: str) -> None:
    found = tool(hostile, "grep", pattern=pattern)
    assert found.output == "README.md:1:hello from the readme"
    assert tool(hostile, "glob", pattern="**/*.py").output == "pkg/calc.py"
    assert not tool(hostile, "list_dir", path=".").is_error


@pytest.mark.parametrize("backend", BACKENDS)
def test_git_reads_a_fifo_where_it_reads_rules_as_empty(fresh: Callable[[str], Any], backend: str) -> None:
    ws = fresh(backend)
    made = ws.run("mkdir -p sub .git/info && echo x > sub/f.txt && rm -f .gitignore .git/info/exclude && "
                  "mkfifo .gitignore sub/.gitignore .gitattributes .git/info/exclude", timeout_s=60)
    assert made.exit_code == 0, made.stderr
    assert tool(ws, "glob", pattern="**/*.txt").output == "notes.txt\nsub/f.txt"
    assert not tool(ws, "list_dir", path=".").is_error
    diff = ws.diff()
    assert "+++ b/sub/f.txt" in diff
    assert "deleted file mode 100644\nindex " in diff.split("diff --git a/.gitignore b/.gitignore\n")[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_no_tool_opens_a_device(fresh: Callable[[str], Any]) -> None:
    ws = fresh("local")
    os.mknod(Path(ws.root) / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero: endless
    for name in PATH_TOOLS:
        result = tool(ws, name, **CALLS[name]("zero"))
        assert result.is_error and "'zero' is a character device" in result.output, (name, result.output)


def test_a_fifo_swapped_in_after_the_check_is_still_not_waited_on(tmp_path: Path) -> None:
    from shadow_backend.local import _read_regular

    os.mkfifo(tmp_path / "late")
    with pytest.raises(NotRegularFile, match="'late' is a FIFO"):
        _read_regular(tmp_path / "late", "late")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "late.sock"))
    with pytest.raises(OSError):  # a socket can't even be opened
        _read_regular(tmp_path / "late.sock", "late.sock")


# --- 5. the agent loop goes on -------------------------------------------------------------------


def escaped_call(name: str, **arguments: Any) -> str:
    """A scripted turn with the arguments' odd characters as a model writes them: JSON escapes
    (`\\u0000`, `\\ud800`)."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{CLOSE}"



def test_an_agent_run_with_hostile_paths_finishes_normally(fresh: Callable[[str], Any], tmp_path: Path) -> None:
    ws = fresh("local")
    hostile_calls = [
        scripted_call("read_file", path="gitlink/config"),
        scripted_call("write_file", path="made/config", content="[core]\n\tfsmonitor = touch owned\n"),
        scripted_call("delete_file", path="made/HEAD"),
        escaped_call("read_file", path="a\0b"),
        escaped_call("write_file", path="caf\ud800.txt", content="x"),
        scripted_call("write_file", path="n" * 100_000, content="x"),
        scripted_call("write_file", path="z/" * 2000 + "f", content="x"),
        scripted_call("read_file", path="notes.txt"),
        scripted_call("grep", pattern="hello", path="notes.txt"),
        scripted_call("outline", path="pipe.py"),
    ]
    turns = [
        scripted_call("run_command", command="ln -s .git made && rm notes.txt && mkfifo notes.txt pipe.py"),
        *hostile_calls,
        scripted_call("glob", pattern="**/*.py"),
        scripted_call("write_file", path="ok.txt", content="still working\n"),
        scripted_call("finish", message="done"),
    ]
    policy = ScriptedPolicy(turns, context_window=200_000)
    log = SessionWriter(tmp_path / "session.jsonl")
    config = RecapConfig(agent=AgentConfig(max_new_tokens=8192))  # room for the 2,001-component path
    result = Agent(policy=policy, workspace=ws, tools=REGISTRY, config=config, log=log).run("try hostile paths")
    log.close()
    assert (result.stop_reason, result.message) == ("finish", "done")
    observed = [e for e in result.events if isinstance(e, Observation)]
    assert [o.is_error for o in observed] == [False] + [True] * len(hostile_calls) + [False, False, False]
    assert [o.error_kind for o in observed if o.is_error] == ["tool_error"] * len(hostile_calls)
    assert observed[-3].output == "pkg/calc.py"
    assert "+still working" in result.diff and "owned" not in result.diff
    assert not (Path(ws.root) / ".git" / "config").read_text().count("fsmonitor")
    session = read_session(tmp_path / "session.jsonl")
    assert not session.torn and session.events[-1].type == "final"
