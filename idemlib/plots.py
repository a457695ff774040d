"""Figures drawn from traces and result tables, labelled so that they read on their own."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch, Rectangle

OUTCOME_COLOURS = {"charge lost": "#e0a030", "charged once": "#4c9a5f", "charged twice": "#c8453c"}
BLOCKED_OUTCOME = {"blocked": ("#3b6fb6", "//", "#8fb0dc")}
"""Lesson 09's fourth outcome (charged once, but only after deliveries were refused as in progress): its
colour and, as a second cue, its hatching and the hatching's colour (pale, so the cell's text stays legible).
Kept apart so other lessons' legends stay as they are."""

EVENT_MARKERS = {
    "delivered": ("v", "#3b6fb6"),
    "step": (".", "#777777"),
    "charged": (r"$\$$", "#c8453c"),
    "committed": ("s", "#4c9a5f"),
    "acked": ("^", "#2b8a3e"),
    "ack lost": ("x", "#c8453c"),
    "crashed": ("X", "#000000"),
    "duplicate skipped": ("D", "#e0a030"),
    "conflict": ("*", "#8e44ad"),
    "lease expired": ("|", "#3b6fb6"),
    "rejected": ("P", "#8e44ad"),
    "dead-lettered": ("o", "#000000"),
}


def _axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    return ax if ax is not None else plt.subplots(figsize=size)[1]


def plot_sweep(
    sweep: pd.DataFrame,
    ax: Axes | None = None,
    *,
    measure: str = "total charged",
    xlabel: str = "share of acks lost on the way to the broker",
    title: str = "Lost acks become extra charges, unless the consumer keeps an inbox",
) -> Axes:
    """A measure (total charged, or charged at provider) against a fault rate, one line per handler.

    ``sweep`` is the table from :func:`idemlib.explore.fault_sweep`; the dashed line
    is what the customers owe.
    """
    ax = _axes(ax, (7, 4))
    for name, rows in sweep.groupby("handler", sort=False):
        ax.plot(rows["rate"], rows[measure], marker="o", label=f"{name}" if " " in name else f"{name} consumer")
    expected = sweep["expected total"].iloc[0]
    ax.axhline(expected, color="black", linestyle="--", linewidth=1, label=f"what customers owe: ${expected:,}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{measure} ($)")
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3)
    return ax


def plot_crash_matrix(matrix: pd.DataFrame, ax: Axes | None = None, *,
                      title: str = "What one crash or lost ack does to a $40 charge, by handler") -> Axes:
    """One coloured cell per (handler, fault): green charged once, amber charge lost, red charged twice.

    ``matrix`` is the table from :func:`idemlib.explore.crash_matrix` (or
    ``store_matrix``, whose first column is ``setup``); each row of the figure lists
    one handler's faults in the order its steps run.
    """
    matrix = matrix.rename(columns={"setup": "handler"})
    handlers = list(dict.fromkeys(matrix["handler"]))
    width = matrix.groupby("handler").size().max()
    ax = _axes(ax, (2.0 * width, 0.9 * len(handlers) + 1.2))
    for row, name in enumerate(handlers):
        cells = matrix[matrix["handler"] == name].reset_index(drop=True)
        for column, cell in cells.iterrows():
            y = len(handlers) - 1 - row
            colour, hatch, lines = BLOCKED_OUTCOME.get(cell["outcome"], (OUTCOME_COLOURS.get(cell["outcome"]), None, "white"))
            ax.add_patch(Rectangle((column, y), 0.94, 0.9, facecolor=colour, hatch=hatch, edgecolor=lines))
            label = re.sub(r"^crash (before|after) ", r"crash \1\n", str(cell["fault"]))
            ax.text(column + 0.47, y + 0.45, f"{label}\n${cell['total charged']}", ha="center", va="center",
                    fontsize=8, color="white", fontweight="bold")
    ax.set_xlim(0, width)
    ax.set_ylim(0, len(handlers))
    ax.set_yticks([len(handlers) - 1 - i + 0.45 for i in range(len(handlers))], handlers)
    ax.set_xticks([])
    ax.set_xlabel("the one fault injected on the first delivery, in step order (redelivery then runs clean)")
    ax.set_title(title)
    handles = [Patch(color=c, label=o) for o, c in OUTCOME_COLOURS.items()]
    handles += [Patch(facecolor=c, hatch=h, edgecolor=lines, label=o)
                for o, (c, h, lines) in BLOCKED_OUTCOME.items() if o in set(matrix["outcome"])]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(handles), frameon=False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return ax


def plot_timeline(trace: pd.DataFrame, ax: Axes | None = None, *, title: str = "What happened, and when") -> Axes:
    """Each actor's events on a shared time axis: deliveries, steps, commits, acks, crashes.

    ``trace`` is a run's trace (``RunResult.trace``); the published events are left out.
    """
    events = trace[trace["event"] != "published"]
    actors = list(dict.fromkeys(["broker", *sorted(events["actor"].unique())]))
    ax = _axes(ax, (9, 1.1 * len(actors) + 1.5))
    # A bar per delivery from its hand-over to its last event: how long the consumer held it.
    held = events[events["actor"] != "broker"].groupby(["actor", "message_id", "delivery"])["time"].agg(["min", "max"])
    for (actor, _, _), span in held.iterrows():
        ax.plot([span["min"], span["max"]], [actors.index(actor)] * 2, color="#bbbbbb", linewidth=6,
                solid_capstyle="round", zorder=1)
    for event, (marker, colour) in EVENT_MARKERS.items():
        rows = events[events["event"] == event]
        if rows.empty:
            continue
        ys = [actors.index(actor) for actor in rows["actor"]]
        ax.scatter(rows["time"], ys, marker=marker, color=colour, s=70, label=event, zorder=3)
    for _, row in events[events["event"] == "delivered"].iterrows():
        ax.annotate(f"{row['message_id']} #{row['delivery']}", (row["time"], actors.index(row["actor"])),
                    textcoords="offset points", xytext=(0, 9), ha="center", fontsize=7)
    ax.set_yticks(range(len(actors)), actors)
    ax.set_ylim(-0.6, len(actors) - 0.4)
    ax.set_xlabel("simulated time (s)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def plot_outcome_counts(counts: pd.DataFrame, ax: Axes | None = None, *, title: str, xlabel: str) -> Axes:
    """Stacked horizontal bars: for each row of ``counts`` (a handler, a store...), how many runs ended in each outcome.

    ``counts`` has one column per outcome (``charge lost``, ``charged once``,
    ``charged twice``); missing columns count as zero.
    """
    counts = counts.reindex(columns=list(OUTCOME_COLOURS), fill_value=0).fillna(0)
    ax = _axes(ax, (8, 0.7 * len(counts) + 1.6))
    left = pd.Series(0, index=counts.index, dtype=float)
    for outcome, colour in OUTCOME_COLOURS.items():
        bars = ax.barh(counts.index, counts[outcome], left=left, color=colour, label=outcome)
        ax.bar_label(bars, labels=[str(int(v)) if v else "" for v in counts[outcome]], label_type="center",
                     color="white", fontweight="bold")
        left += counts[outcome]
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, frameon=False)
    return ax
