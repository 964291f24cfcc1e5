"""outline: definitions from the tree-sitter tags queries of each grammar wheel."""

from __future__ import annotations

from typing import Any

import pytest

from harness.tools import default_registry
from harness.tools.outline import definitions

REGISTRY = default_registry()

SOURCES = {
    "python": (
        "import os\n"
        "LIMIT = 3\n"
        "\n"
        "class Shape:\n"
        "    @property\n"
        "    def area(self):\n"
        "        def helper():\n"
        "            return 1\n"
        "        return helper()\n"
        "\n"
        "def main():\n"
        "    print(Shape().area)\n",
        ["2 constant LIMIT", "4 class Shape", "6 method Shape.area", "7 function Shape.area.helper", "11 function main"],
    ),
    "javascript": (
        "class Greeter {\n"
        "  greet(name) { return 'hi ' + name; }\n"
        "}\n"
        "function main() { new Greeter().greet('x'); }\n"
        "const arrow = () => 1;\n",
        ["1 class Greeter", "2 method Greeter.greet", "4 function main", "5 function arrow"],
    ),
    "typescript": (
        "interface Point { x: number; }\n"
        "type Id = string;\n"
        "enum Color { Red }\n"
        "export class Box {\n"
        "  size(): number { return 1; }\n"
        "}\n"
        "export function make(): Box { return new Box(); }\n",
        ["1 interface Point", "2 type Id", "3 enum Color", "4 class Box", "5 method Box.size", "7 function make"],
    ),
    "tsx": (
        "export function App(): JSX.Element {\n"
        "  return <div>hi</div>;\n"
        "}\n"
        "class Store { load() {} }\n",
        ["1 function App", "4 class Store", "4 method Store.load"],
    ),
    "go": (
        "package main\n"
        "\n"
        "type Server struct{}\n"
        "\n"
        "func (s *Server) Start() error { return nil }\n"
        "\n"
        "func main() {}\n",
        ["3 type Server", "5 method Start", "7 function main"],
    ),
    "rust": (
        "struct Point { x: i32 }\n"
        "trait Area { fn area(&self) -> i32; }\n"
        "impl Point {\n"
        "    fn new() -> Self { Point { x: 0 } }\n"
        "}\n"
        "fn main() {}\n"
        "macro_rules! square { ($x:expr) => { $x * $x }; }\n",
        ["1 class Point", "2 interface Area", "4 method new", "6 function main", "7 macro square"],
    ),
}


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_definitions_per_language(language: str) -> None:
    source, expected = SOURCES[language]
    found = [f"{d.line} {d.kind} {d.name}" for d in definitions(source.encode(), language)]
    assert found == expected


SUFFIX = {"python": "py", "javascript": "js", "typescript": "ts", "tsx": "tsx", "go": "go", "rust": "rs"}


def test_outline_tool_on_each_language(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({f"src/sample.{SUFFIX[lang]}": src for lang, (src, _) in SOURCES.items()}))
    for language, (_, expected) in SOURCES.items():
        out = REGISTRY.call("outline", {"path": f"src/sample.{SUFFIX[language]}"}, ws).output
        assert [" ".join(line.split()) for line in out.splitlines()] == expected


def test_outline_errors(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({"notes.txt": "hi\n", "empty.py": "", "blob.py": b"\0\0\0"}))
    unknown = REGISTRY.call("outline", {"path": "notes.txt"}, ws)
    assert unknown.is_error and "supported suffixes: .cjs" in unknown.output
    assert REGISTRY.call("outline", {"path": "empty.py"}, ws).output == "no definitions found in empty.py"
    assert "binary file" in REGISTRY.call("outline", {"path": "blob.py"}, ws).output
    assert "no such file" in REGISTRY.call("outline", {"path": "missing.py"}, ws).output


def test_outline_survives_syntax_errors() -> None:
    found = definitions(b"def ok():\n    pass\n\ndef broken(:\n", "python")
    assert found[0].name == "ok"
