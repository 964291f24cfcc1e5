"""A small OpenAI-compatible server on 127.0.0.1 (http.server in a thread) for policy tests.

Chat replies come from `replies` (a queue of (status, body)) or from `respond(request) -> (status,
body)`; a body that is a str is sent as text/html, a list of dicts as a server-sent-event stream.
Other routes (`/v1/models`, `/props`, `/api/show`, `/tokenize`, ...) answer from `routes`
({"GET /props": (200, {...})}); anything else is a 404. With `window` and `count` set, the chat
route behaves like vLLM: a prompt whose `count(messages, tools)` plus `max_tokens` passes `window`
gets HTTP 400 with vLLM's message, and `usage.prompt_tokens` is the real count.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def reply(message: dict, *, finish: str = "stop", logprobs: list[float] | None = None, prompt_tokens: int = 42) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                          for i, lp in enumerate(logprobs)]}
    completion = len(logprobs or [1])
    return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}}


def stream_chunks(text: str, *, pieces: int = 3, prompt_tokens: int = 42) -> list[dict]:
    """`text` as chat.completion.chunk events, then a usage chunk."""
    step = max(1, len(text) // pieces)
    parts = [text[i:i + step] for i in range(0, len(text), step)]
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": p}, "finish_reason": None}]}
              for p in parts]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(parts),
                                                     "total_tokens": prompt_tokens + len(parts)}})
    return chunks


class FakeServer:
    """See the module docstring. `requests` holds the chat requests' bodies (plus "path")."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self.replies: list[tuple[int, Any]] = []
        self.respond: Callable[[dict], tuple[int, Any]] | None = None
        self.routes: dict[str, tuple[int, Any]] = {}
        self.window: int | None = None
        self.count: Callable[[list, Any], int] | None = None
        self.hang_s = 0.0
        self.rejected: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: Any) -> None:
                if isinstance(body, list):
                    data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in body) + b"data: [DONE]\n\n"
                    ctype = "text/event-stream"
                elif isinstance(body, str):
                    data, ctype = body.encode(), "text/html; charset=utf-8"
                else:
                    data, ctype = json.dumps(body).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                server.paths.append(f"{method} {self.path}")
                if method == "POST" and self.path.endswith("/chat/completions"):
                    body = json.loads(raw)
                    server.requests.append({"path": self.path, **body})
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if server.hang_s:
                        time.sleep(server.hang_s)
                        return
                    self._answer(*server._chat(body))
                    return
                key = f"{method} {self.path}"
                if key in server.routes:
                    status, body = server.routes[key]
                    self._answer(status, body(json.loads(raw) if raw else None) if callable(body) else body)
                else:
                    self._answer(404, {"detail": "Not Found"})

            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.root}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _chat(self, body: dict) -> tuple[int, Any]:
        if self.window is not None and self.count is not None:
            prompt = self.count(body["messages"], body.get("tools"))
            wanted = prompt + int(body.get("max_tokens") or 0)
            if wanted > self.window:
                self.rejected.append(prompt)
                return 400, {"object": "error", "type": "BadRequestError", "code": 400, "message": (
                    f"This model's maximum context length is {self.window} tokens. However, you requested "
                    f"{wanted} tokens ({prompt} in the messages, {body.get('max_tokens')} in the completion). "
                    "Please reduce the length of the messages or completion.")}
        status, payload = self.respond(body) if self.respond is not None else self.replies.pop(0)
        if self.count is not None and isinstance(payload, dict) and "usage" in payload:
            payload["usage"]["prompt_tokens"] = self.count(body["messages"], body.get("tools"))
        return status, payload

    def close(self) -> None:
        self.hang_s = 0.0
        self.httpd.shutdown()
        self.httpd.server_close()
