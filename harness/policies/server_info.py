"""What an OpenAI-compatible server says about the model it serves: its context window and how to
count tokens with its tokenizer.

    vLLM / SGLang         GET  /v1/models          -> data[i].max_model_len
                          POST /tokenize           -> {"count": n} (text: {"prompt": ...})
    llama.cpp server      GET  /props              -> n_ctx, or default_generation_settings.n_ctx
                          POST /tokenize           -> {"tokens": [...]} (text: {"content": ...})
    llama-cpp-python      POST /extras/tokenize/count -> {"count": n} (text: {"input": ...}); the
                          window is not published: a prompt longer than any window is sent to
                          /v1/completions with max_tokens=1, and the 400 it gets names the window
    Ollama                POST /api/show           -> parameters "num_ctx N", else
                          model_info "<arch>.context_length"
    LM Studio, others     GET  /v1/models          -> data[i].context_length / max_context_length

Each probe is a short request with its own timeout; a server that does not answer one is simply
not that kind. Threat model: the server is trusted to serve the model, not to be well-formed; every
answer is checked for its type and an odd one counts as no answer (never an exception).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

WINDOW_IN_ERROR = re.compile(r"maximum context length is (\d+)")
PROMPT_IN_ERROR = re.compile(r"\((\d+) in the messages")
_PROBE_TOKENS = 262_144
"""Length of the llama-cpp-python window probe: above any window it serves in practice (the
prompt is only tokenized: a prompt at or above the window is refused before it is evaluated)."""


@dataclass(frozen=True)
class ServerInfo:
    """What the probes found.

    Attributes:
        window: the context window in tokens, None when no probe said.
        window_source: where it came from ("vllm /v1/models max_model_len", ...), "" when None.
        kind: "vllm", "llama.cpp", "llama-cpp-python", "ollama", "openai-compatible" or "unknown".
        count_text: the server's count of a plain text (`text -> int`), None when it has none.
        notes: things worth telling the user (e.g. Ollama's default num_ctx).
    """

    window: int | None
    window_source: str
    kind: str
    count_text: Callable[[str], int] | None
    notes: tuple[str, ...] = ()


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0 and float(value) == int(value):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value) or None
    return None


class _Http:
    def __init__(self, root: str, api_key: str | None, timeout_s: float) -> None:
        self.root, self.timeout_s = root, timeout_s
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def json(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None) -> tuple[int, Any]:
        """(status, decoded JSON or None); (0, None) when the request failed."""
        import urllib.error
        import urllib.request

        url = path if "://" in path else self.root + path
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=self.headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (OSError, ValueError) as exc:  # refused, timed out, reset, bad URL
            log.debug("probe %s %s: %s", method, url, exc)
            return 0, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, None


def _from_models(data: Any, model: str) -> tuple[int | None, str, str]:
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None, "", "unknown"
    dicts = [e for e in entries if isinstance(e, dict)]
    chosen = next((e for e in dicts if e.get("id") == model), dicts[0] if dicts else None)
    if chosen is None:
        return None, "", "openai-compatible"
    for key, kind in (("max_model_len", "vllm"), ("context_length", "openai-compatible"),
                      ("max_context_length", "openai-compatible"), ("context_window", "openai-compatible")):
        if (n := _positive_int(chosen.get(key))) is not None:
            return n, f"/v1/models {key}", kind
    return None, "", "openai-compatible"


def probe_server(base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> ServerInfo:
    """Ask the server at `base_url` (the API base, e.g. http://127.0.0.1:8000/v1) for its window
    and tokenizer (module docstring). Never raises: what could not be learnt is None."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    http = _Http(root, api_key, timeout_s)
    notes: list[str] = []
    status, data = http.json("GET", f"{base_url.rstrip('/')}/models")
    window, source, kind = _from_models(data, model) if status == 200 else (None, "", "unknown")

    status, props = http.json("GET", "/props")
    if status == 200 and isinstance(props, dict):
        settings = props.get("default_generation_settings")
        n = _positive_int(props.get("n_ctx")) or (_positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None)
        if n is not None:
            kind = "llama.cpp"
            window, source = window or n, source or "llama.cpp /props n_ctx"

    if window is None:
        status, show = http.json("POST", "/api/show", {"model": model})
        if status == 200 and isinstance(show, dict):
            kind = "ollama"
            params = show.get("parameters") if isinstance(show.get("parameters"), str) else ""
            num_ctx = re.search(r"^\s*num_ctx\s+(\d+)", params, re.MULTILINE)
            info = show.get("model_info") if isinstance(show.get("model_info"), dict) else {}
            trained = next((_positive_int(v) for k, v in info.items() if k.endswith(".context_length")), None)
            if num_ctx:
                window, source = int(num_ctx.group(1)), "ollama /api/show num_ctx"
            elif trained:
                window, source = trained, "ollama /api/show context_length"
                notes.append(f"Ollama may run this model with a smaller num_ctx than its trained {trained} "
                             "tokens and cut prompts silently; set num_ctx in the Modelfile or pass --context-window")

    count_text = _tokenize_endpoint(http, model, kind)
    if count_text is not None and kind in ("unknown", "openai-compatible") and _llama_cpp_python(http):
        kind = "llama-cpp-python"
    if window is None and kind == "llama-cpp-python":
        window = _window_from_overflow(http, base_url, model, timeout_s)
        source = "llama-cpp-python overflow probe" if window else ""
    return ServerInfo(window, source, kind, count_text, tuple(notes))


def _llama_cpp_python(http: _Http) -> bool:
    status, _ = http.json("POST", "/extras/tokenize/count", {"input": "x"})
    return status == 200


def _tokenize_endpoint(http: _Http, model: str, kind: str) -> Callable[[str], int] | None:
    """The first text-tokenizing endpoint that answers a test text with a plausible count."""
    candidates: list[tuple[str, Callable[[str], Any], Callable[[Any], int | None]]] = [
        ("/extras/tokenize/count", lambda t: {"input": t, "model": model}, lambda d: _positive_int(d.get("count"))),
        ("/tokenize", lambda t: {"model": model, "prompt": t, "add_special_tokens": False},
         lambda d: _positive_int(d.get("count"))),
        ("/tokenize", lambda t: {"content": t}, lambda d: len(d["tokens"]) if isinstance(d.get("tokens"), list) else None),
    ]
    for path, body, read in candidates:
        status, data = http.json("POST", path, body("hello world"))
        if status == 200 and isinstance(data, dict) and read(data):
            def count(text: str, path: str = path, body: Callable = body, read: Callable = read) -> int:
                status, data = http.json("POST", path, body(text))
                n = read(data) if status == 200 and isinstance(data, dict) else None
                if n is None and text:
                    from harness.errors import PolicyError

                    raise PolicyError(f"{path} stopped answering (HTTP {status}) while counting tokens")
                return n or 0
            return count
    return None


def _window_from_overflow(http: _Http, base_url: str, model: str, timeout_s: float) -> int | None:
    body = {"model": model, "prompt": "x " * _PROBE_TOKENS, "max_tokens": 1}
    status, data = http.json("POST", f"{base_url.rstrip('/')}/completions", body, timeout_s=timeout_s)
    text = str(data)
    match = WINDOW_IN_ERROR.search(text) or re.search(r"exceed context window of (\d+)", text)
    return int(match.group(1)) if status == 400 and match else None
