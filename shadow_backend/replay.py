"""Headless replay of logged sessions, and fresh rollouts from a session's start state.

`replay_session` rebuilds the start state a session recorded (base commit + base diff + unsaved
buffers, `harness.workspace.WorkspaceOrigin`) on a backend, re-executes every recorded tool call in
order through the same tool registry (`harness.tools.default_registry`, with the session's
command timeout), and compares each observation with the recorded one, first exactly, then
normalized (timings, temp/workspace paths, memory addresses), then the final diff with the
recorded one. Observations that never reached a tool (malformed calls, replies without a call,
tools not offered) and the agent's own `prune` are compared as recorded, not re-run.

`sample_rollouts` is what RL calls: N fresh episodes of a policy from the session's start state
(forks of one rebuilt workspace), each scored (`shadow_backend.scoring`) and optionally logged.

Threat model. A session file given to `recap replay` may come from anyone; replaying it must not
run anything, or write anything, outside a workspace sandbox. What each field may do:

- the file itself: read only through `harness.session.read_session` (regular files only, bounded,
  validated; a bad file is `ReplayResult.error`, never an exception or a hang);
- `repo`, `base_commit`: name a repository on this machine that is *read* (with the user's rights:
  a session can make replay copy any repository the user can read into the sandbox, nothing more).
  `base_commit` must be a full object id, so git cannot take it for an option;
- `base_diff`, `buffers`: applied inside the new workspace only (`git apply` refuses paths that
  leave it or enter `.git`; buffers go through `confine`); a start state that cannot be built is
  `ReplayResult.error`;
- recorded tool calls (`Observation.name/arguments`) and the `verify` command: run only through the
  tool registry on the workspace, i.e. inside its sandbox (bubblewrap or the container); never on
  the host;
- `config`: only the `[agent]`/`[context]` options, validated (`RecapConfig.from_dict`; e.g. the
  command timeout is capped); an unusable one falls back to the defaults;
- `model`, `adapter_id`, `tools`, `system_prompt`, `meta`: shown and compared, never loaded or run.
  The policy of `sample_rollouts` (and of `recap replay --model`) is always the caller's.

Not covered here: what the sandbox itself holds (`shadow_backend.local`, `docker_backend`), and
host git's reading of the named repository (`shadow_backend.git_state`).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from harness.errors import ConfigError, RecapError, SessionFormatError
from harness.session import Observation, Session, SessionWriter, read_session
from harness.workspace import Environment, WorkspaceOrigin

log = logging.getLogger(__name__)

NOT_RE_RUN = frozenset({"(malformed)", "(no call)", "prune"})
"""Observation names that are not tool executions in the workspace (see the module docstring)."""

_NORMALIZERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![\w/])(?:/private)?/(?:tmp|var/tmp)/recap-ws-[^\s/'\":,)\]]+/[^\s/'\":,)\]]+"), "<TMP>"),
    (re.compile(r"(?<![\w/])(?:/private)?/(?:tmp|var/tmp)/[^\s/'\":,)\]]+"), "<TMP>"),
    (re.compile(r"(?<![\w/])/workspace(?=[/\s'\":,)\]]|$)"), "<TMP>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds)\b"), "<DURATION>"),
    (re.compile(r"\b0x[0-9a-f]{6,}\b"), "<ADDR>"),
)


def normalize(text: str, *, roots: Iterable[str] = ()) -> str:
    """`text` with what legitimately differs between two runs replaced by placeholders: the given
    workspace roots, a local workspace root (`/tmp/recap-ws-*/NAME`), the Docker one (`/workspace`)
    and the first component of any other temp path become `<TMP>`, durations `<DURATION>`, hex
    addresses `<ADDR>`."""
    for root in sorted((r for r in roots if r), key=len, reverse=True):
        text = text.replace(root, "<TMP>")
    for pattern, placeholder in _NORMALIZERS:
        text = pattern.sub(placeholder, text)
    return text


def short_diff(expected: str, actual: str, *, max_lines: int = 20) -> str:
    """A unified diff of two texts, at most `max_lines` lines (a marker says how many were cut)."""
    lines = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(), "recorded", "replayed", lineterm="", n=1))
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"[... {len(lines) - max_lines} more diff lines ...]"]
    return "\n".join(lines)


@dataclass(frozen=True)
class Divergence:
    """One place where the replay differs from the recording.

    Attributes:
        step: the policy turn of the observation (None for the final diff).
        obs_id: the observation id (None for the final diff).
        what: "observation", "is_error" or "final_diff".
        detail: a short diff of recorded vs replayed (normalized) text.
    """

    step: int | None
    obs_id: int | None
    what: Literal["observation", "is_error", "final_diff"]
    detail: str


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of replaying one session.

    Attributes:
        path: the session file.
        session_id: from its `session_start` (None when unreadable).
        observations: observations compared.
        exact: of those, identical byte for byte.
        normalized: identical only after `normalize`.
        skipped: observations not re-run (`NOT_RE_RUN`, compared as recorded).
        final_diff: "exact", "normalized", "diverged" or "absent" (no `final` event recorded).
        divergences: what differed, in order.
        error: why the session could not be (fully) replayed, naming file and line; None if fine.
        duration_s: wall-clock seconds.
    """

    path: str
    session_id: str | None
    observations: int = 0
    exact: int = 0
    normalized: int = 0
    skipped: int = 0
    final_diff: Literal["exact", "normalized", "diverged", "absent"] = "absent"
    divergences: tuple[Divergence, ...] = ()
    error: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.divergences and self.error is None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "ok": self.ok}


def environment_of(recorded: dict[str, Any] | None) -> Environment | None:
    """The project environment a session recorded (`SessionStart.env`), to be rebuilt by key (its
    set-up and include list; the key and output are filled in again when it is built)."""
    if not recorded or not isinstance(recorded.get("setup"), str):
        return None
    include = recorded.get("include") or ()
    return Environment(setup=recorded["setup"], include=tuple(str(i) for i in include), from_session=True)


def with_setup(origin: WorkspaceOrigin, setup: str | None) -> WorkspaceOrigin:
    """`origin` with its environment's set-up command replaced by `setup` ("none" or "": no
    environment; None: unchanged, so a recorded set-up runs only if its build is cached;
    "recorded": the recorded one, which the user trusts to run; the include list is kept)."""
    import dataclasses

    if setup is None:
        return origin
    if setup.strip() == "recorded":
        return dataclasses.replace(origin, env=dataclasses.replace(origin.env, from_session=False) if origin.env else None)
    include = origin.env.include if origin.env else ()
    env = Environment(setup=setup, include=include) if setup.strip() not in ("", "none") else None
    return dataclasses.replace(origin, env=env)


def origin_of(session: Session) -> WorkspaceOrigin:
    """The start state a session recorded."""
    start = session.start
    return WorkspaceOrigin(repo=start.repo, base_commit=start.base_commit, base_diff=start.base_diff,
                           buffers=dict(start.buffers), env=environment_of(start.env))


def session_config(session: Session) -> Any:
    """The `harness.config.RecapConfig` a session recorded (defaults when it is unusable)."""
    from harness.config import RecapConfig

    try:
        return RecapConfig.from_dict(session.start.config)
    except ConfigError as exc:
        log.warning("%s: recorded config unusable (%s); using defaults", session.path, exc)
        return RecapConfig()


def _compare(recorded: str, replayed: str, roots: tuple[str, ...]) -> Literal["exact", "normalized", "diverged"]:
    if recorded == replayed:
        return "exact"
    if normalize(recorded, roots=roots) == normalize(replayed, roots=roots):
        return "normalized"
    return "diverged"


def replay_session(path: str | os.PathLike[str], *, backend: str = "local", setup: str | None = None) -> ReplayResult:
    """Replay one session file on `backend` ("local" or "docker"); never raises for a bad session:
    the problem is in `ReplayResult.error` (a torn file is replayed up to the tear and reported)."""
    from harness.tools import default_registry
    from shadow_backend.backends import rebuild_backend

    started = time.monotonic()
    try:
        session = read_session(path)
    except (SessionFormatError, OSError) as exc:
        return ReplayResult(path=str(path), session_id=None, error=str(exc), duration_s=time.monotonic() - started)
    error = None
    if session.torn:
        error = f"{path}:{len(session.events) + 1}: truncated line (the file was cut mid-write); replayed the events before it"
    registry = default_registry(command_timeout_s=session_config(session).agent.command_timeout_s)
    counts = {"exact": 0, "normalized": 0, "skipped": 0, "observations": 0}
    divergences: list[Divergence] = []
    final_state: Literal["exact", "normalized", "diverged", "absent"] = "absent"
    try:
        workspace = rebuild_backend(backend, with_setup(origin_of(session), setup))
    except RecapError as exc:
        return ReplayResult(path=str(path), session_id=session.start.session_id,
                            error=f"{path}: cannot rebuild the start state: {exc}", duration_s=time.monotonic() - started)
    try:
        roots = (workspace.root,)
        for obs in session.of_type(Observation):
            counts["observations"] += 1
            if obs.name in NOT_RE_RUN or obs.error_kind == "not_offered":
                counts["skipped"] += 1
                continue
            result = registry.call(obs.name, obs.arguments, workspace)
            state = _compare(obs.output, result.output, roots)
            if state == "diverged":
                divergences.append(Divergence(obs.turn, obs.obs_id, "observation", short_diff(
                    normalize(obs.output, roots=roots), normalize(result.output, roots=roots))))
            elif result.is_error != obs.is_error:
                divergences.append(Divergence(obs.turn, obs.obs_id, "is_error",
                                              f"recorded is_error={obs.is_error}, replayed {result.is_error}"))
            else:
                counts[state] += 1
        if session.final is not None:
            replayed_diff = workspace.diff()
            final_state = _compare(session.final.diff, replayed_diff, roots)
            if final_state == "diverged":
                divergences.append(Divergence(None, None, "final_diff", short_diff(session.final.diff, replayed_diff)))
    except RecapError as exc:
        error = f"{path}: replay failed: {exc}"
    finally:
        workspace.close()
    return ReplayResult(
        path=str(path), session_id=session.start.session_id, observations=counts["observations"],
        exact=counts["exact"], normalized=counts["normalized"], skipped=counts["skipped"], final_diff=final_state,
        divergences=tuple(divergences), error=error, duration_s=time.monotonic() - started,
    )


def replay_sessions(
    paths: Iterable[str | os.PathLike[str]],
    *,
    backend: str = "local",
    jobs: int = 1,
    on_done: Callable[[ReplayResult], None] | None = None,
    setup: str | None = None,
) -> list[ReplayResult]:
    """Replay sessions, `jobs` at a time (threads; the work is commands and file I/O).
    Results come back in the order of `paths`; `on_done` is called as each finishes. `setup`
    replaces each session's environment set-up (`with_setup`)."""
    if jobs < 1:
        raise ConfigError(f"jobs={jobs} must be at least 1")
    paths = list(paths)

    def one(p: str | os.PathLike[str]) -> ReplayResult:
        result = replay_session(p, backend=backend, setup=setup)
        if on_done is not None:
            on_done(result)
        return result

    if jobs == 1:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="replay") as pool:
        return list(pool.map(one, paths))


@dataclass(frozen=True)
class Rollout:
    """One fresh episode sampled from a session's start state.

    Attributes:
        index: 0-based sample number within the group.
        stop_reason, message, diff, steps: from `harness.agent.RunResult`.
        score: the fields of its `Score` event (verify outcome, diff similarity).
        session_path: its session file, when written.
        events: every event, the `Score` last.
    """

    index: int
    stop_reason: str
    message: str | None
    diff: str
    steps: int
    score: dict[str, Any] = field(default_factory=dict)
    session_path: str | None = None
    events: tuple[Any, ...] = ()


def sample_rollouts(
    session: Session | str | os.PathLike[str],
    policy: Any,
    *,
    n: int,
    backend: str = "local",
    config: Any = None,
    out_dir: str | os.PathLike[str] | None = None,
    verify_timeout_s: float = 600.0,
    setup: str | None = None,
) -> list[Rollout]:
    """Sample `n` rollouts of `policy` from the start state of `session` and score them.

    Args:
        session: a `Session` or a session file.
        policy: a `harness.types.Policy`, or a zero-argument callable returning one per rollout.
        n: group size (>= 1).
        backend: "local" or "docker".
        config: a `harness.config.RecapConfig` (default: the one the session recorded).
        out_dir: where each rollout's session file goes (`<session_id>-rollout-<i>.jsonl`);
            None keeps the logs in memory.
        verify_timeout_s: timeout of the session's verify command per rollout.
        setup: the environment's set-up command instead of the recorded one (`with_setup`).
    Returns:
        The rollouts in sample order.
    Raises:
        ConfigError: n < 1. WorkspaceError: the start state cannot be rebuilt.
    """
    from harness.agent import Agent
    from shadow_backend.backends import rebuild_backend
    from shadow_backend.scoring import score_workspace

    if n < 1:
        raise ConfigError(f"n={n} must be at least 1")
    if not isinstance(session, Session):
        session = read_session(session)
    start = session.start
    config = config or session_config(session)
    base = rebuild_backend(backend, with_setup(origin_of(session), setup))
    try:
        workspaces = base.fork(n)
    finally:
        base.close()
    rollouts = []
    try:
        for index, workspace in enumerate(workspaces):
            path = Path(out_dir) / f"{start.session_id}-rollout-{index}.jsonl" if out_dir is not None else None
            writer = SessionWriter(path)
            try:
                agent_policy = policy() if callable(policy) and not hasattr(policy, "generate") else policy
                result = Agent(policy=agent_policy, workspace=workspace, config=config, log=writer).run(
                    start.task, origin=workspace.origin, source="rollout", verify=start.verify,
                    reference_diff=start.reference_diff, test_patch=start.test_patch, adapter_id=start.adapter_id,
                    meta={"rollout_of": start.session_id, "sample": index},
                )
                score = score_workspace(workspace, diff=result.diff, verify=start.verify,
                                        reference_diff=start.reference_diff, log=writer, timeout_s=verify_timeout_s,
                                        test_patch=start.test_patch)
            finally:
                writer.close()
                workspace.close()
            rollouts.append(Rollout(index, result.stop_reason, result.message, result.diff, result.steps, score,
                                    str(path) if path else None, tuple(writer.events)))
    finally:
        for workspace in workspaces:
            workspace.close()
    return rollouts
