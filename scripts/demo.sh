#!/usr/bin/env bash
# The main job on real input: the agent, with the embedded default model (SmolLM2-135M-Instruct, on
# CPU), works on a shadow copy of a real repository and proposes a diff. Your files are not touched.
#   bash scripts/demo.sh [REPO] [TASK]      (default: this checkout, a small lookup task)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/setup.sh"
repo="${1:-$here}"
task="${2:-Add a one-line module docstring to recap/__init__.py saying that recap is a self-summarizing coding agent, then call finish.}"
# this checkout's own environment would install torch; another repository's is detected (--setup)
setup="${RECAP_DEMO_SETUP:-$([ "$repo" = "$here" ] && echo none || true)}"
exec "$here/.venv/bin/recap" run --repo "$repo" --max-steps "${RECAP_DEMO_STEPS:-6}" ${setup:+--setup "$setup"} "$task"
