"""The `recap` console command: one typer app fronting the harness, the shadow backend, the
language server and RL training. Each area registers its commands from its own module; heavy
libraries are imported inside the commands, so `recap --help` stays fast."""

from __future__ import annotations

import logging

import typer

from recap import cmd_backend, cmd_doctor, cmd_run, cmd_serve, cmd_train

app = typer.Typer(
    name="recap",
    help="A coding agent that keeps its context short with self-summaries and learns from logged sessions.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"recap {version('recap')}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages to stderr."),
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the version and exit."),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
    )


for _module in (cmd_run, cmd_doctor, cmd_backend, cmd_serve, cmd_train):
    _module.register(app)


if __name__ == "__main__":
    app()
