"""Metrics of a training or evaluation run: slash-namespaced scalars (`rollout/`, `reward/`,
`loss/`, `time/`), one JSON object per step in `metrics.jsonl` (always), mirrored to
TensorBoard when the `tensorboard` package is installed; and PNG curves from the JSON Lines."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsWriter:
    """Appends `{"step": n, name: value, ...}` lines to `run_dir/metrics.jsonl`.

    Args:
        run_dir: the run's output folder (created).
        tensorboard: also write TensorBoard events to `run_dir/tb` when the package is available.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:
                log.debug("tensorboard not installed: metrics go to %s only", self.path)

    def write(self, step: int, values: dict[str, float | int | None]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **clean}, sort_keys=True) + "\n")
        if self._tb is not None:
            for key, value in clean.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every step's metrics, in file order; a torn last line is ignored. Raises FileNotFoundError."""
    rows = []
    for line in (Path(run_dir) / METRICS_FILE).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break
    return rows


def plot_run(run_dir: str | Path, *, out_dir: str | Path | None = None) -> list[Path]:
    """One PNG per namespace (`rollout.png`, `reward.png`, `loss.png`, `time.png`): every numeric
    metric of that namespace against the step.

    Returns:
        The files written (in `out_dir`, default `run_dir/plots`).
    Raises:
        FileNotFoundError: no metrics.jsonl in `run_dir`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    target = Path(out_dir) if out_dir is not None else Path(run_dir) / "plots"
    target.mkdir(parents=True, exist_ok=True)
    series: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for row in rows:
        for key, value in row.items():
            if key == "step" or "/" not in key or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            xs, ys = series.setdefault(key.split("/", 1)[0], {}).setdefault(key, ([], []))
            xs.append(int(row["step"]))
            ys.append(float(value))
    written = []
    for namespace, curves in sorted(series.items()):
        n = len(curves)
        cols = min(3, n)
        rows_n = math.ceil(n / cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(4.5 * cols, 3 * rows_n), squeeze=False)
        for ax, (key, (xs, ys)) in zip(axes.flat, sorted(curves.items())):
            ax.plot(xs, ys, marker="o", markersize=3)
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("step")
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        fig.tight_layout()
        path = target / f"{namespace}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
    return written
