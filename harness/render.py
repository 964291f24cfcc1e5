"""A session as readable text (`recap session show FILE`), with rich; summaries highlighted.

Every string of a session is untrusted (see `harness.session`): it is printed as text, never as
rich markup (`escape`), and its control characters are shown as `\\xNN` (`clean`), so that a
session file can neither break the rendering nor send escape sequences to the terminal."""

from __future__ import annotations

from typing import Any

from harness.session import (
    Final,
    Observation,
    PolicyTurn,
    ProjectRules,
    Prune,
    Score,
    Session,
    SessionStart,
    Summary,
    UserMessage,
    Verdict,
)

OUTPUT_LINES = 12

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7f, 0xa0)) if chr(c) not in "\t\n\r"}


def clean(text: str) -> str:
    """`text` with control characters other than tab and newlines (ESC, C1...) written as `\\xNN`."""
    return text.translate(_CONTROL)


def _safe(value: object) -> str:
    """`value` as text that is safe inside rich markup: cleaned, then escaped."""
    from rich.markup import escape

    return escape(clean(str(value)))


def _head(text: str, lines: int | None) -> str:
    parts = text.splitlines()
    if lines is None or len(parts) <= lines:
        return text
    return "\n".join(parts[:lines]) + f"\n... ({len(parts) - lines} more lines)"


def _renderable(event: Any, *, output_lines: int | None) -> Any:
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    if isinstance(event, SessionStart):
        ctx = event.config.get("context", {})
        ctx_text = ", ".join(f"{k}={v}" for k, v in ctx.items()) if isinstance(ctx, dict) else repr(ctx)
        body = Text.assemble(
            ("task: ", "bold"), clean(event.task), "\n",
            ("model: ", "bold"), clean(event.model), ("  adapter: ", "bold") if event.adapter_id else "",
            clean(event.adapter_id or ""), "\n",
            ("repo: ", "bold"), clean(f"{event.repo} @ {event.base_commit or '(no commit)'}"), "\n",
            ("context: ", "bold"), clean(ctx_text) or "(defaults)",
        )
        return Panel(body, title=Text(clean(f"session {event.session_id} ({event.source})")), border_style="blue")
    if isinstance(event, ProjectRules):
        title = f"project rules, pinned in every prompt: {', '.join(event.files) or 'none pinned'} ({event.tokens} tokens"
        title += ", CUT)" if event.truncated else ")"
        skipped = "".join(f"\nskipped {s}" for s in event.skipped)
        return Panel(Text(clean(event.text + skipped)), title=Text(clean(title)), border_style="magenta")
    if isinstance(event, UserMessage):
        return Text.assemble(("user: ", "bold green"), clean(event.content))
    if isinstance(event, PolicyTurn):
        kind = "summary turn" if event.kind == "summary" else f"turn {event.turn}"
        title = f"[bold cyan]{kind}[/] [dim](segment {event.segment}, {event.prompt_tokens} -> {event.completion_tokens} tokens"
        title += ", constrained" if event.constrained else ""
        title += f", {_safe(event.finish_reason)})[/]"
        lines = [title]
        if event.kind == "action":
            lines.append(_safe(event.text.strip()) or "[dim](no text)[/]")
            lines += [f"[red]malformed:[/] {_safe(p)}" for p in event.parse_errors]
        return "\n".join(lines)
    if isinstance(event, Observation):
        style = "red" if event.is_error else "green"
        label = f"[{style}]{_safe(f'[obs {event.obs_id}] {event.name}')}[/] {_safe(event.arguments[:120])}"
        if event.error_kind:
            label += f" [red]({event.error_kind})[/]"
        return label + "\n" + _safe(_head(event.output, output_lines))
    if isinstance(event, Summary):
        flag = " [bold red]TRUNCATED[/]" if event.truncated else ""
        if event.fallback:
            flag += f" [bold red]FALLBACK {event.fallback} after {event.rejected} unusable replies[/]"
        elif event.rejected:
            flag += f" [red](after {event.rejected} unusable reply)[/]"
        title = f"summary {event.index}: {event.tokens_before} -> {event.tokens_after} tokens{flag}"
        return Panel(_safe(event.text), title=title, border_style="bold yellow", style="yellow")
    if isinstance(event, Prune):
        return f"[magenta]prune[/] obs {event.obs_ids}: {event.tokens_before} -> {event.tokens_after} tokens"
    if isinstance(event, Final):
        head = f"[bold]final:[/] {event.stop_reason} after {event.steps} steps, {event.summaries} summaries, "
        head += f"{event.prompt_tokens} prompt / {event.completion_tokens} completion tokens, {event.duration_s:.1f} s"
        if event.message:
            head += f"\n{_safe(event.message)}"
        parts: list[Any] = [head]
        if event.diff:
            parts.append(Syntax(clean(event.diff), "diff", theme="ansi_dark", word_wrap=True))
        from rich.console import Group

        return Group(*parts)
    if isinstance(event, Verdict):
        return f"[bold]verdict:[/] {event.verdict}" + (f" ({_safe(event.reason)})" if event.reason else "")
    if isinstance(event, Score):
        return f"[bold]score:[/] verify_passed={event.verify_passed} rewards={_safe(event.rewards)}"
    return _safe(repr(event))


def render_session(session: Session, console: Any, *, output_lines: int | None = OUTPUT_LINES) -> None:
    """Print every event of `session` to `console` (a `rich.console.Console`), in order.

    The pinned project rules are a magenta panel; summaries are yellow panels with their token counts (and a TRUNCATED flag); observations show
    their first `output_lines` lines (all when None); the final diff is syntax-highlighted. A torn
    file is said so at the end.
    """
    for event in session.events:
        console.print(_renderable(event, output_lines=output_lines))
    if session.torn:
        console.print("[bold red]the last line of this session file was torn (cut mid-write) and was skipped[/]")
