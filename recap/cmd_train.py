"""`recap train`, `recap eval`, `recap plot` and `recap tasks make|split`: RL on logged sessions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

tasks_app = typer.Typer(help="Make verifiable training tasks.", no_args_is_help=True)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn a RecapError (bad sessions folder, bad option, missing weights) into `error: ...` on stderr
    and exit code 2, as `recap run` does, instead of a traceback."""
    from harness.errors import RecapError

    try:
        yield
    except RecapError as exc:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None


def train(
    sessions: Path = typer.Option(..., "--sessions", help="Folder of session files (*.jsonl) to train on."),
    model: str = typer.Option("embedded", "--model", help="Policy spec with local weights: embedded, tiny, hf:PATH."),
    steps: int = typer.Option(10, "--steps", help="Optimizer steps in the whole run."),
    group: int = typer.Option(4, "--group", help="G: rollouts per session (forks of its start state)."),
    sessions_per_step: int = typer.Option(1, "--sessions-per-step", help="N: groups per step."),
    out: Path = typer.Option(Path("runs/recap-train"), "--out", help="Run folder: metrics, checkpoints, adapter."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    lr: float = typer.Option(1e-4, "--lr", help="AdamW learning rate."),
    advantage: str = typer.Option("dr_grpo", "--advantage", help="dr_grpo (mean baseline), grpo (std-scaled) or rloo."),
    kl_coef: float = typer.Option(0.0, "--kl-coef", help="Weight of the k3 KL penalty to the base model."),
    lora_rank: int = typer.Option(8, "--lora-rank", help="LoRA rank."),
    temperature: float = typer.Option(1.0, "--temperature", help="Rollout sampling temperature."),
    max_episode_steps: int = typer.Option(6, "--max-episode-steps", help="Agent action turns per rollout."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Completion budget per turn (tokens)."),
    context_window: Optional[int] = typer.Option(None, "--context-window", help="Cap on the policy's window in tokens (default: the model's own; the tool specs alone take ~1,800)."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Policy turns per forward/backward (gradient accumulation; same gradient, more memory; may change on --resume)."),
    activation_checkpointing: bool = typer.Option(True, "--activation-checkpointing/--no-activation-checkpointing", help="Recompute activations in the backward pass (less memory, about one more forward)."),
    checkpoint_every: int = typer.Option(1, "--checkpoint-every", help="Checkpoint every K steps."),
    overlong: str = typer.Option("mask", "--overlong", help="Failed episodes cut by the length budget (context exhausted): mask, penalize or ignore."),
    seed: int = typer.Option(0, "--seed", help="Seed of data order, rollout sampling and RNGs."),
    eval_sessions: Optional[Path] = typer.Option(None, "--eval-sessions", help="Held-out sessions scored during training (eval/* metrics)."),
    eval_every: int = typer.Option(1, "--eval-every", help="Score --eval-sessions every K steps (and after the last)."),
    eval_samples: int = typer.Option(1, "--eval-samples", help="Rollouts per held-out session at each evaluation."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Run rollouts on Ray actors: auto, local or a cluster address."),
    ray_workers: int = typer.Option(2, "--ray-workers", help="Rollout actors with --ray."),
    backend: str = typer.Option("local", "--backend", help="Shadow backend of the rollouts: local or docker."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Project environment set-up command instead of each session's (e.g. \"pip install -e . pytest\"; none: no environment; recorded: the one the session holds, which runs with network access (only for sessions you trust); by default a recorded set-up is used only when its build is already cached here)."),
    rollout_endpoint: Optional[str] = typer.Option(None, "--rollout-endpoint", help="Sample through an OpenAI-compatible server (vLLM) and push adapters to it."),
) -> None:
    """Train a LoRA adapter with group-relative policy gradient on the sessions' start states."""
    from rich.console import Console

    from rl.rewards import RewardConfig
    from rl.train import TrainConfig, train as run_training

    console = Console()
    with _user_errors():
        cfg = TrainConfig(
            sessions_dir=str(sessions), model=model, out_dir=str(out), steps=steps, group_size=group,
            sessions_per_step=sessions_per_step, learning_rate=lr, advantage=advantage, kl_coef=kl_coef,  # type: ignore[arg-type]
            lora_rank=lora_rank, lora_alpha=2 * lora_rank, temperature=temperature, max_episode_steps=max_episode_steps,
            max_new_tokens=max_new_tokens, max_context_tokens=context_window, micro_batch_turns=micro_batch,
            activation_checkpointing=activation_checkpointing,
            checkpoint_every=checkpoint_every, seed=seed, rewards=RewardConfig(overlong=overlong),  # type: ignore[arg-type]
            ray_address=ray, ray_workers=ray_workers, rollout_endpoint=rollout_endpoint,
            eval_sessions=str(eval_sessions) if eval_sessions else None, eval_every=eval_every, eval_samples=eval_samples,
            backend=backend, setup=setup,
        )

    def show(step: int, values: dict) -> None:
        def f(key: str) -> str:
            v = values.get(key)
            return "n/a" if v is None else f"{v:.3f}"

        console.print(f"step {step}/{steps}: reward {f('rollout/reward_mean')} ± {f('rollout/reward_std')}, "
                      f"pass {f('rollout/pass_rate')}, signal {f('rollout/groups_with_signal')}, loss {f('loss/loss')}, "
                      f"entropy {f('loss/entropy')}, {values['rollout/tokens_sampled']:.0f} tokens, {values['time/step_s']:.0f} s"
                      + (f", held-out pass {f('eval/pass_rate')} ({f('eval/pass_ci_low')}-{f('eval/pass_ci_high')})"
                         if "eval/pass_rate" in values else ""))

    with _user_errors():
        adapter = run_training(cfg, resume=resume, on_step=show)
    console.print(f"adapter: {adapter}\nmetrics: {out / 'metrics.jsonl'} (plot with `recap plot {out}`)")


def eval_(
    sessions: Path = typer.Option(..., "--sessions", help="Held-out session files (*.jsonl)."),
    model: str = typer.Option("embedded", "--model", help="Policy spec: embedded, tiny, hf:PATH, openai:MODEL@URL, or scripted:FILE.json (a fixed playback of tool calls, e.g. a known fix, to check the tasks' scoring)."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="A LoRA adapter folder (e.g. RUN/adapter)."),
    samples: int = typer.Option(1, "--samples", help="Rollouts per session."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (match training)."),
    seed: int = typer.Option(1234, "--seed", help="Sampling seed (the same for base and adapter)."),
    max_episode_steps: int = typer.Option(6, "--max-episode-steps", help="Agent action turns per rollout."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Completion budget per turn (tokens)."),
    context_window: Optional[int] = typer.Option(None, "--context-window", help="Cap on the policy's window in tokens (default: the model's own; the tool specs alone take ~1,800)."),
    overlong: str = typer.Option("mask", "--overlong", help="Failed episodes cut by the length budget: mask, penalize or ignore (match training)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write eval.json and the rollout sessions here."),
    backend: str = typer.Option("local", "--backend", help="Shadow backend of the rollouts: local or docker."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Project environment set-up command instead of each session's (e.g. \"pip install -e . pytest\"; none: no environment; recorded: the one the session holds, which runs with network access (only for sessions you trust); by default a recorded set-up is used only when its build is already cached here)."),
) -> None:
    """Score a policy on held-out sessions: pass rate and mean reward with 95% intervals."""
    from rich.console import Console

    from rl.evaluate import EvalConfig, evaluate, report_lines
    from rl.rewards import RewardConfig

    with _user_errors():
        report = evaluate(EvalConfig(
            sessions_dir=str(sessions), model=model, adapter=str(adapter) if adapter else None, samples=samples,
            temperature=temperature, seed=seed, max_episode_steps=max_episode_steps, max_new_tokens=max_new_tokens,
            max_context_tokens=context_window, rewards=RewardConfig(overlong=overlong),  # type: ignore[arg-type]
            out=str(out) if out else None, backend=backend, setup=setup,
        ))
    console = Console()
    for line in report_lines(report):
        console.print(line)


def plot(run_dir: Path = typer.Argument(..., help="A training run folder (holding metrics.jsonl).")) -> None:
    """Write PNG curves of a run's metrics to RUN_DIR/plots."""
    from rl.metrics import plot_run

    try:
        paths = plot_run(run_dir)
    except FileNotFoundError:
        raise typer.BadParameter(f"no metrics.jsonl in {run_dir}") from None
    for path in paths:
        typer.echo(str(path))


@tasks_app.command("make")
def tasks_make(
    pypi: Optional[str] = typer.Option(None, "--pypi", help="NAME==VERSION of a package whose sdist ships its tests (AST-mutated bugs)."),
    family: Optional[str] = typer.Option(None, "--family", help="A synthetic family, easiest first: delete-file, create-file, replace-line, rename-symbol, fix-syntax."),
    repo: Path = typer.Option(Path("."), "--repo", help="With --family: the git repository whose HEAD the tasks start from."),
    count: int = typer.Option(10, "--count", help="Tasks to make."),
    out: Path = typer.Option(Path("tasks"), "--out", help="Where the task sessions go."),
    cache: Path = typer.Option(Path.home() / ".cache" / "recap" / "tasks", "--cache", help="With --pypi: downloads and task repositories (keep it: sessions point here)."),
    seed: int = typer.Option(0, "--seed", help="Seeds every choice: the same seed and sources give the same tasks."),
    setup: Optional[str] = typer.Option(None, "--setup", help="Project environment set-up command recorded in each task, e.g. \"pip install -e . pytest\" (rollouts and scoring run the tests in it)."),
) -> None:
    """Write one verifiable task session per bug (--pypi) or per synthetic edit (--family); give exactly one."""
    from harness.errors import ConfigError

    with _user_errors():
        if (pypi is None) == (family is None):
            raise ConfigError("give exactly one of --pypi NAME==VERSION and --family NAME")
        if family is not None:
            from rl.families import make_family_tasks

            paths = make_family_tasks(family, repo=repo, count=count, out_dir=out, seed=seed)
        else:
            from rl.tasks import make_tasks

            paths = make_tasks(pypi, count=count, out_dir=out, cache_dir=cache, seed=seed,  # type: ignore[arg-type]
                                 setup=setup)
    typer.echo(f"{len(paths)} task session(s) in {out}")


@tasks_app.command("split")
def tasks_split(
    sessions: list[Path] = typer.Argument(..., help="Session files or folders."),
    out: Path = typer.Option(..., "--out", help="Writes OUT/train and OUT/held-out."),
    held_out: float = typer.Option(0.3, "--held-out", help="Fraction of sessions held out (0 < x < 1)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split."),
) -> None:
    """Split sessions into a training and a held-out folder (copies; a seeded, reproducible split)."""
    from rl.data import split_sessions

    with _user_errors():
        train_files, held = split_sessions(sessions, out=out, held_out=held_out, seed=seed)
    typer.echo(f"{len(train_files)} train, {len(held)} held out in {out}")


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("eval")(eval_)
    app.command("plot")(plot)
    app.add_typer(tasks_app, name="tasks")
