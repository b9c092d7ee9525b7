"""Draws evaluated dashboard panels with matplotlib, where Grafana's grid puts them.

matplotlib is the `[docs]` extra: only `make dashboard` needs it, so only hack/pictures/dashboard.py
imports this module. Colours follow Grafana's dark theme so the picture reads like the real thing.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402  (after use(): the backend is chosen before pyplot loads)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .grafana import Panel, Series, figure_box, format_value, grid_height  # noqa: E402

log = logging.getLogger(__name__)

BACKGROUND = "#111217"
PANEL = "#181b1f"
TEXT = "#ccccdc"
GRID = "#2c3235"
PALETTE = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a")
WIDTH_INCHES = 16.0
UNIT_HEIGHT_INCHES = 0.32  # a grid height unit (30 px at Grafana's default width of ~1500 px)
PAD = 0.03  # inches between panels


def render(
    panels: Sequence[Panel],
    data: Mapping[str, list[Series]],
    notes: Mapping[str, str],
    start: float,
    out: Path,
    caption: str,
) -> None:
    """``data``: each panel's series by title; ``notes``: why a panel is empty, by title."""
    height = grid_height(panels)
    caption_lines = textwrap.wrap(caption, width=190)
    caption_inches = 0.2 + 0.16 * len(caption_lines)
    figure_height = height * UNIT_HEIGHT_INCHES + caption_inches
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "foo-operator", "font.size": 7})
    figure = plt.figure(figsize=(WIDTH_INCHES, figure_height), facecolor=BACKGROUND)
    across, up = 1 / WIDTH_INCHES, 1 / figure_height  # an inch as a fraction of the figure
    body = 1 - caption_inches * up  # the grid's share of the figure's height, above the caption
    for panel in panels:
        box = figure_box(panel.grid, height)
        left, bottom = box.left + PAD * across, caption_inches * up + box.bottom * body + PAD * up
        width, tall = box.width - 2 * PAD * across, box.height * body - 2 * PAD * up
        if panel.is_row:
            figure.text(left, bottom + tall / 2, panel.title, color=TEXT, fontsize=10, fontweight="bold", va="center")
            continue
        figure.add_artist(Rectangle((left, bottom), width, tall, transform=figure.transFigure, color=PANEL, zorder=0))
        figure.text(left + 0.08 * across, bottom + tall - 0.06 * up, panel.title, color=TEXT, fontsize=8,
                    fontweight="bold", va="top")  # fmt: skip
        # Room inside the panel for the title above and the tick labels left of and below the plot.
        margins = (0.55, 0.3, 0.12, 0.3) if panel.type != "stat" else (0.1, 0.1, 0.1, 0.3)  # left, bottom, right, top
        axes = figure.add_axes(
            (
                left + margins[0] * across,
                bottom + margins[1] * up,
                width - (margins[0] + margins[2]) * across,
                tall - (margins[1] + margins[3]) * up,
            ),
            facecolor=PANEL,
        )
        series = data.get(panel.title, [])
        if panel.type == "stat":
            _stat(axes, panel, series)
        else:
            _timeseries(axes, panel, series, start)
        if not series:
            axes.set_xticks([])
            axes.set_yticks([])
            axes.text(0.5, 0.5, f"No data\n{notes.get(panel.title, '')}", color=TEXT, ha="center", va="center",
                      transform=axes.transAxes)  # fmt: skip
    figure.text(0.005, caption_inches * up / 2, "\n".join(caption_lines), color=TEXT, fontsize=8, va="center")
    out.parent.mkdir(parents=True, exist_ok=True)
    # No date in the file's metadata: the same run draws the same bytes.
    figure.savefig(out, facecolor=BACKGROUND, metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(figure)
    log.info("wrote %s", out)


def _timeseries(axes: Axes, panel: Panel, series: list[Series], start: float) -> None:
    for index, one in enumerate(series):
        axes.plot(
            [t - start for t in one.times],
            one.values,
            color=PALETTE[index % len(PALETTE)],
            linewidth=1,
            label=one.name or "(no labels)",
        )
    axes.tick_params(colors=TEXT, labelsize=6, length=2)
    axes.grid(color=GRID, linewidth=0.5)
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{int(x) // 60}:{int(x) % 60:02d}"))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: format_value(y, panel.unit)))
    if series:
        axes.legend(loc="upper left", fontsize=5.5, frameon=False, labelcolor=TEXT, ncols=2 if len(series) > 4 else 1)


def _stat(axes: Axes, panel: Panel, series: list[Series]) -> None:
    """A stat panel: each series' last value, large, as Grafana shows it."""
    axes.set_xticks([])
    axes.set_yticks([])
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.set_facecolor(PANEL)
    for index, one in enumerate(series):
        y = 1 - (index + 1) / (len(series) + 1)
        axes.text(0.5, y, format_value(one.values[-1], panel.unit), color=PALETTE[0], fontsize=22, ha="center",
                  va="center", transform=axes.transAxes)  # fmt: skip
        axes.text(0.5, y - 0.13, one.name, color=TEXT, fontsize=7, ha="center", va="center", transform=axes.transAxes)
