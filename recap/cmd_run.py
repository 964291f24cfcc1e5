"""`recap run` (the main job) and `recap session show`."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Optional

import typer

session_app = typer.Typer(help="Read session files.", no_args_is_help=True)


def _describe(event: Any) -> str | None:
    """One progress line (rich markup; every text from the model or a tool escaped) per event worth
    showing, or None."""
    from rich.markup import escape

    kind = event.type
    if kind == "policy_turn":
        if event.kind == "summary":
            return None
        calls = escape(", ".join(c.name for c in event.tool_calls)) or "no tool call"
        return f"step {event.turn}: {calls} ({event.completion_tokens} tokens, {event.duration_s:.1f}s)"
    if kind == "observation":
        head = event.output.strip().splitlines()[0][:100] if event.output.strip() else ""
        mark = "[red]error[/red] " if event.is_error else ""
        return f"  -> {mark}{escape(event.name)}: {escape(head)}"
    if kind == "summary":
        cut = " (cut to fit)" if event.truncated else ""
        return (
            f"[bold magenta]summary {event.index}[/bold magenta]: context {event.tokens_before:,} -> "
            f"{event.tokens_after:,} tokens{cut}"
        )
    if kind == "prune":
        return f"[magenta]pruned[/magenta] observations {event.obs_ids}: {event.tokens_before:,} -> {event.tokens_after:,} tokens"
    return None


class _LinePrinter:
    """Prints a streamed reply line by line (dim), so that a long reply is not minutes of silence."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.pending = ""

    def __call__(self, text: str) -> None:
        from rich.markup import escape

        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.console.print(f"[dim]  | {escape(line)}[/dim]")

    def flush(self) -> None:
        if self.pending:
            self("\n")


def run(
    task: str = typer.Argument(..., help="What the agent should do, in plain words."),
    repo: Path = typer.Option(Path("."), "--repo", help="The repository to work on (never modified unless --apply)."),
    model: str = typer.Option("embedded", "--model", help="Policy spec: embedded, hf:PATH, openai:MODEL@URL, scripted:FILE.json."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Base URL for openai: specs (else OPENAI_BASE_URL)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="API key for openai: specs."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="A LoRA adapter directory to load onto a local model."),
    backend: str = typer.Option("local", "--backend", help="Shadow backend: local or docker."),
    config_file: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False, help="A TOML config file with agent, context and backend.<name> tables."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many policy turns."),
    summarize_at: Optional[float] = typer.Option(None, "--summarize-at", help="Self-summary trigger: tokens, or a fraction of the window (<=1)."),
    hard_limit: Optional[float] = typer.Option(None, "--hard-limit", help="Above this (tokens or fraction) only prune and finish are offered."),
    keep_recent: Optional[int] = typer.Option(None, "--keep-recent", help="Turns kept verbatim after a summary."),
    max_summaries: Optional[int] = typer.Option(None, "--max-summaries", help="Cap on self-summaries per episode."),
    verify: Optional[str] = typer.Option(None, "--verify", help="A command run in the shadow workspace after the agent stops (e.g. the tests); its result is shown and logged."),
    sessions_dir: Optional[Path] = typer.Option(None, "--sessions-dir", help="Where the session file goes (default: ~/.local/share/recap/sessions)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature of a local model (0: greedy)."),
    apply: bool = typer.Option(False, "--apply", help="Apply the final diff to --repo (only when asked)."),
    context_window: Optional[int] = typer.Option(None, "--context-window", help="The model's window in tokens, when the server does not report it (a cap for local models)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="openai: specs: the served model's tokenizer (folder, hub name or GGUF file) for exact token counts."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="openai: specs: seconds to wait for a reply (per attempt)."),
    retries: Optional[int] = typer.Option(None, "--retries", help="openai: specs: retries after a timeout, a lost connection, HTTP 429 or 5xx."),
    image: Optional[str] = typer.Option(None, "--image", help="Docker backend: the image commands run in (your own, holding the project's toolchain) instead of recap-base."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Set-up command of the project environment the agent's commands and --verify run in, e.g. \"pip install -e . pytest\" (run once with network, cached); none: the host toolchain. Default: \\[env] in REPO/recap.toml, else detected from pyproject.toml/setup.py/requirements*.txt."),
) -> None:
    """Run the agent on a shadow copy of REPO; print the proposed diff and the session file.

    Exit status: 0 when the run ended normally (finish, step limit, loop guard), 1 when it failed
    (policy or backend error, or --verify failed), 2 for bad input, 130 when interrupted.
    """
    from rich.console import Console
    from rich.markup import escape

    from harness.agent import Agent
    from harness.config import RecapConfig
    from harness.errors import ConfigError, RecapError
    from harness.policies import load_policy
    from harness.session import SessionWriter, default_sessions_dir, new_session_id
    from shadow_backend import environment, open_backend
    from shadow_backend.backends import backend_config, read_backend_options
    from shadow_backend.links import drop_outside_links
    from shadow_backend.scoring import score_workspace

    console = Console(stderr=True, highlight=False)

    def fail(message: str, code: int = 2) -> typer.Exit:
        console.print(f"[red]error:[/red] {escape(message)}")
        return typer.Exit(code)

    if not task.strip():
        raise fail("the task is empty: say what the agent should do")
    repo = repo.resolve()
    session_id = new_session_id()
    path = (sessions_dir or default_sessions_dir()) / f"{session_id}.jsonl"
    options = {"temperature": temperature} if temperature is not None else {}
    try:
        config = RecapConfig.load(
            config_file,
            max_steps=max_steps,
            summarize_at=summarize_at,
            hard_limit=hard_limit,
            keep_recent=keep_recent,
            max_summaries=max_summaries,
            context_window=context_window,
            tokenizer=tokenizer,
            timeout_s=timeout,
            max_retries=retries,
        )
        if image is not None and backend != "docker":
            raise ConfigError("--image is an option of the docker backend; add --backend docker")
        backend_options = backend_config(backend, {**read_backend_options(config_file, backend),
                                                   **({"image": image} if image is not None else {})})
        env = environment.resolve(repo, setup, detect=backend == "local" and _sandbox_can_mount(backend_options))
        log = SessionWriter(path)
    except (RecapError, OSError) as exc:
        raise fail(str(exc)) from None
    try:
        with console.status(f"loading policy {escape(model)}..."):
            policy = load_policy(model, endpoint=endpoint, api_key=api_key,
                                 adapter=str(adapter) if adapter else None, **options,
                                 **config.model.policy_options(model))
        building = f" and its environment ({escape(env.setup)}; the first time takes a while)" if env else ""
        with console.status(f"creating a {escape(backend)} shadow workspace of {escape(str(repo))}{building}..."):
            workspace = open_backend(backend, repo, config=backend_options, env=env)
    except RecapError as exc:
        log.close()
        path.unlink(missing_ok=True)
        raise fail(str(exc)) from None

    console.print(f"[dim]workspace {escape(workspace.root)} ({escape(workspace.origin.sandbox)})[/dim]")

    def on_event(event: Any) -> None:
        streamed.flush()
        line = _describe(event)
        if line:
            console.print(line)

    score: dict[str, Any] = {}
    streamed = _LinePrinter(console)
    stream = policy.streaming(streamed) if hasattr(policy, "streaming") else contextlib.nullcontext()
    try:
        with console.status("agent running... (Ctrl-C stops it)"), stream:
            result = Agent(policy=policy, workspace=workspace, config=config, log=log, on_event=on_event).run(
                task, session_id=session_id, verify=verify
            )
        if verify and result.stop_reason != "cancelled":
            with console.status(f"verifying: {escape(verify)}"):
                score = score_workspace(workspace, diff=result.diff, verify=verify, reference_diff=None, log=log)
    finally:
        log.close()
        workspace.close()

    ended = f"[bold]stopped:[/bold] {result.stop_reason} after {result.steps} steps"
    console.print(ended + (f" — {escape(result.message)}" if result.message else ""))
    if score:
        counts = "" if score.get("tests_passed") is None else f" ({score['tests_passed']} passed, {score['tests_failed']} failed)"
        verdict = "[green]passed[/green]" if score["verify_passed"] else "[red]failed[/red]"
        console.print(f"verify {verdict}{counts}: {escape(verify or '')}")
    # symlinks the agent made that lead outside the repository are never printed as part of the
    # change nor applied (shadow_backend.links); the session keeps the full diff
    proposed, outside = drop_outside_links(result.diff)
    for link in outside:
        console.print(f"[yellow]left out:[/yellow] {escape(str(link))}", soft_wrap=True)
    if proposed:
        sys.stdout.write(proposed if proposed.endswith("\n") else proposed + "\n")
    else:
        console.print("[yellow]no change proposed[/yellow]")
    console.print(f"session: {escape(str(path))}")
    if result.stop_reason == "cancelled":
        console.print("[yellow]interrupted: nothing applied[/yellow]" if apply else "[yellow]interrupted[/yellow]")
        raise typer.Exit(130)
    if result.stop_reason == "error":
        raise typer.Exit(1)
    if apply and proposed:
        # the diff is relative to the repository's top level, which --repo may be below
        from shadow_backend.git_state import apply_to

        top = workspace.origin.repo
        try:  # byte for byte, reading nothing of the repository's git config (its filters would run)
            apply_to(top, proposed)
        except RecapError as exc:
            raise fail(f"could not apply the diff to {top}: {exc}", 1)
        console.print(f"[green]applied to {escape(top)}[/green]")
    if score and not score["verify_passed"]:
        raise typer.Exit(1)


@session_app.command("show")
def show(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A session .jsonl file."),
    full: bool = typer.Option(False, "--full", help="Show every line of each observation (default: the first 12)."),
) -> None:
    """Render a session as readable text, summaries highlighted."""
    from rich.console import Console

    from rich.markup import escape

    from harness.errors import SessionFormatError
    from harness.render import OUTPUT_LINES, render_session
    from harness.session import read_session

    try:
        session = read_session(file)
    except SessionFormatError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    console = Console()
    render_session(session, console, output_lines=None if full else OUTPUT_LINES)


def _sandbox_can_mount(config: Any) -> bool:
    """Whether a detected environment can be used: it needs bubblewrap's mounts (else the host toolchain)."""
    from shadow_backend.sandbox import bwrap_works

    return getattr(config, "sandbox", "auto") != "none" and bwrap_works()


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.add_typer(session_app, name="session")
