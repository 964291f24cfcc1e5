"""The agent loop: build the context, ask the policy, run the tool calls, append events, check stops.

At the start the repository's rules files (`harness.rules`) are pinned as a `ProjectRules` event.
Each observation is cut to the token room the context has (`ContextManager.observation_budget`).
A summary reply with no usable text is asked for once more with the plain request, then replaced
by the harness's own masked summary (`Summary.fallback`). A short cycle of calls that gets the same
results or leaves the workspace as it was gets a warning, then stops the run (`harness.loop_guard`).

Every step is an event in the session log (`harness.session`), and the context is rebuilt from the
events each turn (`harness.context`), so the log alone replays the episode. Nothing the policy
writes can crash the run: malformed JSON, unknown tools, wrong argument types, a reply without a
call and tools not offered now all become error observations the policy reads. An unexpected
exception ends the run with stop reason "error"; there is always a `Final` event with the diff.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from harness.config import RecapConfig
from harness.context import ContextManager, ContextView, prune_tool
from harness.errors import ToolError
from harness.loop_guard import Cycle, LoopGuard, Step
from harness.prompts import LOOP_STOP, LOOP_WARNING, NO_CALL, NOT_OFFERED, SYSTEM_PROMPT, observation_header
from harness.rules import find_rules
from harness.session import (
    SCHEMA_VERSION,
    Final,
    Observation,
    PolicyTurn,
    ProjectRules,
    Prune,
    SessionStart,
    SessionWriter,
    StopReason,
    Summary,
    ToolCallRecord,
    new_session_id,
)
from harness.toolcall import parse_tool_calls
from harness.tools.base import ToolRegistry, ToolResult
from harness.truncate import MIN_TOKENS, truncate_tokens
from harness.types import Policy
from harness.workspace import Workspace, WorkspaceOrigin

logger = logging.getLogger(__name__)

READ_ONLY_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep", "outline", "prune", "finish"})
"""Tools that never change the workspace: the loop guard reuses the last workspace digest after them."""

RULES_SHARE = 4
"""The pinned project rules take at most 1/RULES_SHARE of `summarize_at`."""

_LEFTOVER_MARKUP = re.compile(r"</?tool_call>|<function=[^>]*>.*?(?:</function>|\Z)|<think>.*?(?:</think>|\Z)", re.DOTALL)


def usable_summary(text: str) -> str | None:
    """The summary text without tool-call markup, or None when nothing usable is left (empty,
    whitespace or punctuation, only tool calls or thinking)."""
    content, _, _ = parse_tool_calls(text, turn=0)
    content = _LEFTOVER_MARKUP.sub("", content).strip()
    return content if re.search(r"\w", content) else None


@dataclass(frozen=True)
class RunResult:
    """The outcome of `Agent.run`.

    Attributes:
        stop_reason: why the episode ended (`harness.session.StopReason`).
        message: the `finish` message, or what went wrong.
        diff: unified diff of the workspace against its start state.
        steps: action turns taken (summary turns not counted).
        session_path: the session file, or None for an in-memory log.
        events: every event of the episode, in order.
    """

    stop_reason: StopReason
    message: str | None
    diff: str
    steps: int
    session_path: str | None
    events: tuple[Any, ...]


def _signature(turn: PolicyTurn) -> tuple[Any, ...]:
    """What the loop guard compares: the calls with canonical arguments; the text as well when some
    call could not be parsed (two different broken calls share their error message)."""
    def canonical(arguments: str) -> str:
        try:
            return json.dumps(json.loads(arguments), sort_keys=True)
        except (ValueError, RecursionError):
            return arguments

    calls = tuple((c.name, canonical(c.arguments)) for c in turn.tool_calls)
    return calls if calls and not turn.parse_errors else (calls, turn.text)


class Agent:
    """Runs one episode of a policy in a workspace.

    Args:
        policy: any `harness.types.Policy`.
        workspace: where the tools act (`harness.workspace.Workspace`).
        tools: the tools offered (default: `harness.tools.default_registry`); `prune` is added.
        config: the run's configuration (default: `RecapConfig()`).
        log: where events go (default: an in-memory `SessionWriter`); must be fresh.
        on_event: called with each event after it is logged (progress, editor streaming); its
            exceptions are logged and ignored.
        cancel: set it to stop the run before its next step (stop reason "cancelled").
    Raises:
        ConfigError: the config leaves no room for a prompt in the policy's window.
        ValueError: `log` already holds events, or `tools` already has a `prune` tool.
    """

    def __init__(
        self,
        *,
        policy: Policy,
        workspace: Workspace,
        tools: ToolRegistry | None = None,
        config: RecapConfig | None = None,
        log: SessionWriter | None = None,
        on_event: Callable[[Any], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.policy = policy
        self.workspace = workspace
        self.config = config or RecapConfig()
        self.log = log if log is not None else SessionWriter(None)
        if self.log.events:
            raise ValueError("Agent needs a fresh SessionWriter (this one already holds events)")
        self.on_event = on_event
        self.cancel = cancel
        if tools is None:
            from harness.tools import default_registry

            tools = default_registry(command_timeout_s=self.config.agent.command_timeout_s)
        self.tools = ToolRegistry([*(tools.get(n) for n in tools.names), prune_tool(self._prune)])
        self.context = ContextManager(
            policy=policy, config=self.config.context, tool_specs=self.tools.specs(), reserve_tokens=self.config.reserve_tokens
        )
        self._turn = 0
        self._steps = 0
        self._obs = 0
        self._guard = LoopGuard(rounds=self.config.agent.loop_guard_repeats)
        self._state = hashlib.sha256(b"").hexdigest()

    @property
    def events(self) -> list[Any]:
        return self.log.events

    def run(
        self,
        task: str,
        *,
        origin: WorkspaceOrigin | None = None,
        source: str = "cli",
        verify: str | None = None,
        reference_diff: str | None = None,
        test_patch: str | None = None,
        adapter_id: str | None = None,
        meta: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> RunResult:
        """Run the episode to its end. Never raises for what happens inside the episode: the
        outcome is in `RunResult.stop_reason` and in the `Final` event (an unexpected exception
        gives stop reason "error" with its text as the message).

        `session_id` names the session in its `SessionStart` (default: a new id); the other options
        are recorded there too (see `harness.session.SessionStart`)."""
        if self.events:
            raise RuntimeError("an Agent runs one episode; create a new one")
        origin = origin or getattr(self.workspace, "origin", None)
        started = time.perf_counter()
        self._emit(
            SessionStart, schema_version=SCHEMA_VERSION, session_id=session_id or new_session_id(), source=source,
            repo=origin.repo if origin else self.workspace.root,
            base_commit=origin.base_commit if origin else None, base_diff=origin.base_diff if origin else "",
            buffers=dict(origin.buffers) if origin else {}, sandbox=origin.sandbox if origin else "",
            task=task, model=self.policy.spec, adapter_id=adapter_id, config=self.config.to_dict(),
            tools=self.tools.specs(), system_prompt=SYSTEM_PROMPT, verify=verify,
            reference_diff=reference_diff, test_patch=test_patch, meta=meta or {},
            env={k: v for k, v in dataclasses.asdict(origin.env).items() if k != "from_session"}
            if origin and origin.env else None,
        )
        try:
            self._pin_rules()
            stop, message = self._loop()
        except KeyboardInterrupt:
            stop, message = "cancelled", "interrupted"
        except Exception as exc:  # the run must end with a Final event whatever happened
            logger.info("agent run failed: %s: %s", type(exc).__name__, exc)
            logger.debug("agent run failed", exc_info=True)
            stop, message = "error", f"{type(exc).__name__}: {exc}"
        turns = [e for e in self.events if isinstance(e, PolicyTurn)]
        final = self._emit(
            Final, stop_reason=stop, message=message, diff=self._diff(), steps=self._steps,
            prompt_tokens=sum(t.prompt_tokens for t in turns), completion_tokens=sum(t.completion_tokens for t in turns),
            encoded_tokens=sum(t.encoded_tokens for t in turns),
            summaries=sum(isinstance(e, Summary) for e in self.events), duration_s=time.perf_counter() - started,
        )
        path = str(self.log.path) if self.log.path is not None else None
        return RunResult(final.stop_reason, final.message, final.diff, final.steps, path, tuple(self.events))

    def _loop(self) -> tuple[StopReason, str | None]:
        cfg = self.config.agent
        while self._steps < cfg.max_steps:
            if self.cancel is not None and self.cancel.is_set():
                return "cancelled", None
            if self.context.wants_summary(self.events) and not self._summarize():
                return "context_exhausted", f"the summary prompt does not fit {self.context.limit_tokens} tokens"
            view = self.context.view(self.events)
            if view is None:
                return "context_exhausted", f"the smallest context does not fit {self.context.limit_tokens} tokens"
            turn = self._ask(view, kind="action")
            self._steps += 1
            first_obs = self._obs + 1
            finished = self._execute(turn, view.offered)
            if finished is not None:
                return "finish", finished
            cycle = self._guard.step(self._guard_step(turn, first_obs))
            if cycle is not None and cycle.action == "stop":
                return "loop_guard", self._loop_text(LOOP_STOP, cycle)
            if cycle is not None:
                self._observe(turn, f"loop_{turn.turn}", "loop_guard", "", ToolResult(self._loop_text(LOOP_WARNING, cycle)))
        return "max_steps", None

    # -- the parts of a step ---------------------------------------------------------------------

    def _emit(self, cls: type, **fields: Any) -> Any:
        event = self.log.emit(cls, **fields)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception("on_event callback failed for %s", event.type)
        return event

    def _ask(self, view: ContextView, *, kind: str) -> PolicyTurn:
        cfg = self.config.agent
        budget = cfg.max_new_tokens if kind == "action" else cfg.summary_max_new_tokens
        max_new = min(budget, self.policy.context_window - view.tokens)
        c = self.policy.generate(list(view.messages), list(view.tools) or None, max_new_tokens=max_new, kind=kind)
        turn = self._emit(
            PolicyTurn, turn=self._turn, kind=kind, segment=sum(isinstance(e, Summary) for e in self.events),
            text=c.text, tool_calls=[ToolCallRecord(id=t.id, name=t.name, arguments=t.arguments) for t in c.tool_calls],
            parse_errors=list(c.parse_errors), offered_tools=list(view.offered),
            prompt_ids=list(c.prompt_ids) if c.prompt_ids is not None else None,
            completion_ids=list(c.completion_ids) if c.completion_ids is not None else None,
            logprobs=list(c.logprobs) if c.logprobs is not None else None, constrained=c.constrained,
            finish_reason=c.finish_reason, prompt_tokens=c.prompt_tokens or view.tokens,
            completion_tokens=c.completion_tokens, encoded_tokens=c.encoded_tokens, duration_s=c.duration_s,
            tool_call_format=c.tool_call_format,
        )
        self._turn += 1
        return turn

    def _pin_rules(self) -> None:
        """Load the rules files and record them as a `ProjectRules` event (nothing when none)."""
        found = find_rules(self.workspace)
        block = found.block()
        if not block and not found.skipped:
            return
        cap = max(MIN_TOKENS * 2, self.context.summarize_at_tokens // RULES_SHARE)
        shown = block
        if block and self.context.text_tokens(block) > cap:
            note = (f"\n[project rules cut to fit {cap} tokens of the context; read "
                    f"{', '.join(f.path for f in found.pinned)} with read_file for the rest]")
            shown = truncate_tokens(block, max_tokens=cap - self.context.text_tokens(note), count=self.context.text_tokens, keep="head") + note
            logger.warning("project rules cut from %d to %d characters to fit %d tokens", len(block), len(shown), cap)
        self._emit(
            ProjectRules, text=shown, files=[f.path for f in found.pinned], listed=[f.path for f in found.listed],
            skipped=list(found.skipped), chars=len(block) + sum(f.chars - len(f.text) for f in found.pinned),
            truncated=shown != block or any(f.chars > len(f.text) for f in found.pinned),
            tokens=self.context.text_tokens(shown) if shown else 0,
        )

    def _summarize(self) -> bool:
        """A summary turn: the policy's completion becomes a `Summary` event. False when its prompt can't fit.

        A reply with no usable text (`usable_summary`) is never accepted: the policy is asked once
        more with the plain retry request and no tools; if that is unusable too, the harness writes
        the summary itself (`ContextManager.fallback_summary`, recorded as `fallback="mask"`)."""
        view = self.context.summary_prompt(self.events)
        if view is None:
            return False
        turn = self._ask(view, kind="summary")
        text, rejected, fallback = usable_summary(turn.text), 0, None
        if text is None:
            rejected = 1
            retry = self.context.summary_prompt(self.events, retry=True)
            if retry is not None:
                turn = self._ask(retry, kind="summary")
                text = usable_summary(turn.text)
                rejected += text is None
        if text is None:
            logger.warning("no usable summary after %d replies; the harness masks the history instead", rejected)
            text, fallback = self.context.fallback_summary(self.events), "mask"
        finish_reason = turn.finish_reason if fallback is None else "stop"
        fields = self.context.summary_fields(self.events, text, finish_reason=finish_reason)
        self._emit(Summary, **fields, rejected=rejected, fallback=fallback)
        return True

    def _execute(self, turn: PolicyTurn, offered: tuple[str, ...]) -> str | None:
        """Run the turn's calls in order, one observation each; the finish message when it finished."""
        pending = len(turn.parse_errors) + len(turn.tool_calls) or 1
        for i, problem in enumerate(turn.parse_errors):
            self._observe(turn, f"parse_{turn.turn}_{i}", "(malformed)", "", ToolResult(problem, is_error=True, error_kind="malformed"),
                          pending=pending - i)
        if not turn.tool_calls and not turn.parse_errors:
            self._observe(turn, f"none_{turn.turn}", "(no call)", "", ToolResult(NO_CALL, is_error=True, error_kind="no_call"))
        for i, call in enumerate(turn.tool_calls):
            started = time.perf_counter()
            if call.name in self.tools and call.name not in offered:
                message = NOT_OFFERED.format(name=call.name, offered=", ".join(offered))
                result = ToolResult(message, is_error=True, error_kind="not_offered")
            else:
                result = self.tools.call(call.name, call.arguments, self.workspace)
            self._observe(turn, call.id, call.name, call.arguments, result, duration_s=time.perf_counter() - started,
                          pending=len(turn.tool_calls) - i)
            if result.finished and not result.is_error:
                return result.output
        return None

    def _observe(self, turn: PolicyTurn, call_id: str, name: str, arguments: str, result: ToolResult, *,
                 duration_s: float = 0.0, pending: int = 1) -> None:
        """Record one observation, its output cut to the token room the context has for it."""
        self._obs += 1
        header = observation_header(self._obs, name, arguments)
        budget = self.context.observation_budget(self.events, header=header, pending=pending)
        output = truncate_tokens(result.output, max_tokens=budget, count=self.context.text_tokens)
        self._emit(
            Observation, turn=turn.turn, obs_id=self._obs, call_id=call_id, name=name, arguments=arguments,
            output=output, is_error=result.is_error, error_kind=result.error_kind, duration_s=duration_s,
        )

    def _guard_step(self, turn: PolicyTurn, first_obs: int) -> Step:
        """The turn as the loop guard sees it; the workspace digest is taken again only after a
        call that may change the workspace."""
        if any(c.name not in READ_ONLY_TOOLS for c in turn.tool_calls):
            self._state = hashlib.sha256(self._diff().encode("utf-8", "replace")).hexdigest()
        outputs = tuple(e.output for e in self.events if isinstance(e, Observation) and e.obs_id >= first_obs)
        return Step(_signature(turn), outputs, self._state)

    def _loop_text(self, template: str, cycle: Cycle) -> str:
        what = "call" if cycle.period == 1 else f"cycle of {cycle.period} calls"
        how = " and leave the workspace as it was" if cycle.reason == "same_state" else " with the same results"
        rounds = self.config.agent.loop_guard_repeats
        return template.format(steps=cycle.period * rounds, what=what, rounds=rounds, calls=cycle.calls(), how=how)

    def _prune(self, ids: list[int]) -> ToolResult:
        """The body of the `prune` tool: records a `Prune` event for the ids that are visible now."""
        visible = self.context.visible_obs_ids(self.events)
        valid = sorted(set(ids) & set(visible))
        if not valid:
            raise ToolError(f"nothing to prune among {ids}; observations shown in full: {visible}")
        before = self.context.tokens(self.events)
        probe = Prune(seq=len(self.events), ts=0.0, turn=self._turn - 1, obs_ids=valid, tokens_before=before, tokens_after=0)
        after = self.context.tokens([*self.events, probe])
        self._emit(Prune, turn=self._turn - 1, obs_ids=valid, tokens_before=before, tokens_after=after)
        ignored = sorted(set(ids) - set(valid))
        note = f"; ignored {ignored} (unknown, summarized or already pruned)" if ignored else ""
        return ToolResult(f"pruned observations {valid}: context {before} -> {after} tokens{note}")

    def _diff(self) -> str:
        try:
            return self.workspace.diff()
        except Exception:
            logger.exception("workspace diff failed")
            return ""
