"""The loop guard: catches a policy that goes round in a short cycle of calls.

A step is the action turn's calls (canonical arguments), the outputs they got, and a digest of the
workspace after them. The last `rounds * p` steps form a cycle of period `p` (1 <= p <=
`max_period`) when their calls repeat with period p and either the outputs repeat too (the same
results again) or the workspace is back where it was at the same point of each round (e.g.
`write_file app.py "x = 1"` then `edit_file app.py "x = 1" -> "x = 2"`, again and again). The
first time a cycle is seen the agent shows the policy a warning; when the cycle is still there a
full period later, the run stops. A step outside any cycle clears the warning. So a cycle of
period p stops at most `p * (rounds + 1)` steps after it began, or one round later when its
first round started from another workspace state (the first `write_file` of the cycle above);
when the context changes under a cycle (the hard limit starts refusing its calls), the count
starts again from that change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

MAX_PERIOD = 4
"""Longest cycle (in action turns) the guard looks for."""


@dataclass(frozen=True)
class Step:
    """One action turn as the guard sees it.

    Attributes:
        calls: ((tool name, canonical arguments), ...), or with the turn's text when a call could
            not be parsed (two different broken calls share their error message).
        outputs: the observations' outputs, in order.
        state: a digest of the workspace after the turn (its diff against the start).
    """

    calls: tuple[Any, ...]
    outputs: tuple[str, ...]
    state: str


@dataclass(frozen=True)
class Cycle:
    """A cycle found: what to do, its period, its steps (one round), and why it is a loop."""

    action: Literal["warn", "stop"]
    period: int
    steps: tuple[Step, ...]
    reason: Literal["same_results", "same_state"]

    def calls(self) -> str:
        """The repeating calls, e.g. `write_file {"path": "app.py", ...}, edit_file {...}`."""
        def one(step: Step) -> str:
            calls = step.calls[0] if step.calls and isinstance(step.calls[-1], str) else step.calls
            names = [f"{name} {args if len(args) <= 80 else args[:77] + '...'}" for name, args in calls]
            return " + ".join(names) or "(a reply without a valid call)"

        return ", ".join(one(s) for s in self.steps)


class LoopGuard:
    """Feed it each action turn with `step`; it answers None, or a `Cycle` to warn about or stop on.

    Args:
        rounds: rounds of a cycle before the warning (`AgentConfig.loop_guard_repeats`, >= 2).
        max_period: longest cycle looked for.
    """

    def __init__(self, *, rounds: int, max_period: int = MAX_PERIOD) -> None:
        self.rounds = rounds
        self.max_period = max_period
        self.history: list[Step] = []
        self._warned_at: int | None = None

    def _cycle(self) -> tuple[int, Literal["same_results", "same_state"]] | None:
        h = self.history
        for p in range(1, self.max_period + 1):
            n = p * self.rounds
            if len(h) < n:
                return None
            w = h[-n:]
            if any(w[i].calls != w[i + p].calls for i in range(n - p)):
                continue
            if all(w[i].outputs == w[i + p].outputs for i in range(n - p)):
                return p, "same_results"
            if all(w[i].state == w[i + p].state for i in range(n - p)):
                return p, "same_state"
        return None

    def step(self, step: Step) -> Cycle | None:
        """Record one action turn; a `Cycle` with action "warn" the first time a cycle is seen,
        "stop" when it is still going a full period after the warning, else None."""
        self.history.append(step)
        found = self._cycle()
        if found is None:
            self._warned_at = None
            return None
        period, reason = found
        one_round = tuple(self.history[-period:])
        if self._warned_at is None:
            self._warned_at = len(self.history)
            return Cycle("warn", period, one_round, reason)
        if len(self.history) - self._warned_at >= period:
            return Cycle("stop", period, one_round, reason)
        return None
