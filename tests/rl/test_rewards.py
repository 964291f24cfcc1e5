import pytest

from harness.errors import ConfigError
from harness.session import Final, Observation, PolicyTurn, Score, SessionStart, SessionWriter, Verdict
from rl.rewards import (
    REWARDS,
    RewardConfig,
    RolloutRecord,
    answer_source_penalty,
    changed_files,
    diff_similarity,
    edit_tests_penalty,
    editor_outcome,
    overlong_penalty,
    record_from_events,
    score_rollout,
    tool_error_penalty,
    verify_pass,
)

CFG = RewardConfig()
SRC_DIFF = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-a\n+b\n"
TEST_DIFF = "diff --git a/tests/test_core.py b/tests/test_core.py\n--- a/tests/test_core.py\n+++ b/tests/test_core.py\n@@ -1 +1 @@\n-a\n+b\n"


def rec(**kw):
    base = dict(stop_reason="finish", diff=SRC_DIFF, changed_files=changed_files(kw.get("diff", SRC_DIFF)))
    base.update(kw)
    return RolloutRecord(**base)


def test_verify_pass_binary_and_fraction():
    assert verify_pass(rec(verify="pytest", verify_passed=True), CFG) == 1.0
    assert verify_pass(rec(verify="pytest", verify_passed=False, tests_passed=3, tests_failed=1), CFG) == 0.0
    frac = RewardConfig(verify_fraction=True)
    assert verify_pass(rec(verify="pytest", verify_passed=False, tests_passed=3, tests_failed=1), frac) == 0.75
    assert verify_pass(rec(verify=None, verify_passed=None), CFG) is None


def test_diff_similarity_only_without_verify():
    assert diff_similarity(rec(reference_diff=SRC_DIFF, diff_similarity=0.8), CFG) == 0.8
    assert diff_similarity(rec(reference_diff=SRC_DIFF, diff_similarity=0.8, verify="pytest"), CFG) is None
    assert diff_similarity(rec(), CFG) is None
    # partial credit only close to the reference: touching the right file is not half a fix
    assert diff_similarity(rec(reference_diff=SRC_DIFF, diff_similarity=0.3), CFG) == 0.0
    assert diff_similarity(rec(reference_diff=SRC_DIFF, diff_similarity=0.3), RewardConfig(similarity_floor=0.0)) == 0.3


def test_editor_outcome():
    assert [editor_outcome(rec(verdict=v), CFG) for v in ("accepted", "kept", "rejected", "reverted")] == [1, 1, -1, -1]
    assert editor_outcome(rec(), CFG) is None


def test_tool_error_penalty():
    assert tool_error_penalty(rec(tool_calls=4, tool_errors=1), CFG) == -0.25
    assert tool_error_penalty(rec(tool_calls=0, tool_errors=0), CFG) == 0.0
    assert tool_error_penalty(rec(tool_calls=2, tool_errors=2), CFG) == -1.0


def test_edit_tests_penalty_covers_test_files_and_the_verify_script():
    assert edit_tests_penalty(rec(diff=TEST_DIFF), CFG) == -1.0
    assert edit_tests_penalty(rec(), CFG) == 0.0
    script = SRC_DIFF.replace("pkg/core.py", "check.sh")
    assert edit_tests_penalty(rec(diff=script, verify="bash ./check.sh"), CFG) == -1.0
    assert edit_tests_penalty(rec(diff=SRC_DIFF, verify="python -m pytest pkg/core.py::test_x"), CFG) == -1.0


def test_overlong_masks_only_failures_cut_by_the_length_budget():
    cut = rec(stop_reason="context_exhausted", verify="pytest", verify_passed=False)
    assert overlong_penalty(cut, CFG) == 0.0
    assert score_rollout(cut, CFG)[0] is None  # masked out (overlong filtering)
    pen = RewardConfig(overlong="penalize")
    assert overlong_penalty(cut, pen) == -1.0
    assert score_rollout(cut, pen)[0] == pytest.approx(-0.5)
    assert score_rollout(cut, RewardConfig(overlong="ignore"))[0] == 0.0
    # the step limit is part of the task: a failure there is an ordinary failure, not masked
    steps = rec(stop_reason="max_steps", verify="pytest", verify_passed=False)
    assert score_rollout(steps, CFG)[0] == 0.0 and score_rollout(steps, pen)[0] == 0.0


@pytest.mark.parametrize("stop", ["max_steps", "context_exhausted", "loop_guard", "finish"])
@pytest.mark.parametrize("overlong", ["mask", "penalize", "ignore"])
def test_a_passing_verify_is_a_success_whatever_the_stop_reason(stop, overlong):
    # the embedded model almost never calls finish: its successes must still count (issue 17.1)
    done = rec(stop_reason=stop, verify="pytest", verify_passed=True)
    assert score_rollout(done, RewardConfig(overlong=overlong))[0] == 1.0
    accepted = rec(stop_reason=stop, verdict="accepted")
    assert score_rollout(accepted, RewardConfig(overlong=overlong))[0] == 1.0


def _archetypes() -> list[tuple[str, RolloutRecord]]:
    """One record per rank of the ordering table in `rl.rewards` (best first)."""
    v = dict(verify="python -m pytest -q")
    return [
        ("verified success", rec(**v, verify_passed=True, tool_calls=3)),
        ("success with a failing call", rec(**v, verify_passed=True, tool_calls=3, tool_errors=1)),
        ("clean failure, no edit", rec(**v, verify_passed=False, diff="", tool_calls=3)),
        ("failure with failing calls", rec(**v, verify_passed=False, tool_calls=3, tool_errors=2)),
        ("cut by the length budget", rec(**v, verify_passed=False, stop_reason="context_exhausted", tool_calls=3)),
        ("hacked pass: edited the tests", rec(**v, verify_passed=True, diff=TEST_DIFF, verdict="accepted", tool_calls=3)),
    ]


def test_the_documented_ordering_holds():
    pen = RewardConfig(overlong="penalize")
    totals = [(name, score_rollout(r, pen)[0]) for name, r in _archetypes()]
    assert [t for _, t in totals] == sorted((t for _, t in totals), reverse=True), totals
    assert totals[2][1] == 0.0 and totals[-1][1] < 0.0


def test_no_edit_scores_above_a_clean_failure():
    # issue 17.3: a failed episode that changed something (an empty file, a random edit) must not
    # outrank a failed episode that changed nothing
    clean = score_rollout(rec(verify="pytest", verify_passed=False, diff="", tool_calls=2), CFG)[0]
    empty_file = "diff --git a/notes.txt b/notes.txt\nnew file mode 100644\nindex 0000000..e69de29\n"
    for diff in (SRC_DIFF, empty_file, SRC_DIFF + empty_file):
        wrong = score_rollout(rec(verify="pytest", verify_passed=False, diff=diff, tool_calls=2), CFG)[0]
        assert wrong <= clean, diff
    # without verify, a diff far from the reference earns nothing either
    far = score_rollout(rec(reference_diff=SRC_DIFF, diff_similarity=0.2, diff=TEST_DIFF.replace("tests/test_core", "x")), CFG)[0]
    none = score_rollout(rec(reference_diff=SRC_DIFF, diff_similarity=0.0, diff=""), CFG)[0]
    assert far <= none


def test_answer_source_penalty():
    for cmd in ("git log -p", "git --no-pager show HEAD~1", "cat .git/ORIG_HEAD", "curl http://x", "pip download six", "git diff HEAD~3"):
        assert answer_source_penalty(rec(commands=(cmd,)), CFG) == -1.0, cmd
    for cmd in ("git diff", "git status", "python -m pytest -q", "ls"):
        assert answer_source_penalty(rec(commands=(cmd,)), CFG) == 0.0, cmd


def test_total_is_the_weighted_sum_and_every_reward_is_reported():
    r = rec(verify="pytest", verify_passed=True, tool_calls=4, tool_errors=2, commands=("git log",))
    total, parts = score_rollout(r, CFG)
    assert set(parts) == set(REWARDS)
    assert total == pytest.approx(1.0 - 0.1 * 0.5 - 0.5)
    with pytest.raises(ConfigError, match="similarity_floor"):
        RewardConfig(similarity_floor=1.5)
    weights = RewardConfig(weights={"verify_pass": 2.0})
    assert score_rollout(r, weights)[0] == 2.0
    with pytest.raises(ConfigError, match="unknown reward"):
        RewardConfig(weights={"speed": 1.0})
    with pytest.raises(ConfigError, match="overlong"):
        RewardConfig(overlong="drop")  # type: ignore[arg-type]


def test_record_from_events():
    w = SessionWriter(None)
    w.emit(SessionStart, schema_version=1, session_id="s", repo="/r", task="t", model="m", verify="pytest -q")
    w.emit(PolicyTurn, turn=0, text="", completion_ids=[1, 2, 3], prompt_ids=[0], logprobs=[0.0] * 3)
    w.emit(Observation, turn=0, obs_id=1, call_id="a", name="run", arguments='{"command": "git log"}', output="")
    w.emit(Observation, turn=0, obs_id=2, call_id="b", name="oops", arguments="{", output="bad", is_error=True, error_kind="malformed")
    w.emit(Final, stop_reason="finish", diff=TEST_DIFF, steps=1, summaries=0)
    w.emit(Score, verify_passed=True, tests_passed=2, tests_failed=0)
    w.emit(Verdict, verdict="rejected")
    r = record_from_events(w.events)
    assert r.verify_passed is True and r.tests_passed == 2 and r.verdict == "rejected"
    assert r.tool_calls == 2 and r.tool_errors == 1 and r.commands == ("git log",)
    assert r.changed_files == ("tests/test_core.py",) and r.sampled_tokens == 3
    assert record_from_events(w.events, verify_passed=False).verify_passed is False
    with pytest.raises(ValueError, match="final"):
        record_from_events(w.events[:2])
