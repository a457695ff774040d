"""Lesson 12's figures: the two wrong reactions, the five mistakes against their fix, the five-question review.

Okabe-Ito colours, which colour-blind readers can tell apart, and a second cue on
every mark (a hatch, or a ✓ / ✗ written in the cell), so the figures read in grey too.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from idemlib.pictures.plots import OKABE_ITO

BLUE, ORANGE, GREEN, VERMILLION = (OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion"))


def _bars(ax: Axes, labels: list[str], series: dict[str, tuple[list[int], str, str]]) -> None:
    """Grouped horizontal bars, one group per label, each series with its colour and hatch, values written."""
    height = 0.8 / len(series)
    y = np.arange(len(labels))
    for number, (name, (values, colour, hatch)) in enumerate(series.items()):
        offsets = y + (number - (len(series) - 1) / 2) * height
        bars = ax.barh(offsets, values, height=height, color=colour, hatch=hatch, edgecolor="black", label=name)
        ax.bar_label(bars, padding=3)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, max(max(values) for values, _, _ in series.values()) * 1.12 + 0.2)
    ax.grid(axis="x", alpha=0.3)
    # Below the axes (the figure's constrained layout makes room), so no legend ever covers a bar.
    ax.figure.legend(loc="outside lower center", ncol=2, fontsize=9, frameon=False)


def plot_retry_policies(table: pd.DataFrame) -> Figure:
    """Applications with duplicate accounts and with no account, for each retry policy."""
    figure, ax = plt.subplots(figsize=(9, 4.2), layout="constrained")
    _bars(ax, list(table["policy"]), {
        "applications with two or more accounts": (list(table["two or more accounts"]), VERMILLION, "//"),
        "applications with no account (dead-lettered)": (list(table["no account"]), ORANGE, ".."),
    })
    ax.set_xlabel("applications (of the day's approvals)")
    ax.set_title("No retries lose accounts; careful retries still duplicate")
    return figure


def plot_mistakes(table: pd.DataFrame) -> Figure:
    """For each mistake, accounts and payouts under its failure, with the mistake and with the inbox."""
    figure, ax = plt.subplots(figsize=(9, 6), layout="constrained")
    _bars(ax, list(table["mistake"]), {
        "accounts, with the mistake": (list(table["accounts"]), VERMILLION, "//"),
        "payouts, with the mistake": (list(table["payouts"]), ORANGE, "\\\\"),
        "accounts, fixed": (list(table["accounts, fixed"]), BLUE, ""),
        "payouts, fixed": (list(table["payouts, fixed"]), GREEN, ".."),
    })
    ax.axvline(1, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("count for application 42 (dashed line: the one right answer, 1)")
    ax.set_title("Each mistake doubles an account or a payout; the fix does not")
    return figure


def plot_review(review: pd.DataFrame) -> Figure:
    """The five questions (columns Q1-Q5) for each design (rows): ✓ on blue where the runs came out right,
    ✗ on vermillion with the wrong outcome written under it."""
    ok = review.apply(lambda column: column.eq("yes"))
    figure, ax = plt.subplots(figsize=(11, 0.62 * len(ok) + 1.4), layout="constrained")
    ax.imshow(ok.to_numpy(dtype=float), cmap=plt.matplotlib.colors.ListedColormap([VERMILLION, BLUE]),
              vmin=0, vmax=1, aspect="auto")
    for (row, column), answer in np.ndenumerate(review.to_numpy()):
        good = answer == "yes"
        text = "✓ yes" if good else "✗ no\n" + textwrap.fill(answer.removeprefix("no: "), 22)
        ax.text(column, row, text, ha="center", va="center", color="white", fontweight="bold",
                fontsize=10 if good else 7)
    ax.set_xticks(range(ok.shape[1]), list(ok.columns))
    ax.set_yticks(range(len(ok)), list(ok.index))
    ax.set_xlabel("the five questions, in section 7's order (spelled out above)")
    ax.set_title("Five questions, answered by running each design")
    return figure
