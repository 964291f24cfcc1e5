"""The words the harness says to the policy: the system prompt, the summary request, and the
templates of the context after a summary. One place, so that RL and the editor use the same text."""

from __future__ import annotations

SYSTEM_PROMPT = """\
You are recap, a careful software engineer working in a copy of the user's repository.
Work through the tools you are offered: read and search before you edit, make the smallest
change that solves the task, run the tests or the command that shows the problem, and look at
the result before you go on. One tool call per turn is fine.
Every tool result starts with a header like `[obs 7] read_file {...}`; the number is its id.
When the context is nearly full, only `prune` and `finish` are offered: call `prune` with the ids
of results you no longer need. Earlier work may be replaced by a summary you wrote yourself;
trust it. When the task is done (or cannot be done), call `finish` with a short message saying
what you changed and why."""

SUMMARY_REQUEST = """\
The context is nearly full. Write summary {index} of the work so far; it will replace the history
above, so write what an engineer continuing this task needs, and nothing else:
1. Goal: the task and every constraint the user gave.
2. Files: each file read or changed, and why.
3. Tried: what was tried and what failed, with the exact error lines.
4. State: what works now and what is left.
5. Next step: the very next action to take.
Answer in plain text, without tool calls."""

SUMMARY_RETRY = """\
Your reply held no summary text. Write summary {index} now as plain text (no tool calls; no tools
are offered): the goal, the files read or changed, what was tried and failed, the state, the next
step."""

FALLBACK_SUMMARY = """\
(No usable summary was written; the harness kept the calls made, with their outputs masked.)
{earlier}Calls so far, each with the first line of its result:
{calls}"""

LOOP_WARNING = """\
Loop guard: your last {steps} turns repeat the same {what} {rounds} times ({calls}){how}. \
This is not making progress. Do something different (read the error, try another approach) or call \
`finish`; if the cycle goes on, the run stops."""

LOOP_STOP = "stopped by the loop guard: the same {what} kept repeating{how} after a warning: {calls}"

SUMMARY_HEADER = "Summary {index} of the work so far{chain}:"
SUMMARY_CHAIN = " (it folds in {earlier} earlier summar{plural})"


def summary_request(index: int) -> str:
    """The user message that asks the policy for summary number `index` (1-based)."""
    return SUMMARY_REQUEST.format(index=index)


def summary_retry(index: int) -> str:
    """The plain request of the second (and last) attempt at summary `index`."""
    return SUMMARY_RETRY.format(index=index)


def summary_message(index: int, text: str) -> str:
    """The content of the user message that stands in for the replaced history."""
    earlier = index - 1
    chain = SUMMARY_CHAIN.format(earlier=earlier, plural="y" if earlier == 1 else "ies") if earlier else ""
    return SUMMARY_HEADER.format(index=index, chain=chain) + "\n" + text


def observation_header(obs_id: int, name: str, arguments: str) -> str:
    """`[obs 7] read_file {"path":"x.py"}`: what `prune(ids)` refers to (arguments cut at 120 chars)."""
    args = arguments if len(arguments) <= 120 else arguments[:117] + "..."
    return f"[obs {obs_id}] {name} {args}".rstrip()


def pruned_stub(header: str, chars: int) -> str:
    return f"{header} (pruned: {chars} characters dropped)"


def masked_stub(header: str, chars: int) -> str:
    return f"{header} (old output omitted: {chars} characters)"


NO_CALL = (
    "No tool call found in your reply. Call one of the offered tools; "
    "call `finish` with a message when you are done."
)
NOT_OFFERED = "{name} is not offered now; the tools offered are: {offered}."
