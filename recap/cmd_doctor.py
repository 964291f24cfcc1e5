"""`recap doctor --model SPEC`: what recap found out about a model, in ten seconds.

Prints the context window and where it came from, how tokens are counted (a tokenizer, the
server's tokenizer, or a calibrated estimate) and how that count compares with the server's own,
whether the server took the tools, and a one-turn tool-call smoke test with the format the calls
came in. Exit status: 0 when the smoke test produced a tool call, 1 when it did not or the model
failed, 2 for bad input.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

SMOKE_SYSTEM = "You are a coding agent. Act only through the tools."
SMOKE_TASK = "Read the file README.md with the read_file tool. Call the tool now."


def doctor(
    model: str = typer.Option(..., "--model", help="Policy spec, e.g. openai:qwen2.5-coder@http://127.0.0.1:8000/v1."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Base URL for openai: specs (else OPENAI_BASE_URL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="API key for openai: specs."),
    context_window: Optional[int] = typer.Option(None, "--context-window", help="The window in tokens when the server does not report it."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="The served model's tokenizer (folder, hub name or GGUF file)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds to wait for a reply."),
    retries: Optional[int] = typer.Option(None, "--retries", help="Retries after a timeout or a lost connection."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Completion budget of the smoke test."),
) -> None:
    """Check a model: window, token counting, tool calls (one smoke-test turn)."""
    import logging

    from rich.console import Console
    from rich.markup import escape

    from harness.config import ModelConfig
    from harness.errors import RecapError
    from harness.policies import load_policy
    from harness.tools import default_registry

    console = Console(highlight=False)
    warnings: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    handler = _Collect(logging.WARNING)
    logging.getLogger("harness").addHandler(handler)
    try:
        try:
            defaults = ModelConfig()
            options = ModelConfig(context_window=context_window, tokenizer=tokenizer,
                                  timeout_s=timeout if timeout is not None else defaults.timeout_s,
                                  max_retries=retries if retries is not None else defaults.max_retries)
            with console.status(f"loading {escape(model)}..."):
                policy = load_policy(model, endpoint=endpoint, api_key=api_key, **options.policy_options(model))
        except RecapError as exc:
            console.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from None
        rows = _describe(policy)
        specs = default_registry().specs()
        messages = [{"role": "system", "content": SMOKE_SYSTEM}, {"role": "user", "content": SMOKE_TASK}]
        counted = policy.count_tokens(messages, specs)
        try:
            with console.status("smoke test: one tool-call turn..."):
                c = policy.generate(messages, specs, max_new_tokens=max_new_tokens)
        except RecapError as exc:
            _print(console, rows + [("smoke test", f"[red]failed[/red]: {escape(str(exc))}")], warnings)
            raise typer.Exit(1) from None
    finally:
        logging.getLogger("harness").removeHandler(handler)
    if c.prompt_tokens and getattr(policy, "counter", None) is not None:
        ratio = counted / c.prompt_tokens
        rows.append(("count check", f"recap counted {counted} tokens, the server {c.prompt_tokens} (ratio {ratio:.2f}; "
                                    f"{'errs high, as it should' if ratio >= 1 else 'LOW: now calibrated upwards'})"))
    if getattr(policy, "text_tools", False):
        rows.append(("tools", "[yellow]the server refused `tools`: they go in the system prompt as text[/yellow]"))
    if c.tool_calls:
        calls = ", ".join(f"{t.name}({t.arguments})" for t in c.tool_calls)
        verdict = f"[green]ok[/green]: {escape(calls)} as {c.tool_call_format} in {c.duration_s:.1f}s"
    else:
        why = "; ".join(c.parse_errors) or f"no tool call in the reply: {c.text[:200]!r}"
        verdict = f"[red]no tool call[/red]: {escape(why)}"
    _print(console, rows + [("smoke test", verdict)], warnings)
    if not c.tool_calls:
        raise typer.Exit(1)


def _describe(policy: Any) -> list[tuple[str, str]]:
    from rich.markup import escape

    rows = [("model", escape(policy.spec))]
    server = getattr(policy, "server", None)
    if server is not None:
        rows.append(("server", server.kind))
    source = getattr(policy, "window_source", "the model")
    rows.append(("context window", f"{policy.context_window:,} tokens ({escape(source)})"))
    counter = getattr(policy, "counter", None)
    rows.append(("token counting", {
        None: "exact (the model's own tokenizer)",
        "tokenizer": "exact (--tokenizer)",
        "server": "the server's tokenizer + chat-template overhead, calibrated to err high",
        "estimate": "estimate (no tokenizer), calibrated by the server's counts to err high; pass --tokenizer for exact counts",
    }[getattr(counter, "kind", None)]))
    return rows


def _print(console: Any, rows: list[tuple[str, str]], warnings: list[str]) -> None:
    from rich.markup import escape

    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        console.print(f"[bold]{key.ljust(width)}[/bold]  {value}")
    for message in dict.fromkeys(warnings):
        console.print(f"[yellow]warning:[/yellow] {escape(message)}")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
