"""`recap backend build-image|gc`, `recap replay`, `recap sessions mine`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

backend_app = typer.Typer(help="The shadow backend: base image and clean-up.", no_args_is_help=True)
sessions_app = typer.Typer(help="Make session files.", no_args_is_help=True)


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=True)


@backend_app.command("build-image")
def build_image(
    name: str = typer.Option("recap-base", "--name", help="Tag of the image to build."),
    mirror: Optional[str] = typer.Option(None, "--mirror", help="Debian mirror (default: this machine's apt sources)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the image exists."),
) -> None:
    """Build the Docker base image offline (debootstrap + docker import); skipped when it exists."""
    from harness.errors import RecapError
    from shadow_backend.image import build_base_image

    console = _console()
    try:
        with console.status("building the base image...") as status:
            build = build_base_image(name=name, mirror=mirror, force=force, on_step=lambda s: status.update(s + "..."))
    except RecapError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    verb = f"built in {build.duration_s:.0f}s" if build.built else "exists (use --force to rebuild)"
    console.print(f"image {build.name} {verb}: {build.image_id}")


@backend_app.command("gc")
def gc(
    no_docker: bool = typer.Option(False, "--no-docker", help="Only remove workspace directories."),
) -> None:
    """Remove workspace containers and directories whose owner process is gone."""
    from shadow_backend.gc import collect_garbage

    report = collect_garbage(docker=not no_docker)
    _console().print(f"removed {len(report.containers)} containers and {len(report.dirs)} directories")
    for name in (*report.containers, *report.dirs):
        typer.echo(name)


def replay(
    sessions: list[Path] = typer.Argument(..., help="Session .jsonl files."),
    backend: str = typer.Option("local", "--backend", help="local or docker."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write a JSON report here."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Sessions replayed in parallel."),
    allow_divergence: bool = typer.Option(False, "--allow-divergence", help="Exit 0 even when a session diverges."),
    model: Optional[str] = typer.Option(None, "--model", help="Sample fresh rollouts with this policy instead of replaying."),
    samples: int = typer.Option(1, "--samples", help="Rollouts per session (with --model)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where rollout session files go (with --model)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Step limit of each rollout (with --model)."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Project environment set-up command instead of the one each session recorded (none: no environment; recorded: the one the session holds, which runs with network access (only for sessions you trust); by default a recorded set-up is used only when its build is already cached here)."),
) -> None:
    """Re-execute logged sessions headless and compare every observation and the final diff;
    with --model, sample and score fresh rollouts from each session's start state instead.

    Exit status: 1 when a session diverges (unless --allow-divergence), 2 when one can't be read."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.errors import RecapError

    console = _console()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    if model is not None:
        _sample(sessions, model=model, samples=samples, backend=backend, out=out, max_steps=max_steps, report=report,
                setup=setup)
        return
    from shadow_backend.replay import replay_sessions

    try:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("replaying", total=len(sessions))

            def done(result) -> None:  # type: ignore[no-untyped-def]
                progress.advance(task)
                if result.session_id is None:  # the file itself was refused: nothing was replayed
                    progress.console.print(f"[red]error:[/red] {escape(result.error)}")
                    return
                mark = "[green]ok[/green]" if result.ok else ("[red]error[/red]" if result.error else "[red]diverged[/red]")
                progress.console.print(
                    f"{mark} {escape(result.path)}: {result.observations} observations "
                    f"({result.exact} exact, {result.normalized} normalized, {result.skipped} not re-run), "
                    f"final diff {result.final_diff}"
                )
                if result.error:
                    progress.console.print(f"[red]error:[/red] {escape(result.error)}")
                for d in result.divergences:
                    where = f"step {d.step} obs {d.obs_id}" if d.step is not None else "final diff"
                    progress.console.print(f"  [red]{where}[/red] ({d.what}):\n{d.detail}", markup=False)

            results = replay_sessions(sessions, backend=backend, jobs=jobs, on_done=done, setup=setup)
    except RecapError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if report is not None:
        report.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    if any(r.error for r in results):
        raise typer.Exit(2)
    if any(r.divergences for r in results) and not allow_divergence:
        raise typer.Exit(1)


def _sample(
    sessions: list[Path], *, model: str, samples: int, backend: str, out: Optional[Path],
    max_steps: Optional[int], report: Optional[Path], setup: Optional[str],
) -> None:
    from rich.markup import escape

    from harness.errors import RecapError
    from harness.policies import load_policy
    from harness.session import read_session
    from shadow_backend.replay import session_config, sample_rollouts

    console = _console()
    rows = []
    try:
        with console.status(f"loading policy {model}..."):
            # A scripted policy plays its turns once: each rollout gets a fresh one.
            policy = (lambda: load_policy(model)) if model.startswith("scripted:") else load_policy(model)
        for path in sessions:
            session = read_session(path)
            config = session_config(session).with_overrides(max_steps=max_steps)
            with console.status(f"{escape(str(path))}: sampling {samples} rollouts..."):
                rollouts = sample_rollouts(session, policy, n=samples, backend=backend, config=config, out_dir=out,
                                           setup=setup)
            for r in rollouts:
                console.print(f"{path} #{r.index}: {r.stop_reason} after {r.steps} steps, score {r.score}"
                              + (f", session {r.session_path}" if r.session_path else ""), markup=False)
                rows.append({"session": str(path), "index": r.index, "stop_reason": r.stop_reason, "steps": r.steps,
                             "score": r.score, "session_path": r.session_path})
    except RecapError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if report is not None:
        report.write_text(json.dumps(rows, indent=2))


@sessions_app.command("mine")
def mine(
    repo: Path = typer.Argument(..., help="A git repository."),
    rev_range: Optional[str] = typer.Option(None, "--range", help="Revision range, e.g. HEAD~50..HEAD (default: all history)."),
    verify: Optional[str] = typer.Option(None, "--verify", help="Command that checks a solution (recorded in each session)."),
    paths: Optional[list[str]] = typer.Option(None, "--paths", help="Glob of files that count as source (repeatable)."),
    out: Path = typer.Option(Path("mined-sessions"), "--out", help="Output directory."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Project environment set-up command recorded in each session (e.g. \"pip install -e . pytest\")."),
) -> None:
    """One session per commit: task = message, start = parent, reference diff = the commit's diff
    of non-test files, test patch (applied before verify) = its diff of test files."""
    from harness.errors import RecapError
    from shadow_backend.mine import mine_sessions

    console = _console()
    try:
        with console.status("mining commits..."):
            mined = mine_sessions(repo, out_dir=out, rev_range=rev_range, verify=verify, paths=paths,
                                  setup=setup)
    except RecapError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    for m in mined:
        typer.echo(str(m.path))
    console.print(f"{len(mined)} sessions written to {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(backend_app, name="backend")
    app.add_typer(sessions_app, name="sessions")
    app.command("replay")(replay)
