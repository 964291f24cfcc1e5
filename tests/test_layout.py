"""The package layout rules: imports flow harness <- shadow_backend <- {lsp_server, rl} <- recap,
and importing the harness core loads no heavy library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = {
    "harness": {"harness"},
    "shadow_backend": {"harness", "shadow_backend"},
    "lsp_server": {"harness", "shadow_backend", "lsp_server"},
    "rl": {"harness", "shadow_backend", "rl"},
}
PROJECT = {"harness", "shadow_backend", "lsp_server", "rl", "recap"}


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & PROJECT


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_one_way(package: str) -> None:
    wrong = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_top_levels(path) - ALLOWED[package]
        if bad:
            wrong[str(path.relative_to(ROOT))] = sorted(bad)
    assert not wrong, f"imports against the layout direction: {wrong}"


def test_harness_core_imports_no_heavy_library() -> None:
    code = (
        "import sys, harness.agent, harness.context, harness.session, harness.tools, harness.policies;"
        "heavy = [m for m in ('torch', 'transformers', 'docker', 'pygls', 'xgrammar', 'openai', 'peft') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing the harness core loaded: {out.stdout.strip()}"
