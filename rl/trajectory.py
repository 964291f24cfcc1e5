"""From a session's events to training sequences and loss masks.

Every `PolicyTurn` that recorded its token ids becomes one training sequence: its exact prompt ids
followed by its exact completion ids. Only the completion tokens were sampled by the policy, so
only they get gradient; everything in the prompt (system prompt, task, earlier turns re-rendered by
the chat template, tool outputs, summaries quoted back) is masked. Self-summary turns are policy
turns like any other: a summary's tokens get the episode's advantage, which is how RL credits a
good summary with the final outcome (Composer 2; SUPO / ReSum-style segments). The trajectory is
split into segments at the summaries (`PolicyTurn.segment`); every segment carries the episode's
advantage.

Turns without token ids (an OpenAI-compatible server that returned only text) cannot be trained
on and are counted in `Trajectory.untrainable_turns`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from harness.session import PolicyTurn


@dataclass(frozen=True)
class TurnSample:
    """One policy turn ready for training.

    Attributes:
        prompt_ids: (P,) exact prompt token ids.
        completion_ids: (C,) sampled token ids.
        old_logprobs: (C,) log-probs at sampling time (grammar-masked for constrained turns).
        kind: "action" or "summary".
        segment: trajectory segment (0 before the first summary).
        turn: the turn number in its episode.
        constrained: sampled under a grammar constraint (re-score under the same masks).
        offered_tools: the tool names offered that turn (rebuilds the same grammar).
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    kind: str
    segment: int
    turn: int
    constrained: bool
    offered_tools: tuple[str, ...]


@dataclass(frozen=True)
class Trajectory:
    """The trainable turns of one episode.

    Attributes:
        turns: the turns with token ids, in order.
        untrainable_turns: policy turns that lacked prompt/completion ids or logprobs.
        segments: number of segments (summaries + 1 when there was at least one turn).
    """

    turns: tuple[TurnSample, ...]
    untrainable_turns: int

    @property
    def segments(self) -> int:
        return len({t.segment for t in self.turns})

    @property
    def sampled_tokens(self) -> int:
        return sum(len(t.completion_ids) for t in self.turns)


def trajectory_from_events(events: Iterable[Any]) -> Trajectory:
    """Collect the trainable policy turns of a session (any event iterable: `Session.events`,
    `SessionWriter.events`, `RunResult.events`)."""
    turns: list[TurnSample] = []
    skipped = 0
    for event in events:
        if not isinstance(event, PolicyTurn):
            continue
        if not event.prompt_ids or not event.completion_ids or event.logprobs is None:
            skipped += 1
            continue
        if len(event.logprobs) != len(event.completion_ids):
            raise ValueError(
                f"turn {event.turn}: {len(event.logprobs)} logprobs for {len(event.completion_ids)} completion tokens"
            )
        turns.append(
            TurnSample(
                prompt_ids=tuple(event.prompt_ids),
                completion_ids=tuple(event.completion_ids),
                old_logprobs=tuple(event.logprobs),
                kind=event.kind,
                segment=event.segment,
                turn=event.turn,
                constrained=event.constrained,
                offered_tools=tuple(event.offered_tools),
            )
        )
    return Trajectory(turns=tuple(turns), untrainable_turns=skipped)


@dataclass(frozen=True)
class Batch:
    """Padded training tensors for a list of turns.

    Attributes:
        input_ids: (B, T) int64, prompt + completion, right-padded with `pad_id`.
        attention_mask: (B, T) int64, 1 on real tokens.
        loss_mask: (B, T) float32, 1 exactly on the sampled completion tokens.
        old_logprobs: (B, T) float32, sampling-time log-probs on the sampled tokens, 0 elsewhere.
        advantages: (B,) float32, the episode advantage of each turn.
        prompt_lengths: (B,) int64, P of each row (the completion starts there).
        turns: the source turns, row by row (for re-scoring constrained rows).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    prompt_lengths: torch.Tensor
    turns: tuple[TurnSample, ...]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def build_batch(turns: Sequence[TurnSample], advantages: Sequence[float], *, pad_id: int) -> Batch:
    """Pad turns into one batch.

    Args:
        turns: B turns.
        advantages: B floats (each turn's episode advantage; see `rl.advantages`).
        pad_id: the padding token id (never attended to, never trained on).
    Returns:
        A `Batch` with T = the longest prompt + completion.
    Raises:
        ValueError: empty input or mismatched lengths.
    """
    if not turns:
        raise ValueError("build_batch needs at least one turn")
    if len(turns) != len(advantages):
        raise ValueError(f"{len(turns)} turns but {len(advantages)} advantages")
    width = max(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
    b = len(turns)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    loss_mask = torch.zeros((b, width), dtype=torch.float32)
    old = torch.zeros((b, width), dtype=torch.float32)
    for row, t in enumerate(turns):
        p, c = len(t.prompt_ids), len(t.completion_ids)
        input_ids[row, : p + c] = torch.tensor(t.prompt_ids + t.completion_ids, dtype=torch.long)
        attention[row, : p + c] = 1
        loss_mask[row, p : p + c] = 1.0
        old[row, p : p + c] = torch.tensor(t.old_logprobs, dtype=torch.float32)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        old_logprobs=old,
        advantages=torch.tensor([float(a) for a in advantages], dtype=torch.float32),
        prompt_lengths=torch.tensor([len(t.prompt_ids) for t in turns], dtype=torch.long),
        turns=tuple(turns),
    )
