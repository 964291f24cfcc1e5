"""Outcome rewards and penalties: small pure functions of a frozen rollout record.

Each reward is `fn(record, config) -> float | None`: a value in the range its docstring states, or
None when it does not apply to this rollout (no verify command, no editor verdict, ...). The
function's name is its metric key (`reward/<name>`) and its key in `RewardConfig.weights`. The
episode reward is the weighted sum of the values that are not None (`total_reward`).

The outcome is binary where it can be (verify passes, the user accepts), as in DeepSWE (Luo et al.
2025) and SkyRL-SWE; partial credit (similarity to a reference diff) is used only for sessions that
have no verify command, and only above `similarity_floor`. Penalties target the known reward hacks
of coding agents: failing tool calls (as Composer penalizes bad calls), editing the tests or the
verify script instead of the code, and reading the answer from git history or the network. (The
workspace's git metadata is also sealed to the start commit by the shadow backend; the penalty
makes trying visible and costly.) An episode is never rewarded for changing *something*: a wrong
edit and no edit at all are the same failure.

Ordering with the default weights (higher rank = higher total; `tests/rl/test_rewards.py` checks it):

    rank  outcome                                                        total
    1     verified success (verify passes, or the user accepted/kept)   1.0
    2     success with some failing tool calls                           1.0 - 0.1 x error fraction
    3     failure, clean: no edit or a wrong edit, no failing calls      0.0
    4     failure with failing tool calls                                down to -0.1
    5     failure cut by the length budget (`overlong="penalize"`)       -0.5 (else masked)
    6     any episode that edits the tests / the verify script           <= 2.0 - 2.5 < 0
    (-0.5 on top of any of these for reading the answer from git history or the network)

Why: the outcome dominates (a success outranks every failure); a wrong edit never outranks a clean
failure (rank 3 holds both), so the policy is not taught "edit something, anything"; an edit to the
tests outweighs the largest outcome sum (verify + editor verdict = 2.0), so a hacked pass ranks
below an honest failure.

Length cuts: an episode whose verify passes (or that the user accepted) is a success whatever its
stop reason, `finish` or not. An episode that failed after being cut by the length budget
(`context_exhausted`) is, by default, masked out of the update (overlong filtering, DAPO, Yu et al.
2025) rather than given a reward, since it never had the room to finish; the step limit
(`max_steps`) is part of the task and scored by outcome like any other ending.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from harness.errors import ConfigError
from harness.session import Final, Observation, PolicyTurn, Score, SessionStart, Verdict

OverlongMode = Literal["mask", "penalize", "ignore"]

TEST_FILE_GLOBS: tuple[str, ...] = (
    "test_*.py",
    "*_test.py",
    "tests/*",
    "test/*",
    "*/tests/*",
    "*/test/*",
    "conftest.py",
    "*/conftest.py",
    "*.test.js",
    "*.test.ts",
    "*_test.go",
    "pytest.ini",
    "tox.ini",
)
"""Paths counted as test files (fnmatch patterns over workspace-relative paths)."""

ANSWER_SOURCE_PATTERNS: tuple[str, ...] = (
    r"\bgit\s+(?:-\S+\s+)*(?:log|show|reflog|blame|cat-file|rev-list|fsck|checkout|restore|switch|stash|fetch|pull|clone|format-patch|whatchanged)\b",
    r"\bgit\s+(?:-\S+\s+)*diff\s+\S*(?:HEAD|\.\.|@\{)",
    r"(?:^|\s|/)\.git(?:/|\s|$)",
    r"\b(?:curl|wget)\b",
    r"\bpip\s+(?:download|install)\b",
)
"""Regular expressions over commands (and read paths) that look for the answer instead of working:
git history, the sealed `.git` directory, the network, a fresh copy of a package."""


@dataclass(frozen=True)
class RolloutRecord:
    """What the rewards see of one finished rollout (frozen; build it with `record_from_events`).

    Attributes:
        stop_reason: `Final.stop_reason` ("finish", "max_steps", ...).
        diff: the final diff of the workspace against the start state.
        changed_files: workspace-relative paths the diff touches.
        verify: the session's verify command, or None.
        verify_passed: its outcome in the rollout's workspace, or None when not run.
        tests_passed, tests_failed: counts parsed from its output when known.
        reference_diff: the known-good diff, or None.
        diff_similarity: similarity of `diff` to `reference_diff` in [0, 1], or None.
        verdict: the editor user's verdict ("accepted", "rejected", "kept", "reverted") or None.
        tool_calls: tool calls attempted (well-formed or not).
        tool_errors: observations with `is_error` (malformed, unknown tool, bad arguments, failures).
        commands: shell commands and read paths the policy asked for, in order.
        steps: policy turns taken.
        summaries: self-summaries written.
        sampled_tokens: completion tokens sampled.
    """

    stop_reason: str
    diff: str
    changed_files: tuple[str, ...]
    verify: str | None = None
    verify_passed: bool | None = None
    tests_passed: int | None = None
    tests_failed: int | None = None
    reference_diff: str | None = None
    diff_similarity: float | None = None
    verdict: str | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    commands: tuple[str, ...] = ()
    steps: int = 0
    summaries: int = 0
    sampled_tokens: int = 0


@dataclass(frozen=True)
class RewardConfig:
    """Weights and switches of the reward.

    Attributes:
        weights: reward name -> weight in the total; names must be in `REWARDS`.
        verify_fraction: score verify as the fraction of tests passing (when counts are known)
            instead of 1/0.
        similarity_floor: diff similarity below this counts 0 (partial credit only for a diff
            close to the reference, not for touching the same file).
        overlong: what to do with a failed episode cut by the length budget (`context_exhausted`):
            "mask" (leave it out of the update: reward None), "penalize" (the `overlong` penalty
            applies), "ignore" (scored like any failure). Successes are never masked or penalized.
        test_file_globs: what counts as a test file for `edit_tests_penalty`.
        answer_source_patterns: regexes for `answer_source_penalty`.
    """

    weights: dict[str, float] = field(
        default_factory=lambda: {
            "verify_pass": 1.0,
            "diff_similarity": 1.0,
            "editor_outcome": 1.0,
            "tool_error_penalty": 0.1,
            "edit_tests_penalty": 2.5,
            "overlong_penalty": 0.5,
            "answer_source_penalty": 0.5,
        }
    )
    verify_fraction: bool = False
    similarity_floor: float = 0.5
    overlong: OverlongMode = "mask"
    test_file_globs: tuple[str, ...] = TEST_FILE_GLOBS
    answer_source_patterns: tuple[str, ...] = ANSWER_SOURCE_PATTERNS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.weights) - set(REWARDS))
        if unknown:
            raise ConfigError(f"unknown reward(s) {unknown} in weights; known: {', '.join(REWARDS)}")
        if self.overlong not in ("mask", "penalize", "ignore"):
            raise ConfigError(f"overlong must be 'mask', 'penalize' or 'ignore', not {self.overlong!r}")
        if not 0.0 <= self.similarity_floor <= 1.0:
            raise ConfigError(f"similarity_floor must be in [0, 1], not {self.similarity_floor!r}")
        for pattern in self.answer_source_patterns:
            re.compile(pattern)


# ---- outcome rewards -------------------------------------------------------------------------


def verify_pass(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """1.0 when the verify command passed, else 0.0; with `verify_fraction`, the fraction of tests
    passing when the counts are known. Range [0, 1]. None without a verify command or result."""
    if r.verify is None or r.verify_passed is None:
        return None
    if cfg.verify_fraction and r.tests_passed is not None and r.tests_failed is not None:
        total = r.tests_passed + r.tests_failed
        if total > 0:
            return r.tests_passed / total
    return 1.0 if r.verify_passed else 0.0


def diff_similarity(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """Similarity of the final diff to the reference diff, in [0, 1], counted 0 below
    `cfg.similarity_floor`. Only for sessions without a verify command (a verified outcome is the
    better signal); None otherwise or when unknown."""
    if r.verify is not None or r.reference_diff is None or r.diff_similarity is None:
        return None
    value = min(1.0, max(0.0, float(r.diff_similarity)))
    return value if value >= cfg.similarity_floor else 0.0


_VERDICT_VALUE = {"accepted": 1.0, "kept": 1.0, "rejected": -1.0, "reverted": -1.0}


def editor_outcome(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """The editor user's verdict: accepted or kept +1.0, rejected or later reverted -1.0.
    Range [-1, 1]. None for sessions without a verdict (mined, tasks, fresh rollouts)."""
    if r.verdict is None:
        return None
    return _VERDICT_VALUE[r.verdict]


# ---- penalties ---------------------------------------------------------------------------------


def tool_error_penalty(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """Minus the fraction of tool calls that were malformed, unknown, badly argued or failed.
    Range [-1, 0]; a turn with no parsable call counts as one failed call."""
    if r.tool_calls == 0 and r.tool_errors == 0:
        return 0.0
    return -min(1.0, r.tool_errors / max(r.tool_calls, r.tool_errors, 1))


def _verify_paths(verify: str | None) -> set[str]:
    if not verify:
        return set()
    try:
        words = shlex.split(verify)
    except ValueError:
        words = verify.split()
    paths = set()
    for word in words:
        word = word.split("::", 1)[0]
        if "/" in word or re.search(r"\.(py|sh|js|ts|toml|ini|cfg)$", word):
            paths.add(word.removeprefix("./"))
    return paths


def edit_tests_penalty(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """-1.0 when the diff touches a test file (`test_file_globs`) or a file the verify command
    names (the verify script, the test module), else 0.0. Range {-1, 0}."""
    protected = _verify_paths(r.verify)
    for path in r.changed_files:
        if path in protected or any(fnmatch.fnmatch(path, g) for g in cfg.test_file_globs):
            return -1.0
    return 0.0


OVERLONG_STOPS = ("context_exhausted",)
"""Stop reasons that mean "cut by the length budget" (the step limit is not one: see the module)."""


def succeeded(r: RolloutRecord) -> bool:
    """True when the episode reached the goal: its verify command passed, or the editor user
    accepted (or kept) its change; whether the policy called `finish` does not matter."""
    return r.verify_passed is True or _VERDICT_VALUE.get(r.verdict or "", 0.0) > 0


def _cut_short(r: RolloutRecord) -> bool:
    return r.stop_reason in OVERLONG_STOPS and not succeeded(r)


def overlong_penalty(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """-1.0 when a failed episode was cut by the length budget and `overlong="penalize"`, else 0.0.
    Range {-1, 0}. (With the default `overlong="mask"` such an episode is left out instead.)"""
    return -1.0 if cfg.overlong == "penalize" and _cut_short(r) else 0.0


def answer_source_penalty(r: RolloutRecord, cfg: RewardConfig) -> float | None:
    """-1.0 when any command or read path matches `answer_source_patterns` (git history, the
    `.git` directory, the network, downloading the package), else 0.0. Range {-1, 0}."""
    for command in r.commands:
        if any(re.search(p, command) for p in cfg.answer_source_patterns):
            return -1.0
    return 0.0


RewardFn = Callable[[RolloutRecord, RewardConfig], "float | None"]
REWARDS: dict[str, RewardFn] = {
    fn.__name__: fn
    for fn in (
        verify_pass,
        diff_similarity,
        editor_outcome,
        tool_error_penalty,
        edit_tests_penalty,
        overlong_penalty,
        answer_source_penalty,
    )
}
"""Every reward by name, in the order they are logged."""


def is_masked(r: RolloutRecord, cfg: RewardConfig) -> bool:
    """True when the episode is left out of the update: it failed after being cut by the length
    budget and `overlong="mask"` (overlong filtering)."""
    return cfg.overlong == "mask" and _cut_short(r)


def score_rollout(r: RolloutRecord, cfg: RewardConfig) -> tuple[float | None, dict[str, float | None]]:
    """All rewards of one rollout and their weighted total.

    Returns:
        (total or None when the episode is masked out, {name: value or None} for every reward).
    """
    parts = {name: fn(r, cfg) for name, fn in REWARDS.items()}
    if is_masked(r, cfg):
        return None, parts
    total = sum(cfg.weights.get(name, 0.0) * v for name, v in parts.items() if v is not None)
    return float(total), parts


# ---- building the record ---------------------------------------------------------------------

_DIFF_PATH = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


def changed_files(diff: str) -> tuple[str, ...]:
    """Workspace-relative paths a git-format diff touches (both sides of a rename), sorted."""
    paths: set[str] = set()
    for a, b in _DIFF_PATH.findall(diff):
        paths.update((a, b))
    return tuple(sorted(paths))


def _requested_command(arguments: str) -> str | None:
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    for key in ("command", "cmd", "path", "pattern"):
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return " ".join(value)
    return None


def record_from_events(
    events: Iterable[Any],
    *,
    verify_passed: bool | None = None,
    tests_passed: int | None = None,
    tests_failed: int | None = None,
    diff_similarity: float | None = None,
) -> RolloutRecord:
    """Build the record of a finished rollout from its session events.

    Outcome fields given as arguments (from `shadow_backend.scoring`) override those of a `Score`
    event in the log. Raises ValueError when the events have no `SessionStart` or no `Final`.
    """
    events = list(events)
    start = next((e for e in events if isinstance(e, SessionStart)), None)
    final = next((e for e in reversed(events) if isinstance(e, Final)), None)
    if start is None or final is None:
        raise ValueError("a rollout record needs a session_start and a final event")
    score = next((e for e in reversed(events) if isinstance(e, Score)), None)
    verdict = next((e for e in reversed(events) if isinstance(e, Verdict)), None)
    observations = [e for e in events if isinstance(e, Observation)]
    turns = [e for e in events if isinstance(e, PolicyTurn)]
    commands = tuple(c for c in (_requested_command(o.arguments) for o in observations) if c)

    def pick(given: Any, name: str) -> Any:
        return given if given is not None else (getattr(score, name) if score is not None else None)

    return RolloutRecord(
        stop_reason=final.stop_reason,
        diff=final.diff,
        changed_files=changed_files(final.diff),
        verify=start.verify,
        verify_passed=pick(verify_passed, "verify_passed"),
        tests_passed=pick(tests_passed, "tests_passed"),
        tests_failed=pick(tests_failed, "tests_failed"),
        reference_diff=start.reference_diff,
        diff_similarity=pick(diff_similarity, "diff_similarity"),
        verdict=verdict.verdict if verdict is not None else None,
        tool_calls=len(observations),
        tool_errors=sum(1 for o in observations if o.is_error),
        commands=commands,
        steps=final.steps,
        summaries=final.summaries,
        sampled_tokens=sum(len(t.completion_ids or ()) for t in turns),
    )
