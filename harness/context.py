"""The context manager: the next prompt as a pure function of the session events so far.

    system prompt + the pinned project rules, the task, [the latest self-summary], the turns since
    (assistant message, then one message per observation, each headed `[obs N] name {args}`)

Pinned, never replaced: the system prompt, the project rules (`harness.rules`, a `ProjectRules`
event) and the task. Cut, never dropped whole: each observation is cut to a token budget when it
is made (`observation_budget`, `harness.truncate.truncate_tokens`, head and tail kept), so that
the prompt after it, and the summary prompt after that, still fit the window with the
observation in them.

What replaces what is recorded in the log, never done in place: a `Summary` event hides every
event up to its `replaces_through_seq` (it folds in the summaries before it); a `Prune` event turns
its observations into one-line stubs. The views of the baseline strategies ("drop_oldest",
"mask") are computed, not recorded.

Budgets, in tokens counted exactly with `policy.count_tokens` (chat template and tool specs
included): `limit = context_window - reserve`, `summarize_at <= hard_limit <= limit` after
capping (a cap logs a warning). Guarantee: `view()` and `summary_prompt()` never return a prompt above `limit`; when even
the smallest context (system prompt, task, latest summary, no turns) does not fit they return
None and the agent stops with `context_exhausted`.

Sources: self-summarization as in Cursor's Composer and ReSum/SUPO (summary turns as trajectory
segments); `prune` under a hard budget as in Chroma Context-1; observation masking as in
OpenHands / Lindenbauer et al. 2025 ("The Complexity Trap").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.config import ContextConfig, resolve_tokens
from harness.errors import ConfigError
from harness.prompts import (
    FALLBACK_SUMMARY,
    masked_stub,
    observation_header,
    pruned_stub,
    summary_message,
    summary_request,
    summary_retry,
)
from harness.session import Observation, PolicyTurn, ProjectRules, Prune, Summary, UserMessage
from harness.truncate import MIN_TOKENS
from harness.tools.base import Tool, ToolResult
from harness.types import Message, Policy, ToolCall, assistant_message, tool_message

logger = logging.getLogger(__name__)

RESTRICTED_TOOLS = ("prune", "finish")
CUT_MARKER = "\n[summary cut to fit the context]"


class PruneParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[int] = Field(description="ids of earlier tool results to drop, from their `[obs N]` headers")


def prune_tool(apply: Callable[[list[int]], ToolResult]) -> Tool:
    """The `prune(ids)` tool (Chroma Context-1); `apply` records the prune (the agent owns the log)."""
    return Tool(
        name="prune",
        description="Drop earlier tool results you no longer need from the context, by the ids in their "
        "`[obs N]` headers; each leaves a one-line stub.",
        params=PruneParams,
        fn=lambda params, _workspace: apply(params.ids),
    )


@dataclass(frozen=True)
class ContextView:
    """One prompt ready for the policy.

    Attributes:
        messages: chat messages (system, task, summary, turns).
        tools: OpenAI specs offered with it (empty for a summary turn).
        offered: names of the offered tools.
        tokens: exact prompt length (`policy.count_tokens(messages, tools)`).
        dropped_turns: oldest turns left out to make it fit.
        masked_turns: oldest turns whose observations were masked ("mask" strategy).
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    offered: tuple[str, ...]
    tokens: int
    dropped_turns: int = 0
    masked_turns: int = 0


@dataclass(frozen=True)
class _State:
    """The events, sorted out: what the current view is made of."""

    system: str
    rules: str
    task: str
    summary: Summary | None
    summaries: int
    turns: tuple[tuple[Any, ...], ...]
    pruned: frozenset[int]
    actions_since_summary: int


def _parse(events: Sequence[Any]) -> _State:
    start = events[0]
    summaries = [e for e in events if isinstance(e, Summary)]
    summary = summaries[-1] if summaries else None
    boundary = summary.replaces_through_seq if summary else start.seq
    turns: list[list[Any]] = []
    pruned: set[int] = set()
    actions = 0
    rules = ""
    for e in events[1:]:
        if isinstance(e, ProjectRules):
            rules = e.text
        if isinstance(e, Prune):
            pruned.update(e.obs_ids)
        if isinstance(e, PolicyTurn) and e.kind == "action" and (summary is None or e.seq > summary.seq):
            actions += 1
        if e.seq <= boundary:
            continue
        if isinstance(e, UserMessage) or (isinstance(e, PolicyTurn) and e.kind == "action"):
            turns.append([e])
        elif isinstance(e, Observation):
            if not turns:
                turns.append([])
            turns[-1].append(e)
    return _State(
        system=start.system_prompt,
        rules=rules,
        task=start.task,
        summary=summary,
        summaries=len(summaries),
        turns=tuple(tuple(t) for t in turns),
        pruned=frozenset(pruned),
        actions_since_summary=actions,
    )


def _render_turn(turn: Sequence[Any], pruned: frozenset[int], masked: bool) -> list[Message]:
    out: list[Message] = []
    call_ids: set[str] = set()
    for e in turn:
        if isinstance(e, PolicyTurn):
            # the exact completion text (tool-call markup included for local models), so that a
            # re-rendered prompt extends the sampled one token for token (KV reuse, training)
            calls = [ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in e.tool_calls]
            call_ids = {c.id for c in calls}
            out.append(assistant_message(e.text, calls))
        elif isinstance(e, UserMessage):
            out.append({"role": "user", "content": e.content})
        elif isinstance(e, Observation):
            header = observation_header(e.obs_id, e.name, e.arguments)
            if e.obs_id in pruned:
                body = pruned_stub(header, len(e.output))
            elif masked:
                body = masked_stub(header, len(e.output))
            else:
                body = header + "\n" + e.output
            # An observation that answers no call (malformed reply, no call) is a user message, so that
            # OpenAI-compatible servers see no orphan tool message.
            out.append(tool_message(e.call_id, e.name, body) if e.call_id in call_ids else {"role": "user", "content": body})
    return out


class ContextManager:
    """Builds prompts for one policy under one `ContextConfig`.

    Args:
        policy: gives `context_window` and the exact `count_tokens`.
        config: the context section of the run's config.
        tool_specs: OpenAI specs of every tool of the run, `prune` included.
        reserve_tokens: room kept free for the completion.
    Raises:
        ConfigError: the reserve leaves no room for a prompt.
    """

    def __init__(self, *, policy: Policy, config: ContextConfig, tool_specs: Sequence[dict[str, Any]], reserve_tokens: int) -> None:
        window = policy.context_window
        self.policy = policy
        self.config = config
        self.limit_tokens = window - reserve_tokens
        if self.limit_tokens <= 0:
            raise ConfigError(
                f"reserve of {reserve_tokens} tokens leaves no room in a {window}-token window; "
                "lower context.reserve_tokens or agent.max_new_tokens"
            )
        self.summarize_at_tokens = self._budget("summarize_at", config.summarize_at, window, reserve_tokens)
        self.hard_limit_tokens = self._budget("hard_limit", config.hard_limit, window, reserve_tokens)
        self.normal = tuple(s for s in tool_specs if s["function"]["name"] != "prune")
        self.restricted = tuple(s for s in tool_specs if s["function"]["name"] in RESTRICTED_TOOLS)
        self._counts: dict[str, int] = {}
        self._empty: int | None = None

    def _budget(self, name: str, value: float, window: int, reserve: int) -> int:
        """A budget in tokens, capped at `limit_tokens`; a cap is announced, never silent (a warning
        for a token count, which the user meant literally; info for a fraction of a small window)."""
        tokens = resolve_tokens(value, window)
        if tokens > self.limit_tokens:
            (logger.warning if value > 1 else logger.info)("context.%s=%s is %d tokens, above what fits the %d-token window of %s with %d kept "
                           "for the reply; using %d (pass --context-window if the model's window is larger)",
                           name, value, tokens, window, self.policy.spec, reserve, self.limit_tokens)
        return min(tokens, self.limit_tokens)

    # -- rendering and counting ------------------------------------------------------------------

    def _messages(self, st: _State, *, drop: int = 0, masked: int = 0, summary: Summary | None = None) -> list[Message]:
        summary = summary or st.summary
        system = f"{st.system}\n\n{st.rules}" if st.rules else st.system
        msgs: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": st.task}]
        if summary is not None:
            msgs.append({"role": "user", "content": summary_message(summary.index, summary.text)})
        for i in range(drop, len(st.turns)):
            msgs += _render_turn(st.turns[i], st.pruned, masked=i < masked)
        return msgs

    def _count(self, messages: Sequence[Message], specs: Sequence[dict[str, Any]]) -> int:
        """Exact prompt tokens, memoized: one step asks for the same prompt several times, and a
        count (chat template + tokenizer) costs tens of milliseconds on long prompts."""
        key = json.dumps([getattr(self.policy, "count_epoch", 0), messages, specs], sort_keys=True, default=str)
        if key not in self._counts:
            if len(self._counts) >= 256:
                self._counts.pop(next(iter(self._counts)))
            self._counts[key] = self.policy.count_tokens(messages, list(specs) or None)
        return self._counts[key]

    def _fit(self, st: _State, budget: int, *, masked: int, specs: Sequence[dict[str, Any]], extra: Sequence[Message] = ()) -> tuple[int, list[Message], int] | None:
        """Fewest oldest turns to drop so the prompt is <= budget (binary search: dropping is monotone)."""
        def measure(drop: int) -> tuple[list[Message], int]:
            msgs = self._messages(st, drop=drop, masked=masked) + list(extra)
            return msgs, self._count(msgs, specs)

        lo, hi = 0, len(st.turns)
        if measure(hi)[1] > budget:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if measure(mid)[1] <= budget:
                hi = mid
            else:
                lo = mid + 1
        msgs, tokens = measure(lo)
        return lo, msgs, tokens

    def text_tokens(self, text: str) -> int:
        """Tokens `text` adds as the content of one message, in the policy's own count."""
        if self._empty is None:
            self._empty = self.policy.count_tokens([{"role": "user", "content": ""}], None)
        return self.policy.count_tokens([{"role": "user", "content": text}], None) - self._empty

    def observation_budget(self, events: Sequence[Any], *, header: str, pending: int = 1) -> int:
        """Tokens the next observation's output may take (at least `truncate.MIN_TOKENS`).

        `events` end with the action turn (and any observations of it so far); `pending` is the
        number of its calls still to observe, this one included, which share the room. The room
        is what keeps both the next action prompt (current view, all tools) and the summary
        prompt (current view plus the summary request) within `limit_tokens` with the
        observation in them (for strategies other than "summary", and once summaries are used
        up, the current view stands for the history); and one observation takes at most half of
        `summarize_at`, so that it can stay verbatim after a summary.
        """
        st = _parse(events)
        msgs = self._messages(st)
        if self.config.strategy != "summary" or st.summaries >= self.config.max_summaries:
            view = self.view(events)  # no summary will come: what the next prompt keeps is the view
            msgs = list(view.messages) if view is not None else msgs
        msgs = msgs + [{"role": "user", "content": header + "\n"}]
        request = [{"role": "user", "content": summary_request(st.summaries + 1)}]
        used = max(self._count(msgs, self.normal), self._count(msgs + request, ()))
        room = (self.limit_tokens - used - 8) // max(pending, 1)
        return max(MIN_TOKENS, min(room, self.summarize_at_tokens // 2))

    def fallback_summary(self, events: Sequence[Any]) -> str:
        """The harness's own summary when the policy wrote none it could use (observation
        masking): the earlier summary, then each call since with the first line of its result."""
        st = _parse(events)
        earlier = f"Earlier summary:\n{st.summary.text}\n" if st.summary is not None else ""
        lines = []
        for turn in st.turns:
            for e in turn:
                if isinstance(e, Observation):
                    first = e.output.strip().split("\n", 1)[0][:160]
                    more = f" ({len(e.output):,} chars)" if len(e.output) > len(first) else ""
                    lines.append(f"{observation_header(e.obs_id, e.name, e.arguments)} -> {first}{more}")
                elif isinstance(e, UserMessage):
                    lines.append(f"user: {e.content[:160]}")
        return FALLBACK_SUMMARY.format(earlier=earlier, calls="\n".join(lines) or "(none)")

    def tokens(self, events: Sequence[Any]) -> int:
        """Length of the unmanaged prompt (every turn since the last summary, all normal tools)."""
        return self._count(self._messages(_parse(events)), self.normal)

    def visible_obs_ids(self, events: Sequence[Any]) -> list[int]:
        """Ids of observations shown in full now (neither summarized away nor pruned)."""
        st = _parse(events)
        return [e.obs_id for t in st.turns for e in t if isinstance(e, Observation) and e.obs_id not in st.pruned]

    # -- the prompts -----------------------------------------------------------------------------

    def view(self, events: Sequence[Any]) -> ContextView | None:
        """The next action prompt, or None when even the smallest context is above `limit_tokens`."""
        st = _parse(events)
        strategy = self.config.strategy
        drop, masked, specs = 0, 0, self.normal
        msgs = self._messages(st)
        tokens = self._count(msgs, specs)
        if tokens > self.summarize_at_tokens and strategy == "mask":
            masked = max(0, len(st.turns) - self.config.keep_recent)
            msgs = self._messages(st, masked=masked)
            tokens = self._count(msgs, specs)
        if tokens > self.summarize_at_tokens and strategy == "drop_oldest":
            fitted = self._fit(st, self.summarize_at_tokens, masked=0, specs=specs)
            drop, msgs, tokens = fitted or (drop, msgs, tokens)
        if tokens > self.hard_limit_tokens and strategy == "summary":
            specs = self.restricted
            tokens = self._count(msgs, specs)
        if tokens > self.limit_tokens and strategy != "none":
            fitted = self._fit(st, self.limit_tokens, masked=masked, specs=specs)
            drop, msgs, tokens = fitted or (drop, msgs, tokens)
        if tokens > self.limit_tokens:
            logger.info("no prompt fits: %d tokens > limit %d even without turns", tokens, self.limit_tokens)
            return None
        if drop:
            logger.debug("dropped the %d oldest turns to fit (%d tokens)", drop, tokens)
        offered = tuple(s["function"]["name"] for s in specs)
        return ContextView(tuple(msgs), tuple(specs), offered, tokens, dropped_turns=drop, masked_turns=masked)

    def wants_summary(self, events: Sequence[Any]) -> bool:
        """True when a summary turn should come first: strategy "summary", under the cap, at least
        one action since the last summary, the unmanaged prompt above `summarize_at`, and room
        below `summarize_at` for a summary at all."""
        if self.config.strategy != "summary":
            return False
        st = _parse(events)
        if st.summaries >= self.config.max_summaries or st.actions_since_summary == 0:
            return False
        if self._count(self._messages(st), self.normal) <= self.summarize_at_tokens:
            return False
        budget, room = self._summary_budget(st)
        if room <= 0:
            logger.warning("no room for a summary: the fixed prompt (system, task, tool specs) takes %d tokens, "
                           "summarize_at is %d; raise context.summarize_at", budget, self.summarize_at_tokens)
        return room > 0

    def _summary_budget(self, st: _State) -> tuple[int, int]:
        """(token budget of the post-summary context, room for the summary in it).

        The summary and the turns kept with it may take half the room between the fixed part
        (system prompt, task, summary header) and `summarize_at`, leaving the other half for work.
        """
        header = Summary(seq=0, ts=0.0, index=st.summaries + 1, turn=0, text="", replaces_through_seq=0, tokens_before=0, tokens_after=0)
        base = self._count(self._messages(st, drop=len(st.turns), summary=header), self.normal)
        room = (self.summarize_at_tokens - base) // 2
        return base + room, room

    def summary_prompt(self, events: Sequence[Any], *, retry: bool = False) -> ContextView | None:
        """The prompt of a summary turn (the current view plus the summary request, no tools),
        oldest turns dropped until it fits; None when it cannot fit. `retry` asks with the plain
        retry request (`prompts.SUMMARY_RETRY`) after an unusable reply."""
        st = _parse(events)
        ask = summary_retry if retry else summary_request
        request = [{"role": "user", "content": ask(st.summaries + 1)}]
        fitted = self._fit(st, self.limit_tokens, masked=0, specs=(), extra=request)
        if fitted is None:
            return None
        drop, msgs, tokens = fitted
        return ContextView(tuple(msgs), (), (), tokens, dropped_turns=drop)

    def summary_fields(self, events: Sequence[Any], text: str, *, finish_reason: str) -> dict[str, Any]:
        """Fields of the `Summary` event for the summary turn that ends `events`.

        The text is cut (and `truncated` set) when it would not fit its budget or was cut by the
        completion limit; the most recent `keep_recent` turns that still fit stay verbatim.
        """
        st = _parse(events)
        index = st.summaries + 1
        turn_event = events[-1]
        budget, _ = self._summary_budget(st)
        tokens_before = self._count(self._messages(st), self.normal)
        truncated = finish_reason == "length"

        def candidate(body: str, through: int) -> Summary:
            return Summary(seq=len(events), ts=0.0, index=index, turn=turn_event.turn, text=body,
                           replaces_through_seq=through, tokens_before=tokens_before, tokens_after=0, truncated=truncated)

        def measure(body: str, through: int) -> int:
            return self.tokens([*events, candidate(body, through)])

        text = text.strip()
        if measure(text, turn_event.seq) > budget:
            truncated = True
            lo, hi = 0, len(text)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if measure(text[:mid] + CUT_MARKER, turn_event.seq) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            text = text[:lo] + CUT_MARKER
        through, tokens_after = turn_event.seq, measure(text, turn_event.seq)
        for kept in range(min(self.config.keep_recent, len(st.turns)), 0, -1):
            first = st.turns[len(st.turns) - kept][0].seq
            tokens = measure(text, first - 1)
            if tokens <= budget:
                through, tokens_after = first - 1, tokens
                break
        return {"index": index, "turn": turn_event.turn, "text": text, "replaces_through_seq": through,
                "tokens_before": tokens_before, "tokens_after": tokens_after, "truncated": truncated}
