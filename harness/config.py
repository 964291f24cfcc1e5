"""Configuration of the agent loop and the context manager, and the file/flag loader.

Config flows one way: a TOML file, then flags (CLI) or initialization options (language server),
give one validated `RecapConfig`; each component receives only its own section, and
`RecapConfig.to_dict()` is recorded in the session's `session_start` event.

    [agent]
    max_steps = 50
    loop_guard_repeats = 3    # rounds of a repeating cycle of calls before a warning; one more stops

    [context]
    strategy = "summary"
    summarize_at = 0.7        # fraction of the window (0 < x <= 1) or an absolute token count (> 1)
    hard_limit = 0.9
    keep_recent = 2
    max_summaries = 8

    [model]                   # served models (openai: specs)
    context_window = 32768    # when the server does not say
    tokenizer = "Qwen/Qwen2.5-Coder-7B-Instruct"
    timeout_s = 120
    max_retries = 2

Every field is checked in `__post_init__`; a bad value raises `ConfigError` saying how to fix it.
Other top-level tables (e.g. `[backend]`) are left to the components that own them.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from harness.errors import ConfigError

Strategy = Literal["summary", "drop_oldest", "mask", "none"]
STRATEGIES: tuple[str, ...] = ("summary", "drop_oldest", "mask", "none")


def _positive_int(owner: str, name: str, value: object, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")


def _budget(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(
            f"{owner}.{name} must be a fraction of the window (0 < x <= 1) or a token count (> 1), got {value!r}"
        )
    if value > 1 and float(value) != int(value):
        raise ConfigError(f"{owner}.{name}={value!r}: a token count must be a whole number (or use a fraction <= 1)")


def resolve_tokens(value: float, context_window: int) -> int:
    """A budget in tokens: `value` <= 1 is a fraction of `context_window`, larger values are tokens."""
    return int(value * context_window) if value <= 1 else int(value)


@dataclass(frozen=True)
class AgentConfig:
    """Options of the agent loop (`harness.agent.Agent`).

    Attributes:
        max_steps: action turns before the episode stops with `max_steps` (summary turns don't count).
        loop_guard_repeats: rounds of a short cycle of calls (the same call, or up to 4 calls in
            turn) with the same results or the workspace put back, before the policy is warned; if
            the cycle goes on a round more, the run stops with `loop_guard` (`harness.loop_guard`).
        max_new_tokens: completion budget of an action turn (tokens).
        summary_max_new_tokens: completion budget of a self-summary turn (tokens).
        command_timeout_s: default timeout of `run_command` when the model gives none (seconds, at
            most `harness.tools.command.MAX_TIMEOUT_S`).
    """

    max_steps: int = 50
    loop_guard_repeats: int = 3
    max_new_tokens: int = 512
    summary_max_new_tokens: int = 512
    command_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        _positive_int("agent", "max_steps", self.max_steps)
        _positive_int("agent", "loop_guard_repeats", self.loop_guard_repeats, minimum=2)
        _positive_int("agent", "max_new_tokens", self.max_new_tokens)
        _positive_int("agent", "summary_max_new_tokens", self.summary_max_new_tokens)
        from harness.tools.command import MAX_TIMEOUT_S

        timeout = self.command_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
            raise ConfigError(f"agent.command_timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout!r}")


@dataclass(frozen=True)
class ContextConfig:
    """Options of the context manager (`harness.context.ContextManager`).

    Budgets (`summarize_at`, `hard_limit`) are a fraction of the policy's context window when
    <= 1, else a token count; both are capped at `context_window - reserve`.

    Attributes:
        strategy: "summary" (the policy writes a self-summary that replaces the history; Cursor
            Composer-style), "drop_oldest" (truncate the oldest turns), "mask" (replace old
            observations by a placeholder; OpenHands-style observation masking), or "none" (no
            management: the episode stops with `context_exhausted` when the prompt no longer fits).
        summarize_at: when the next prompt would pass it, the strategy acts (a summary turn, a
            truncation, masking).
        hard_limit: above it only `prune` and `finish` are offered (Chroma Context-1); strategy
            "summary" only.
        keep_recent: turns kept verbatim after a summary (as many as fit), and unmasked by "mask".
        max_summaries: cap on summary rounds per episode; past it, drop-oldest and the hard limit act.
        reserve_tokens: room kept free for the completion; None means `AgentConfig.max_new_tokens`.
    """

    strategy: Strategy = "summary"
    summarize_at: float = 0.7
    hard_limit: float = 0.9
    keep_recent: int = 2
    max_summaries: int = 8
    reserve_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"context.strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}")
        _budget("context", "summarize_at", self.summarize_at)
        _budget("context", "hard_limit", self.hard_limit)
        if (self.summarize_at <= 1) == (self.hard_limit <= 1) and self.hard_limit < self.summarize_at:
            raise ConfigError(
                f"context.hard_limit ({self.hard_limit}) is below context.summarize_at ({self.summarize_at}); "
                "raise hard_limit or lower summarize_at"
            )
        _positive_int("context", "keep_recent", self.keep_recent, minimum=0)
        _positive_int("context", "max_summaries", self.max_summaries, minimum=0)
        if self.reserve_tokens is not None:
            _positive_int("context", "reserve_tokens", self.reserve_tokens)


@dataclass(frozen=True)
class ModelConfig:
    """Options of a served model (`openai:` specs; see `harness.policies.openai_policy`).

    Attributes:
        context_window: the window in tokens when the server does not report it (None: ask the
            server, else a conservative default with a warning).
        tokenizer: the served model's tokenizer (transformers folder or hub name, or a GGUF file)
            for exact token counts; None: the server's tokenizer, else a calibrated estimate.
        timeout_s: seconds to wait for a reply, per attempt.
        max_retries: further attempts after a timeout, a lost connection, HTTP 429 or 5xx.
    """

    context_window: int | None = None
    tokenizer: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if self.context_window is not None:
            _positive_int("model", "context_window", self.context_window, minimum=256)
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ConfigError(f"model.timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        _positive_int("model", "max_retries", self.max_retries, minimum=0)
        if self.tokenizer is not None and not (isinstance(self.tokenizer, str) and self.tokenizer.strip()):
            raise ConfigError(f"model.tokenizer must be a path or a model name, got {self.tokenizer!r}")

    def policy_options(self, spec: str) -> dict[str, Any]:
        """These options as `harness.policies.load_policy` keywords for `spec`: the window for any
        spec, the served-model options for `openai:` specs only."""
        options: dict[str, Any] = {"context_window": self.context_window}
        if spec.startswith("openai:"):
            options.update(tokenizer=self.tokenizer, timeout_s=self.timeout_s, max_retries=self.max_retries)
        return options


_SECTIONS: dict[str, type] = {"agent": AgentConfig, "context": ContextConfig, "model": ModelConfig}


@dataclass(frozen=True)
class RecapConfig:
    """The resolved configuration of a run: one section per component."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    model: ModelConfig = field(default_factory=ModelConfig)

    @property
    def reserve_tokens(self) -> int:
        """Tokens kept free for the completion (`context.reserve_tokens`, else `agent.max_new_tokens`)."""
        return self.context.reserve_tokens if self.context.reserve_tokens is not None else self.agent.max_new_tokens

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RecapConfig":
        """Build from `{"agent": {...}, "context": {...}}`; other top-level keys are ignored.

        Raises: ConfigError on an unknown key inside a section or a bad value.
        """
        sections: dict[str, Any] = {}
        for name, section_cls in _SECTIONS.items():
            values = data.get(name, {})
            if not isinstance(values, Mapping):
                raise ConfigError(f"[{name}] must be a table of options, got {type(values).__name__}")
            known = {f.name for f in dataclasses.fields(section_cls)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise ConfigError(f"unknown option(s) in [{name}]: {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
            sections[name] = section_cls(**values)
        return cls(**sections)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> "RecapConfig":
        """Read a TOML file (see the module docstring). Raises ConfigError on bad TOML or values."""
        from harness.jsonl import read_regular_file

        try:
            data = tomllib.loads(read_regular_file(path).decode("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
        except (OSError, ValueError) as exc:  # missing, a FIFO or device, too large, not UTF-8
            raise ConfigError(f"{path}: cannot read the config file: {exc}") from None
        return cls.from_dict(data)

    def with_overrides(self, **options: Any) -> "RecapConfig":
        """Apply flat overrides (flag names are field names, unique across sections); None is skipped.

        Example: `cfg.with_overrides(max_steps=10, summarize_at=0.5)`.
        Raises: ConfigError on an unknown name or a bad value.
        """
        updates: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
        for key, value in options.items():
            if value is None:
                continue
            owner = next((n for n, c in _SECTIONS.items() if key in {f.name for f in dataclasses.fields(c)}), None)
            if owner is None:
                valid = sorted(f.name for c in _SECTIONS.values() for f in dataclasses.fields(c))
                raise ConfigError(f"unknown option {key!r}; valid: {', '.join(valid)}")
            updates[owner][key] = value
        return RecapConfig(
            agent=dataclasses.replace(self.agent, **updates["agent"]),
            context=dataclasses.replace(self.context, **updates["context"]),
            model=dataclasses.replace(self.model, **updates["model"]),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, **overrides: Any) -> "RecapConfig":
        """The config file (when given) with flag overrides on top."""
        base = cls.from_toml(path) if path is not None else cls()
        return base.with_overrides(**overrides)

    def to_dict(self) -> dict[str, Any]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in _SECTIONS}
