"""Project rules: the repository's instruction files for coding agents, pinned in every prompt.

Which files (`RULES_FILES`, in this order): the list Zed documents for compatibility with other
agents (https://zed.dev/docs/ai/rules.html: `.rules`, `.cursorrules`, `.windsurfrules`,
`.clinerules`, `.github/copilot-instructions.md`, `AGENT.md`, `AGENTS.md`, `CLAUDE.md`,
`GEMINI.md`), with `AGENTS.md` (https://agents.md) first, plus Aider's `CONVENTIONS.md`; and the
rule folders (`RULES_DIRS`): Cursor's `.cursor/rules/*.mdc`, Cline's `.clinerules/*.md`,
Windsurf's `.windsurf/rules/*.md`, Copilot's `.github/instructions/*.instructions.md`. Unlike Zed,
recap loads every file found (a file identical to one already loaded, such as `CLAUDE.md` linked to
`AGENTS.md`, is listed once). A rule-folder file whose front matter scopes it (Cursor `alwaysApply:
false`, Windsurf `trigger` other than `always_on`, Copilot `applyTo` other than `**`) is not
pinned: it is listed with its description, for the model to read when it applies.

Only the repository root is searched (nested AGENTS.md files of a monorepo are not loaded).

Threat model: rules files come from the repository and are untrusted text. They are read through
the `Workspace` (so a symlink leading out of the workspace is refused there and the file is
skipped with the reason), never executed, never used as paths, and only shown to the model, as
any file it could read. Their size is capped (`MAX_RULES_CHARS` per file, and a token cap the
agent sets from the window), and a cut says so in the block itself.

The block is built once at the start of a run and recorded as a `ProjectRules` event, so prompts
stay a pure function of the session log (`harness.context` pins the block after the system prompt;
summaries never replace it).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from harness.workspace import Workspace

logger = logging.getLogger(__name__)

RULES_FILES: tuple[str, ...] = (
    "AGENTS.md", "AGENT.md", "CLAUDE.md", "GEMINI.md", ".rules", ".cursorrules", ".windsurfrules",
    ".clinerules", ".github/copilot-instructions.md", "CONVENTIONS.md",
)
RULES_DIRS: tuple[tuple[str, str], ...] = (
    (".cursor/rules", ".mdc"), (".clinerules", ".md"), (".windsurf/rules", ".md"),
    (".github/instructions", ".instructions.md"),
)
MAX_RULES_CHARS = 32_000
"""The most characters read from one rules file (Codex's default cap for AGENTS.md is 32 KiB)."""

RULES_HEADER = "Project rules from the repository ({files}); follow them:"

_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class RulesFile:
    """One rules file found: its path, the text to pin ("" when only listed), and why not pinned."""

    path: str
    text: str
    chars: int
    note: str = ""


@dataclass(frozen=True)
class FoundRules:
    """What `find_rules` found: `pinned` files (text in the block), `listed` (scoped rules named
    with their description), `skipped` ("path: reason")."""

    pinned: tuple[RulesFile, ...] = ()
    listed: tuple[RulesFile, ...] = ()
    skipped: tuple[str, ...] = field(default_factory=tuple)

    def block(self) -> str:
        """The pinned text: a header naming the files, each file under `## path`, then the listed
        rules. "" when nothing was found."""
        if not self.pinned and not self.listed:
            return ""
        parts = [RULES_HEADER.format(files=", ".join(f.path for f in self.pinned) or "none pinned")]
        for f in self.pinned:
            parts.append(f"## {f.path}\n{f.text.strip()}" + (f"\n[{f.note}]" if f.note else ""))
        if self.listed:
            parts.append("Other rules files (read one with read_file when it applies):\n"
                         + "\n".join(f"- {f.path}: {f.note}" for f in self.listed))
        return "\n\n".join(parts)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """Simple `key: value` front matter (Cursor .mdc, Windsurf, Copilot) and the body after it."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    meta = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip().strip("'\"")
    return meta, text[m.end():]


def _scope(meta: dict[str, str]) -> str | None:
    """Why a rule-folder file is not always on (its description), or None when it is."""
    if meta.get("alwaysApply", "").lower() == "true" or meta.get("trigger") == "always_on":
        return None
    if meta.get("applyTo") in ("**", "**/*"):
        return None
    if not meta:
        return None
    what = meta.get("description") or meta.get("globs") or meta.get("applyTo") or meta.get("trigger") or "scoped rule"
    return what


def find_rules(workspace: Workspace) -> FoundRules:
    """Read the rules files at the workspace root (see the module docstring).

    Never raises for a bad file: an unreadable, binary or refused file is skipped with the reason.
    """
    candidates: list[tuple[str, bool]] = [(p, False) for p in RULES_FILES]
    for folder, suffix in RULES_DIRS:
        try:
            if workspace.exists(folder) and workspace.is_dir(folder):
                candidates += [(p, True) for p in workspace.list_files(folder) if p.endswith(suffix)]
        except Exception as exc:  # a refused or unreadable folder is skipped, never fatal
            logger.info("rules folder %s skipped: %s", folder, exc)
    pinned: list[RulesFile] = []
    listed: list[RulesFile] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for path, in_folder in candidates:
        try:
            if not workspace.exists(path) or workspace.is_dir(path):
                continue
            data = workspace.read_bytes(path)
        except Exception as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if b"\0" in data[:8000]:
            skipped.append(f"{path}: binary file")
            continue
        text = data.decode("utf-8", "replace").strip()
        if not text:
            continue
        if text in seen:
            skipped.append(f"{path}: same text as {seen[text]}")
            continue
        seen[text] = path
        if in_folder:
            meta, body = _front_matter(text)
            scope = _scope(meta)
            if scope is not None:
                listed.append(RulesFile(path, "", len(text), note=scope))
                continue
            text = body.strip()
        note = ""
        if len(text) > MAX_RULES_CHARS:
            note = f"{path} cut at {MAX_RULES_CHARS:,} of {len(text):,} characters; read_file {path} for the rest"
        pinned.append(RulesFile(path, text[:MAX_RULES_CHARS], len(text), note=note))
    return FoundRules(tuple(pinned), tuple(listed), tuple(skipped))
