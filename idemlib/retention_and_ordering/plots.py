"""Lesson 10's figures: the table's growth, the retention threshold, pruning latency, TTL reads, arrival orders.

Colours come from the Okabe-Ito palette, which colour-blind readers can tell
apart, and every series carries a second cue (a marker, a line style, a hatch or a
label), so the figures also read in grey.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from idemlib.facts import fact
from idemlib.pictures.plots import OKABE_ITO

BLUE, ORANGE, GREEN, VERMILLION, SKY, PURPLE = (
    OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion", "sky blue", "reddish purple"))


def plot_growth(unpruned: pd.DataFrame, pruned: pd.DataFrame, retention_days: int) -> Figure:
    """Rows and bytes on disk of the inbox table over the days, never pruned (solid) and pruned (dashed)."""
    figure, (rows_ax, bytes_ax) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for frame, style, what in ((unpruned, "-", "never pruned"), (pruned, "--", f"keeps {retention_days} days")):
        rows_ax.plot(frame.index, frame["rows"], style, marker="o", markersize=3, color=BLUE, label=what)
        for column, colour, marker in (("DuckDB file (MB)", ORANGE, "s"), ("PostgreSQL (MB)", BLUE, "^")):
            if column in frame:
                bytes_ax.plot(frame.index, frame[column], style, marker=marker, markersize=4, color=colour,
                              label=f"{column.split(' ')[0]}, {what}")
    rows_ax.set_title("IDs in processed_messages")
    rows_ax.set_ylabel("rows")
    bytes_ax.set_title("Bytes on disk")
    bytes_ax.set_ylabel("MB")
    for ax in (rows_ax, bytes_ax):
        ax.set_xlabel("day of traffic")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle("The inbox grows with every message until a pruning job bounds it")
    return figure


def plot_retention_sweep(sweep: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Total charged for m-7f3 against how far the retention falls short of (or passes) the horizon."""
    ax = ax if ax is not None else plt.subplots(figsize=(7, 3.5))[1]
    x, y = sweep["retention minus horizon (h)"], sweep["total charged"]
    ax.step(x, y, where="post", color=GREEN, linewidth=1)
    for value, colour, marker in ((80, VERMILLION, "X"), (40, GREEN, "o")):
        hit = y == value
        ax.scatter(x[hit], y[hit], color=colour, marker=marker, s=70, zorder=3,
                   label="charged twice ($80)" if value == 80 else "charged once ($40)")
    ax.axvline(0, color="black", linestyle="--", linewidth=1)
    ax.text(0.05, 60, "retention = horizon", fontsize=8)
    ax.set_xlabel("retention minus the horizon (hours)")
    ax.set_ylabel("total charged for m-7f3 ($)")
    ax.set_ylim(0, 95)
    ax.set_title("A late DLQ replay after the ID was pruned charges again")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return ax


def plot_prune_latency(results: dict[str, pd.DataFrame]) -> Figure:
    """Each concurrent insert's latency over time, one panel per pruning method, the pruning itself hatched."""
    # One y scale for every panel, so a stall reads as tall as it is next to the others.
    # Fixed margins, not a layout engine: five log-scaled panels make constrained layout slow to compute.
    figure, axes = plt.subplots(len(results), 1, figsize=(9, 2.3 * len(results)), sharex=True, sharey=True,
                                gridspec_kw={"hspace": 0.45, "top": 0.93, "bottom": 0.07, "left": 0.08, "right": 0.98})
    for ax, (label, frame), (colour, marker) in zip(axes, results.items(),
                                                    ((BLUE, "o"), (ORANGE, "s"), (VERMILLION, "^"), (PURPLE, "D"),
                                                     (GREEN, "v"))):
        start, end = frame.attrs["window"]
        ax.axvspan(start, end, facecolor="none", edgecolor="grey", hatch="//", label="pruning runs")
        ax.scatter(frame["start"], frame["latency"] * 1000, s=8, color=colour, marker=marker, label="one insert")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 3)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylabel("insert (ms)")
        ax.set_title(f"{label}: {frame.attrs['outcome']} in {frame.attrs['pruning seconds'] * 1000:.0f} ms; "
                     f"longest insert {frame['latency'].max() * 1000:.1f} ms", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("seconds since the consumer started inserting (real time, this machine)")
    figure.suptitle("What a consumer inserting new IDs feels while one day of IDs is pruned (PostgreSQL)")
    return figure


def plot_ttl_reads(reads: pd.DataFrame, ttl_hours: float, ax: Axes | None = None) -> Axes:
    """Markers a plain Scan still returns against those a reader filtering on the expiry attribute gets, drawn only
    at the hours that were read (no line claims anything between them)."""
    ax = ax if ax is not None else plt.subplots(figsize=(7, 3.5))[1]
    # Big circles under small squares: where both reads return the same count, both markers still show.
    ax.plot(reads.index, reads.iloc[:, 0], "o", markersize=9, color=ORANGE, label=reads.columns[0])
    ax.plot(reads.index, reads.iloc[:, 1], "s", markersize=4, color=BLUE, label=reads.columns[1])
    ax.axvline(ttl_hours, color="black", linestyle=":", linewidth=1)
    ax.text(ttl_hours + 0.5, 25, "time to live ends", fontsize=8)
    ax.set_xlabel("hours after the markers were written (each marker: one read)")
    ax.set_ylabel("markers a read returns")
    ax.set_ylim(bottom=-2)
    ax.set_title("Expired is not deleted: filter on the expiry attribute\n(key-value model; its deletions spread "
                 f"over an assumed {fact('dynamodb_ttl_model_cap')}, not an AWS figure)")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def plot_ordering_counts(counts: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Per writer, arrival orders ending in the right state (green, plain) and a wrong one (vermillion, hatched)."""
    ax = ax if ax is not None else plt.subplots(figsize=(8, 2.6))[1]
    right = ax.barh(counts.index, counts["right"], color=GREEN, label="ends in the newest state")
    wrong = ax.barh(counts.index, counts["wrong"], left=counts["right"], color=VERMILLION, hatch="xx",
                    edgecolor="white", label="ends in an older state")
    for bars in (right, wrong):
        ax.bar_label(bars, labels=[str(int(b.get_width())) if b.get_width() else "" for b in bars],
                     label_type="center", color="white", fontweight="bold",
                     bbox={"boxstyle": "round,pad=0.2", "facecolor": "black", "alpha": 0.55, "linewidth": 0})
    ax.invert_yaxis()
    ax.set_xlabel(f"arrival orders of PAID, SHIPPED, REFUNDED and two duplicates (of {int(counts['total'].iloc[0])})")
    ax.set_title("Only the version guard ends right whatever the order")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    return ax
