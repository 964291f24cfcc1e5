"""`recap doctor` and the served-model flags of `recap run`, run as the real command against a
fake OpenAI-compatible server (tests/fake_openai.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer, reply

ROOT = Path(__file__).resolve().parents[2]


def recap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recap", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture
def server():
    srv = FakeServer()
    yield srv
    srv.close()


def test_doctor_reports_window_counting_and_a_bare_json_tool_call(server):
    server.routes["GET /v1/models"] = (200, {"data": [{"id": "qwen", "max_model_len": 32768}]})
    server.replies = [(200, reply({"content": json.dumps({"name": "read_file", "arguments": {"path": "README.md"}})},
                                  prompt_tokens=500))]
    done = recap("doctor", "--model", f"openai:qwen@{server.url}")
    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert "32,768 tokens (/v1/models max_model_len)" in out
    assert "estimate (no tokenizer)" in out and "the server 500" in out
    assert 'ok: read_file({"path": "README.md"}) as bare_json' in out
    assert server.requests[0]["tool_choice"] == "auto"


def test_doctor_says_why_a_model_misbehaves(server):
    server.replies = [(200, reply({"content": "Sure! I will read README.md for you."}))]
    done = recap("doctor", "--model", f"openai:m@{server.url}", "--context-window", "4096")
    assert done.returncode == 1
    assert "4,096 tokens (--context-window)" in done.stdout and "no tool call in the reply" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_doctor_and_run_reject_a_url_without_scheme_up_front(tmp_path):
    done = recap("doctor", "--model", "openai:m@localhost:8000/v1")
    assert done.returncode == 2 and "did you mean http://localhost:8000/v1" in done.stdout
    run = recap("run", "--repo", str(tmp_path), "--sessions-dir", str(tmp_path / "s"), "--model", "openai:m@localhost:8000/v1", "task")
    assert run.returncode == 2 and "needs a scheme" in run.stderr and "workspace" not in run.stderr


def test_doctor_on_a_hung_server_says_what_happened(server):
    server.hang_s = 30
    done = recap("doctor", "--model", f"openai:m@{server.url}", "--timeout", "1", "--retries", "0", "--context-window", "4096")
    assert done.returncode == 1
    assert "accepted the connection but sent no reply within 1 s (1 attempt)" in " ".join(done.stdout.split())
