"""`python -m recap ...` is the same as the `recap` command."""

from recap.cli import app

app(prog_name="recap")
