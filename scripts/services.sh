#!/usr/bin/env bash
# Idempotent: what the test suite needs besides the venv. Installs docker.io and debootstrap when
# missing (as root, with apt-get), starts dockerd when no daemon answers, and builds the offline
# base image `recap-base` (skipped when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "services: installing docker.io and debootstrap with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
  else
    echo "services: docker.io and debootstrap are needed; install them (apt-get install docker.io debootstrap)" >&2
    exit 1
  fi
fi

if ! docker info >/dev/null 2>&1; then
  echo "services: starting dockerd"
  if [ "$(id -u)" = 0 ]; then
    nohup dockerd >/tmp/recap-dockerd.log 2>&1 &
  else
    sudo -n nohup dockerd >/tmp/recap-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "services: dockerd did not start; see /tmp/recap-dockerd.log" >&2; exit 1; }
fi

.venv/bin/recap backend build-image --name recap-base

# The real llama.cpp server for the `llamacpp` tests. Built from source with cmake: 15-35 minutes on
# 2 cores the first time; pip's wheel cache makes later installs on the same machine instant.
if ! .venv/bin/python -c "import llama_cpp.server" >/dev/null 2>&1; then
  echo "services: installing llama-cpp-python[server] (first build: 15-35 minutes)"
  start=$(date +%s)
  .venv/bin/pip install -q 'llama-cpp-python[server]>=0.3,<0.4'
  echo "services: llama-cpp-python built in $(( $(date +%s) - start )) s"
fi

command -v node >/dev/null && command -v npm >/dev/null || {
  echo "services: node and npm are needed for the editor plugin tests" >&2; exit 1; }

# the editor tests drive a real VS Code in Chromium (tests/editors) and Neovim's TUI inside tmux
editor_tools=()
command -v chromium >/dev/null || editor_tools+=(chromium)
command -v tmux >/dev/null || editor_tools+=(tmux)
if ((${#editor_tools[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "services: installing ${editor_tools[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${editor_tools[@]}" >/dev/null
  else
    echo "services: the editor tests need ${editor_tools[*]} (apt-get install ${editor_tools[*]})" >&2; exit 1
  fi
fi
