"""glob and grep; grep through ripgrep and through the Python fallback must print the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pytest

from harness.tools import default_registry
from harness.tools.search import glob_regex, grep_python, grep_ripgrep
from harness.workspace import CommandResult

REGISTRY = default_registry()

SEARCH_FILES: dict[str, str | bytes] = {
    ".gitignore": "*.log\ngen/\n",
    ".hidden/conf.py": "TOKEN = 'foo'\n",
    "a-b.txt": "foo at the top\n",
    "a/b.txt": "foo in a dir\nbar\n",
    "src/main.py": "import os\n\ndef foo():\n    return 'foo'  \n\nclass Foo:\n    pass\n",
    "src/gen/out.py": "foo generated\n",
    "src/util.ts": "export function fooBar(): number {\r\n  return 1;\r\n}\r\n",
    "src/deep/er/x.go": "package er\n\nfunc Foo() {}\n",
    "debug.log": "foo log\n",
    "latin.txt": "caf\xe9 foo\n".encode("latin-1"),
    "blob.bin": b"foo\0binary foo\n",
    "late.bin": b"foo\n" * 30000 + b"\0",
    "long.txt": "foo " + "x" * 1000 + "\n",
    "noeol.txt": "last foo",
}


@dataclass
class NoRipgrep:
    """A workspace whose `run` reports every program missing (exit 127), like a host without rg."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        return CommandResult(127, "", "command not found", False, 0.0)


@pytest.fixture
def search_ws(workspace_of: Any, make_repo: Any) -> Any:
    ws = workspace_of(make_repo(SEARCH_FILES))
    ws.write_bytes("src/gen/new.py", b"foo ignored by gen/\n")
    return ws


def test_glob_semantics() -> None:
    cases = {
        "*.py": (["a.py"], ["src/a.py"]),
        "**/*.py": (["a.py", "src/a.py", "src/x/y/a.py"], ["a.pyc"]),
        "src/**": (["src/a", "src/x/y"], ["srcx/a"]),
        "src/**/test_*.py": (["src/test_a.py", "src/x/test_b.py"], ["src/x/a_test.py"]),
        "**/*.{ts,tsx}": (["a.ts", "b/c.tsx"], ["a.js"]),
        "[ab]?.md": (["a1.md", "bz.md"], ["c1.md", "a12.md"]),
        "[!a]*.md": (["b.md"], ["a.md"]),
    }
    for pattern, (hits, misses) in cases.items():
        regex = glob_regex(pattern)
        assert all(regex.fullmatch(p) for p in hits), pattern
        assert not any(regex.fullmatch(p) for p in misses), pattern


def test_glob_tool(search_ws: Any) -> None:
    out = REGISTRY.call("glob", {"pattern": "**/*.py"}, search_ws).output
    assert out.splitlines() == [".hidden/conf.py", "src/main.py"]  # gen/ and *.log are ignored
    assert REGISTRY.call("glob", {"pattern": "./src/*.ts"}, search_ws).output == "src/util.ts"
    assert "use '**/' to search subdirectories" in REGISTRY.call("glob", {"pattern": "*.go"}, search_ws).output
    assert "does not exist" in REGISTRY.call("glob", {"pattern": "nope/*.py"}, search_ws).output
    for bad in ("../*.py", "/etc/*"):
        result = REGISTRY.call("glob", {"pattern": bad}, search_ws)
        assert result.is_error and "refused" in result.output


PATTERNS = [
    ("foo", ".", None),
    ("foo", "src", None),
    ("foo", "src/main.py", None),
    (r"^\s*def \w+", ".", "*.py"),
    ("foo", ".", "*.{ts,go}"),
    ("foo", ".", "!*.txt"),
    (r"'foo'\s+$", ".", None),
    ("[Ff]oo", "src/deep", None),
    ("caf", ".", None),
    ("nothing-matches-this", ".", None),
    (r"(?i)FOO\(", ".", None),
]


@pytest.mark.parametrize(("pattern", "path", "include"), PATTERNS)
def test_grep_ripgrep_and_python_fallback_agree(search_ws: Any, pattern: str, path: str, include: str | None) -> None:
    via_rg = grep_ripgrep(search_ws, pattern, path, include)
    assert via_rg is not None, "ripgrep must be installed where the tests run"
    assert via_rg == grep_python(search_ws, pattern, path, include)
    args = {"pattern": pattern, "path": path, "include": include}
    assert REGISTRY.call("grep", args, search_ws).output == REGISTRY.call("grep", args, NoRipgrep(search_ws)).output


def test_grep_output_format(search_ws: Any) -> None:
    out = REGISTRY.call("grep", {"pattern": "foo"}, search_ws).output.splitlines()
    assert out == [
        ".hidden/conf.py:1:TOKEN = 'foo'",
        "a-b.txt:1:foo at the top",
        "a/b.txt:1:foo in a dir",
        "latin.txt:1:caf\ufffd foo",
        "long.txt:1:foo " + "x" * 296 + " [line cut]",
        "noeol.txt:1:last foo",
        "src/main.py:3:def foo():",
        "src/main.py:4:    return 'foo'  ",
        "src/util.ts:1:export function fooBar(): number {",
    ]  # binary files (blob.bin, late.bin), ignored files (debug.log, src/gen/) are skipped


def test_grep_uses_python_for_patterns_ripgrep_refuses(search_ws: Any) -> None:
    assert grep_ripgrep(search_ws, r"foo(?=\(\))", ".", None) is None
    out = REGISTRY.call("grep", {"pattern": r"foo(?=\(\))"}, search_ws).output
    assert out == "src/main.py:3:def foo():"


def test_grep_errors(search_ws: Any) -> None:
    bad = REGISTRY.call("grep", {"pattern": "(unclosed"}, search_ws)
    assert bad.is_error and "invalid regular expression" in bad.output
    assert "no such file or directory" in REGISTRY.call("grep", {"pattern": "x", "path": "nope"}, search_ws).output
    assert "file names only" in REGISTRY.call("grep", {"pattern": "x", "include": "src/*.py"}, search_ws).output
    assert REGISTRY.call("grep", {"pattern": "nothing-here"}, search_ws).output == "no matches for 'nothing-here' in ."


def test_grep_caps_the_number_of_lines(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({"many.txt": "hit\n" * 1000}))
    out = REGISTRY.call("grep", {"pattern": "hit"}, ws).output.splitlines()
    assert len(out) == 301
    assert out[299] == "many.txt:300:hit"
    assert out[300] == "[... 700 more matches not shown; narrow the search]"
