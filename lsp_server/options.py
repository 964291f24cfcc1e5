"""What clients send the server: configuration and command arguments, validated with pydantic.

Shapes follow `docs/lsp-protocol.md` (camelCase on the wire). `ServerOptions` comes from
`initializationOptions` and the `recap` section of `workspace/configuration`; each command takes one
object argument parsed by its model here. A validation error becomes `InvalidParams` in the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ServerOptions(_Wire):
    """Server configuration (`initializationOptions`, `workspace/configuration` section `recap`).

    Attributes:
        model: policy spec (`embedded`, `hf:PATH`, `openai:MODEL@URL`, `scripted:FILE.json`, `tiny`).
        endpoint, api_key: for `openai:` specs.
        backend: shadow backend name, `local` or `docker`.
        summarize_at, hard_limit: context thresholds, tokens or a fraction (<= 1) of the window.
        max_steps: policy turns per session.
        max_new_tokens: completion budget of one policy turn (tokens).
        sessions_dir: where session files go (default: `harness.session.default_sessions_dir()`).
        adapter_dir: folder watched for LoRA adapters (subfolders holding `adapter_config.json`);
            the newest is loaded for each new session.
        context_window: the model's window in tokens when its server does not report it (a cap
            for local models); see `harness.config.ModelConfig`.
        tokenizer, timeout_s, max_retries: `openai:` specs: the served model's tokenizer, seconds to
            wait for a reply, retries (`harness.config.ModelConfig`).
        confirm_accept: send accepted changes with `needsConfirmation` (the client previews them
            before applying); off: accepting applies at once.
    """

    model_config = ConfigDict(extra="ignore")

    model: str = "embedded"
    endpoint: str | None = None
    api_key: str | None = None
    backend: Literal["local", "docker"] = "local"
    summarize_at: float | None = Field(None, gt=0)
    hard_limit: float | None = Field(None, gt=0)
    max_steps: int | None = Field(None, ge=1)
    max_new_tokens: int | None = Field(None, ge=1)
    sessions_dir: Path | None = None
    adapter_dir: Path | None = None
    context_window: int | None = Field(None, ge=256)
    tokenizer: str | None = Field(None, min_length=1)
    timeout_s: float | None = Field(None, gt=0)
    max_retries: int | None = Field(None, ge=0)
    confirm_accept: bool = False

    def merged(self, update: dict[str, Any]) -> "ServerOptions":
        """These options with the (wire-named) non-null values of `update` on top.

        Raises ValueError with a readable message when a value does not validate."""
        data = self.model_dump(by_alias=True)
        data.update({k: v for k, v in update.items() if v is not None})
        return parse(ServerOptions, data)


class LspPosition(_Wire):
    line: int = Field(ge=0)
    character: int = Field(ge=0)


class LspRange(_Wire):
    start: LspPosition
    end: LspPosition


class RunParams(_Wire):
    """`recap.run {task, uri?, range?}`."""

    task: str = Field(min_length=1)
    uri: str | None = None
    range: LspRange | None = None

    @field_validator("task")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task must not be blank")
        return value


class SessionParams(_Wire):
    """`recap.cancel {session}`, `recap.proposal {session}`."""

    session: str


class AcceptParams(SessionParams):
    """`recap.accept {session, files?}`: workspace-relative paths; all files when absent."""

    files: list[str] | None = None


class RejectParams(SessionParams):
    """`recap.reject {session, reason?}`."""

    reason: str | None = None


class StatusParams(_Wire):
    """`recap.status {session?}`."""

    session: str | None = None


def parse(model: type[BaseModel], data: Any) -> Any:
    """Validate `data` as `model`; raise ValueError naming each bad field (wire names)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())) or "(argument)"
            problems.append(f"{where}: {err['msg']}")
        raise ValueError("; ".join(problems)) from None
