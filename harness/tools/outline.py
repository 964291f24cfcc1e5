"""The outline tool: a file's definitions (classes, functions, methods, types...) via tree-sitter.

Definitions come from the *tags queries* (`@definition.<kind>` captures) the grammar wheels ship
(`tree_sitter_python.TAGS_QUERY`, ...). TypeScript's own tags query only adds to JavaScript's (the
upstream grammar inherits it), so both are used, plus type aliases and enums, which neither tags.
A function nested in a class or an interface is reported as a method, with a qualified name.
Grammars and compiled queries are loaded on first use and cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import Field

from harness.errors import ToolError
from harness.tools.base import Tool, ToolResult
from harness.tools.common import Params, bounded, read_text
from harness.workspace import Workspace

LANGUAGE_OF_SUFFIX = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}

_TS_EXTRA_TAGS = """
(type_alias_declaration name: (type_identifier) @name) @definition.type
(enum_declaration name: (identifier) @name) @definition.enum
"""

_CONTAINER_KINDS = {"class", "interface", "module", "enum"}


def _grammar(language: str) -> tuple[Any, str]:
    """(language capsule, tags query source) from the grammar wheel."""
    if language == "python":
        import tree_sitter_python as mod

        return mod.language(), mod.TAGS_QUERY
    if language == "javascript":
        import tree_sitter_javascript as mod

        return mod.language(), mod.TAGS_QUERY
    if language in ("typescript", "tsx"):
        import tree_sitter_javascript as js
        import tree_sitter_typescript as mod

        capsule = mod.language_typescript() if language == "typescript" else mod.language_tsx()
        return capsule, "\n".join([js.TAGS_QUERY, mod.TAGS_QUERY, _TS_EXTRA_TAGS])
    if language == "go":
        import tree_sitter_go as mod

        return mod.language(), mod.TAGS_QUERY
    if language == "rust":
        import tree_sitter_rust as mod

        return mod.language(), mod.TAGS_QUERY
    raise KeyError(language)


@cache
def _parser_and_query(language: str) -> tuple[Any, Any]:
    import tree_sitter

    capsule, source = _grammar(language)
    lang = tree_sitter.Language(capsule)
    return tree_sitter.Parser(lang), tree_sitter.Query(lang, source)


@dataclass(frozen=True)
class Definition:
    """One definition: 1-based line, kind ("class", "function", "method", ...), qualified name."""

    line: int
    kind: str
    name: str


def definitions(source: bytes, language: str) -> list[Definition]:
    """Definitions in `source` in file order.

    Raises: KeyError for a language not in `LANGUAGE_OF_SUFFIX`'s values.
    """
    import tree_sitter

    parser, query = _parser_and_query(language)
    tree = parser.parse(source)
    found: dict[tuple[int, int], tuple[int, str, str]] = {}  # node span -> (pattern, kind, name)
    for pattern, captures in tree_sitter.QueryCursor(query).matches(tree.root_node):
        kinds = [key for key in captures if key.startswith("definition.")]
        if not kinds or "name" not in captures:
            continue
        node = captures[kinds[0]][0]
        name = captures["name"][0].text.decode("utf-8", "replace")
        span = (node.start_byte, node.end_byte)
        if span not in found or pattern < found[span][0]:  # the most specific pattern comes first
            found[span] = (pattern, kinds[0].removeprefix("definition."), name)
    out: list[Definition] = []
    stack: list[tuple[int, str, str]] = []  # enclosing definitions: (end byte, kind, qualified name)
    for (start, end), (_, kind, name) in sorted(found.items(), key=lambda item: (item[0][0], -item[0][1])):
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack and stack[-1][1] in _CONTAINER_KINDS:
            kind = "method" if kind == "function" else kind
        qualified = f"{stack[-1][2]}.{name}" if stack else name
        out.append(Definition(source.count(b"\n", 0, start) + 1, kind, qualified))
        stack.append((end, kind, qualified))
    return out


class OutlineParams(Params):
    path: str = Field(description="Source file relative to the workspace root (.py, .js, .ts, .tsx, .go, .rs).")


def outline(params: OutlineParams, workspace: Workspace) -> ToolResult:
    text, _ = read_text(workspace, params.path, lossy=True)
    suffix = "." + params.path.rsplit(".", 1)[-1] if "." in params.path.rsplit("/", 1)[-1] else ""
    language = LANGUAGE_OF_SUFFIX.get(suffix.lower())
    if language is None:
        known = ", ".join(sorted(LANGUAGE_OF_SUFFIX))
        raise ToolError(f"outline does not know the language of {params.path}; supported suffixes: {known}")
    found = definitions(text.encode("utf-8"), language)
    if not found:
        return ToolResult(f"no definitions found in {params.path}")
    return ToolResult(bounded("\n".join(f"{d.line:>5} {d.kind} {d.name}" for d in found)))


OUTLINE = Tool(
    "outline",
    "List the definitions (classes, functions, methods, types) in a source file with their line numbers.",
    OutlineParams,
    outline,
)
