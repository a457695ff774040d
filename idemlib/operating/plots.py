"""Figures for operating a consumer: the skip rate over a day, and throughput against batch size.

Colours are from the Okabe-Ito palette, which stays distinct for colour-blind
readers, and every series has a second cue besides colour (a marker, a line
style, or a text label), so the figures also read in greyscale.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes

from idemlib.operating.day import clock_time

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
MARKERS = ("o", "s", "^", "D", "v", "P")
LINES = ("-", "--", ":", "-.")


def plot_skip_rates(days: dict[str, pd.DataFrame], ax: Axes | None = None, *, threshold: float | None = None,
                    fired: dict[str, float | None] | None = None,
                    title: str = "Duplicates skipped per window: a rise means something changed") -> Axes:
    """The skip rate of each day (``skip_rate`` tables) against the hour, with the alert's threshold and firings."""
    ax = ax if ax is not None else plt.subplots(figsize=(9, 4))[1]
    for n, (name, rates) in enumerate(days.items()):
        hours = rates.index / 3600
        ax.plot(hours, rates["skip rate"], color=OKABE_ITO[n], marker=MARKERS[n], linestyle=LINES[n], markersize=3,
                linewidth=1.2, label=name)
        moment = (fired or {}).get(name)
        if moment is not None:
            ax.axvline(moment / 3600, color=OKABE_ITO[n], linestyle=LINES[n], linewidth=1)
            ax.annotate(f"alert: {clock_time(moment)}", (moment / 3600, 0.95),
                        xycoords=("data", "axes fraction"), xytext=(4, -12 * n), textcoords="offset points",
                        fontsize=8, color=OKABE_ITO[n])
    if threshold is not None:
        ax.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"alert threshold: {threshold:.0%}")
    ax.set_xlim(0, 24)
    ax.set_xticks(range(0, 25, 3))
    ax.set_xlabel("hour of the simulated day")
    ax.set_ylabel("skip rate (skipped / handled)")
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_throughput(table: pd.DataFrame, ax: Axes | None = None, *,
                    title: str = "What the batched inbox keeps of a raw bulk insert's rate") -> Axes:
    """The two ratios the lesson reasons about, against batch size: the inbox's transactions alone over the raw bulk
    insert (dotted), and the whole consumer over the raw insert (solid), one colour and marker per engine.

    ``table`` is :func:`idemlib.operating.costs.batch_throughput`'s.
    """
    ax = ax if ax is not None else plt.subplots(figsize=(8, 4.5))[1]
    series = (("transactions / raw", ":", "left", "inbox transactions / raw insert"),
              ("consumer / raw", "-", "full", "whole consumer / raw insert"))
    for n, (engine, rows) in enumerate(table.groupby("engine", sort=False)):
        for column, line, fill, label in series:
            ax.plot(rows["batch size"], rows[column], color=OKABE_ITO[n], marker=MARKERS[n], linestyle=line,
                    fillstyle=fill, label=f"{engine}: {label}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("batch size (messages per transaction)")
    ax.set_ylabel("share of the raw insert's rate")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(alpha=0.3, which="both")
    return ax
