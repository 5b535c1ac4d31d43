"""The picture of a training log: loss, grad norm and lr against step on one x axis (imported only to draw).

Spikes are dots, the first non-finite step a red line with the non-finite tail shaded; with a
reference run, both runs are drawn and the first divergent step is a purple line. Long series
are thinned to a min/max envelope per pixel column; spikes are drawn from the full series, so
none is lost, and non-finite markers are thinned to MAX_POINTS evenly spaced (closer than a pixel).
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rootcause.tools.observe.logs.metrics import RECOGNISED, MetricSeries, Points

if TYPE_CHECKING:
    from rootcause.tools.engines.analyze_training_log import AnalyzeTrainingLogResult

WIDTH_PX, ROW_PX, DPI = 1000, 250, 100
MAX_POINTS = 4000
LABELS = {"loss": "loss", "grad_norm": "grad norm", "lr": "lr"}


def envelope(steps: np.ndarray, values: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The finite points, thinned to the min and max of each of limit/2 buckets when there are more."""
    keep = np.isfinite(values)
    if not keep.all():
        steps, values = steps[keep], values[keep]
    if len(values) <= limit:
        return steps, values
    edges = np.linspace(0, len(values), limit // 2 + 1).astype(np.int64).tolist()
    picked: list[int] = []
    for start, end in pairwise(edges):  # views of each bucket: no copy of the series
        if end > start:
            bucket = values[start:end]
            picked += sorted({start + int(bucket.argmin()), start + int(bucket.argmax())})
    return steps[picked], values[picked]


def _draw_series(ax: Axes, pts: Points, colour: str, label: str) -> None:
    steps, values = envelope(pts.steps, pts.values)
    ax.plot(steps, values, color=colour, linewidth=1.0, label=label)
    finite = values[values > 0]
    if len(finite) and finite.max() / max(finite.min(), 1e-300) > 100:
        ax.set_yscale("log")


def draw(path: Path, series: MetricSeries, result: AnalyzeTrainingLogResult,
         reference: MetricSeries | None = None) -> Path:
    """Write the PNG (WIDTH_PX wide, ROW_PX per metric drawn) and return its path."""
    metrics = [m for m in RECOGNISED if m in series.points and np.isfinite(series.points[m].values).any()]
    if not metrics:
        metrics = [next(iter(series.points))] if series.points else []
    rows = max(1, len(metrics))
    fig = Figure(figsize=(WIDTH_PX / DPI, ROW_PX * rows / DPI + 0.6), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    first = result.first_nonfinite_step
    spikes_by_metric: dict[str, list[tuple[int, float]]] = {}
    for s in series.spikes():
        spikes_by_metric.setdefault(s.metric, []).append((s.step, s.value))
    for ax, metric in zip(axes, metrics, strict=False):
        pts = series.points[metric]
        if reference is not None and metric in reference.points:
            _draw_series(ax, reference.points[metric], "0.6", f"{result.compare_to} (reference)")
        _draw_series(ax, pts, "tab:blue", result.path)
        if metric in spikes_by_metric:
            xs, ys = zip(*spikes_by_metric[metric], strict=True)
            ax.scatter(xs, ys, s=18, color="tab:orange", zorder=3, label="spike (>3x rolling median)")
        bad = pts.steps[~np.isfinite(pts.values)]
        if len(bad) > MAX_POINTS:  # markers closer than a pixel: every one shown would draw the same picture
            bad = bad[np.linspace(0, len(bad) - 1, MAX_POINTS).astype(np.int64)]
        if len(bad):
            ax.scatter(bad, np.full(len(bad), 0.98), s=10, marker="x", color="tab:red",
                       transform=ax.get_xaxis_transform(), zorder=3, label="NaN / Inf")
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.grid(True, alpha=0.3)
    for ax in axes:
        if first is not None:
            ax.axvline(first, color="tab:red", linestyle="--", linewidth=1.6, label=f"first non-finite (step {first})")
            end = max(int(series.points[m].steps[-1]) for m in series.points)
            if end > first:
                ax.axvspan(first, end, color="tab:red", alpha=0.08)
        if result.first_divergent_step is not None:
            ax.axvline(result.first_divergent_step, color="tab:purple", linestyle="--", linewidth=1.6,
                       label=f"first divergent step {result.first_divergent_step}")
    axes[0].legend(loc="best", fontsize=7)
    axes[-1].set_xlabel("step")
    fig.suptitle(f"{result.path}: rank {result.rank_used}, {result.steps} steps", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    return path
