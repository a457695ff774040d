"""Figures drawn from traces and result tables, labelled so that they read on their own.

Colours come from the Okabe-Ito palette, which stays distinguishable for the common
kinds of colour blindness, and no figure relies on colour alone: every outcome also
has a hatching and is written out in text, every line and event its own marker.
Importing this module makes that palette the default colour cycle and turns on
constrained layout, so a cell that draws with matplotlib directly gets both too.
"""

from __future__ import annotations

import re

import matplotlib as mpl
import matplotlib.pyplot as plt
import pandas as pd
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.patches import Patch, Rectangle

OKABE_ITO = {
    "blue": "#0072B2", "orange": "#E69F00", "bluish green": "#009E73", "vermillion": "#D55E00",
    "sky blue": "#56B4E9", "reddish purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000",
}
"""Okabe and Ito's colour-blind-safe palette (Color Universal Design, 2008)."""

OUTCOME_COLOURS = {"charge lost": OKABE_ITO["orange"], "charged once": OKABE_ITO["bluish green"],
                   "charged twice": OKABE_ITO["vermillion"]}
OUTCOME_HATCHES = {"charge lost": "..", "charged once": "", "charged twice": "xx"}
"""The second cue for an outcome, for readers (and printers) who cannot tell the colours apart."""

LONG_WORK_OUTCOMES = {"once, after a wait": (OKABE_ITO["sky blue"], "//", "white"),
                      "stuck, dead-lettered": (OKABE_ITO["reddish purple"], "\\\\", "white"),
                      "local row twice": (OKABE_ITO["yellow"], "++", "black")}
"""Lesson 09's own outcomes, each with its colour and, as a second cue, its hatching and the hatching's colour:
charged once but only after deliveries were refused as in progress; dead-lettered while the record still says
in progress; the card charged once but the local payment row twice. Kept apart so other lessons' legends stay
as they are."""

LINE_STYLES = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--")]
"""Marker and dash for the n-th line of a figure, so lines differ by more than colour."""

mpl.rcParams.update({
    "axes.prop_cycle": cycler(color=[OKABE_ITO[name] for name in
                                     ("blue", "orange", "bluish green", "vermillion", "sky blue", "reddish purple")]),
    # Lays out titles, suptitles, labels and outside legends so none overlaps another.
    "figure.constrained_layout.use": True,
    "hatch.linewidth": 1.0,
})

EVENT_MARKERS = {
    "delivered": ("v", OKABE_ITO["blue"]),
    "step": (".", "#777777"),
    "charged": (r"$\$$", OKABE_ITO["vermillion"]),
    "charge rolled back": (r"$\$$", "#999999"),
    "committed": ("s", OKABE_ITO["bluish green"]),
    "acked": ("^", OKABE_ITO["bluish green"]),
    "ack lost": ("x", OKABE_ITO["vermillion"]),
    "crashed": ("X", OKABE_ITO["black"]),
    "duplicate skipped": ("D", OKABE_ITO["orange"]),
    "conflict": ("*", OKABE_ITO["reddish purple"]),
    "lease expired": ("|", OKABE_ITO["sky blue"]),
    "rejected": ("P", OKABE_ITO["reddish purple"]),
    "dead-lettered": ("o", OKABE_ITO["black"]),
}


def outcome_patch(outcome: str) -> Patch:
    """A legend entry for an outcome: its colour and its hatching."""
    return Patch(facecolor=OUTCOME_COLOURS[outcome], hatch=OUTCOME_HATCHES[outcome], edgecolor="white", label=outcome)


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
    for number, (name, rows) in enumerate(sweep.groupby("handler", sort=False)):
        marker, dashes = LINE_STYLES[number % len(LINE_STYLES)]
        ax.plot(rows["rate"], rows[measure], marker=marker, linestyle=dashes,
                label=f"{name}" if " " in name else f"{name} consumer")
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
    """One cell per (handler, fault), coloured, hatched and labelled by its outcome.

    ``matrix`` is the table from :func:`idemlib.explore.crash_matrix` (its first column
    ``handler``, or ``setup``); each row of the figure lists
    one handler's faults in the order its steps run. Each cell writes its outcome
    in words too, a cue that needs no colour vision, and says it where the dollars
    alone do not (an outcome over several effects).
    """
    matrix = matrix.rename(columns={"setup": "handler"})
    handlers = list(dict.fromkeys(matrix["handler"]))
    width = matrix.groupby("handler").size().max()
    ax = _axes(ax, (2.0 * width, 0.9 * len(handlers) + 1.2))
    for row, name in enumerate(handlers):
        cells = matrix[matrix["handler"] == name].reset_index(drop=True)
        for column, cell in cells.iterrows():
            y = len(handlers) - 1 - row
            outcome = cell["outcome"]
            colour, hatch, lines = LONG_WORK_OUTCOMES.get(
                outcome, (OUTCOME_COLOURS.get(outcome), OUTCOME_HATCHES.get(outcome, ""), "white"))
            ax.add_patch(Rectangle((column, y), 0.94, 0.9, facecolor=colour, hatch=hatch, edgecolor=lines, linewidth=0))
            label = re.sub(r"^crash (before|after) ", r"crash \1\n", str(cell["fault"]))
            ax.text(column + 0.47, y + 0.45, f"{label}\n${cell['total charged']}: {outcome}", ha="center",
                    va="center", fontsize=7.5, color="black",
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.85, "linewidth": 0})
    ax.set_xlim(0, width)
    ax.set_ylim(0, len(handlers))
    ax.set_yticks([len(handlers) - 1 - i + 0.45 for i in range(len(handlers))], handlers)
    ax.set_ylabel("handler")
    ax.set_xticks([])
    ax.set_xlabel("the one fault injected on the first delivery, in step order (redelivery then runs clean)")
    ax.set_title(title, pad=24)  # room for the legend between the title and the cells
    shown = set(matrix["outcome"])  # a legend entry for an outcome no cell shows would only mislead
    handles = [outcome_patch(outcome) for outcome in OUTCOME_COLOURS if outcome in shown]
    handles += [Patch(facecolor=c, hatch=h, edgecolor=lines, label=o)
                for o, (c, h, lines) in LONG_WORK_OUTCOMES.items() if o in shown]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), frameon=False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return ax


ROLLBACK_EVENTS = {"crashed", "rolled back", "conflict", "rejected", "provider failed", "response lost", "failed"}
"""Events after which a consumer's open transaction is gone, with every write in it."""


def undone_charges(trace: pd.DataFrame) -> pd.Index:
    """The ``charged`` events whose transaction never committed: the charge was rolled back with it.

    A charge counts as undone when its delivery opened a transaction before it
    (a ``begin`` step) and then ended in a crash or a failure instead of a commit.
    Handlers that commit each write on its own (ID first, work first) open none, so
    their charges stand the moment they are made.
    """
    undone: list[int] = []
    for _, events in trace.groupby(["actor", "message_id", "delivery"], sort=False):
        pending: list[int] = []
        in_transaction = False
        for index, event, detail in zip(events.index, events["event"], events["detail"]):
            if event == "step" and detail == "begin":
                in_transaction = True
            elif event == "charged" and in_transaction:
                pending.append(index)
            elif event == "committed":
                pending, in_transaction = [], False
            elif event in ROLLBACK_EVENTS:
                undone += pending
                pending, in_transaction = [], False
        undone += pending  # a run that ended mid-transaction rolled it back too
    return pd.Index(sorted(undone))


def plot_timeline(trace: pd.DataFrame, ax: Axes | None = None, *, title: str = "What happened, and when") -> Axes:
    """Each actor's events on a shared time axis: deliveries, steps, commits, acks, crashes.

    ``trace`` is a run's trace (``RunResult.trace``); the published events are left out.
    A charge whose transaction was rolled back (a crash, or a conflict at commit) is
    drawn grey and labelled *rolled back*: it was made, and then undone.
    """
    events = trace[trace["event"] != "published"].copy()
    rolled_back = undone_charges(events)
    events.loc[rolled_back, "event"] = "charge rolled back"
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
    for _, row in events.loc[rolled_back].iterrows():  # words, not only a grey colour, say it was undone
        ax.annotate("rolled back", (row["time"], actors.index(row["actor"])), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize=7, color="#555555")
    ax.set_yticks(range(len(actors)), actors)
    ax.set_ylabel("who")
    ax.set_ylim(-0.6, len(actors) - 0.4)
    ax.set_xlabel("simulated time (s)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def plot_outcome_counts(counts: pd.DataFrame, ax: Axes | None = None, *, title: str, xlabel: str,
                        ylabel: str = "handler") -> Axes:
    """Stacked horizontal bars: for each row of ``counts`` (a handler, a store...), how many runs ended in each outcome.

    ``counts`` has one column per outcome (``charge lost``, ``charged once``,
    ``charged twice``); missing columns count as zero.
    """
    counts = counts.reindex(columns=list(OUTCOME_COLOURS), fill_value=0).fillna(0)
    ax = _axes(ax, (8, 0.7 * len(counts) + 1.6))
    left = pd.Series(0, index=counts.index, dtype=float)
    for outcome, colour in OUTCOME_COLOURS.items():
        bars = ax.barh(counts.index, counts[outcome], left=left, color=colour, hatch=OUTCOME_HATCHES[outcome],
                       edgecolor="white", label=outcome)
        ax.bar_label(bars, labels=[str(int(v)) if v else "" for v in counts[outcome]], label_type="center",
                     fontweight="bold", bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "linewidth": 0})
        left += counts[outcome]
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    # Beside the bars, never on them.
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, title="outcome")
    return ax


def plot_totals(totals: pd.Series, owed: int, ax: Axes | None = None, *, title: str, xlabel: str) -> Axes:
    """One bar per run (a consumer, a setting): dollars charged, against what the customer owes.

    Each bar is coloured, hatched and labelled by its outcome: below what is owed a
    charge was lost, above it someone paid twice.
    """
    ax = _axes(ax, (6, 3.2))
    outcomes = ["charge lost" if value < owed else "charged once" if value == owed else "charged twice"
                for value in totals.values]
    bars = ax.bar(totals.index.astype(str), totals.values, color=[OUTCOME_COLOURS[o] for o in outcomes],
                  hatch=[OUTCOME_HATCHES[o] for o in outcomes], edgecolor="white")
    ax.bar_label(bars, labels=[f"${value:,}: {outcome}" for value, outcome in zip(totals.values, outcomes)])
    ax.axhline(owed, color="black", linestyle="--", linewidth=1, label=f"what is owed: ${owed:,}")
    ax.set_ylim(0, max(max(totals.values), owed) * 1.25)
    ax.set_ylabel("total charged ($)")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(handles=[*ax.get_legend_handles_labels()[0], *(outcome_patch(o) for o in dict.fromkeys(outcomes))],
              loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return ax


def plot_waits(races: pd.DataFrame, ax: Axes | None = None, *,
               title: str = "How long B waited, against how long A held its transaction") -> Axes:
    """Two bars per race, measured in real seconds: A's hold and B's waiting step, each labelled in milliseconds.

    B's waiting step is the one at which the engine showed B waiting for A (``b_waited_at``).

    ``races`` has the columns of :class:`idemlib.races.RaceOutcome` (one row per race).
    """
    labels = races["engine"] + ", A " + races["a_then"] + "\n(B waited at " + races["b_waited_at"] + ")"
    ax = _axes(ax, (8, 0.9 * len(races) + 1.4))
    rows = range(len(races))
    series = [("A held its transaction", races["a_held_seconds"], OKABE_ITO["blue"], "//", -0.2),
              ("B's waiting step took", races["b_wait_seconds"], OKABE_ITO["orange"], "", 0.2)]
    for label, seconds, colour, hatch, offset in series:
        bars = ax.barh([row + offset for row in rows], seconds, height=0.38, color=colour, hatch=hatch,
                       edgecolor="white", label=label)
        ax.bar_label(bars, labels=[f"{value * 1000:.1f} ms" for value in seconds], padding=3, fontsize=8)
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(races["a_held_seconds"].max(), races["b_wait_seconds"].max()) * 1.25)
    ax.set_xlabel("seconds, measured on this machine (wall clock)")
    ax.set_ylabel("race")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return ax


def plot_retry_settings(grid: pd.DataFrame, *, title: str) -> tuple[Axes, Axes, Axes]:
    """Extra charges, payments never made, and dead letters already charged, against the delivery limit,
    one line per lease length.

    ``grid`` is the table from :func:`idemlib.explore.retry_settings`.
    """
    fig, panels = plt.subplots(1, 3, figsize=(13, 3.6), sharex=True)
    columns = (("extra charges", "duplicates that got through"),
               ("payments never made", "messages lost"),
               ("dead-lettered, already charged", "dead letters a replay charges again"))
    for number, (lease, rows) in enumerate(grid.groupby("lease (s)")):
        marker, dashes = LINE_STYLES[number % len(LINE_STYLES)]
        for ax, (column, _) in zip(panels, columns):
            ax.plot(rows["max deliveries"], rows[column], marker=marker, linestyle=dashes, label=f"lease {lease:g} s")
    for ax, (column, what) in zip(panels, columns):
        ax.set_ylabel(f"{column} (count)")
        ax.set_xlabel("deliveries allowed before the dead-letter queue")
        ax.set_title(what)
        ax.set_ylim(bottom=0)
        ax.set_xticks(sorted(grid["max deliveries"].unique()))  # only the limits that were run
        ax.grid(alpha=0.3)
    panels[0].invert_xaxis()  # shared by all panels: generous retries on the left, none on the right
    panels[0].legend(loc="lower left", frameon=False)
    fig.suptitle(title)
    return panels[0], panels[1], panels[2]
