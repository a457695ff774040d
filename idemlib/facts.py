"""The figures the lessons quote, read from ``data/facts.csv`` so each is written once.

Every row names its source, so a reader can check a figure and a maintainer can
update it in one place.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler


def _facts_file() -> Path:
    """The repository's ``data/facts.csv``; where the course is installed, not cloned (a hub's image), the copy its
    ``binder/postBuild`` puts in the environment's ``share/idemlib/data``."""
    beside = Path(__file__).resolve().parent.parent / "data" / "facts.csv"
    installed = Path(sys.prefix) / "share" / "idemlib" / "data" / "facts.csv"
    return installed if not beside.exists() and installed.exists() else beside


FACTS_FILE = _facts_file()


class WholeText(Styler):
    """A styled table of quotes and notes that reads whole everywhere.

    In JupyterLab and on the site the HTML wraps each long text in its cell; read as plain text (an
    executed notebook in a terminal, a diff, a screen reader fed ``text/plain``) a ``Styler`` would
    print only ``<Styler object at 0x…>``, losing the very evidence it shows, so this one prints the
    table with every text uncut.
    """

    def __repr__(self) -> str:
        """One block per row, ``column: text`` a line, so a long quote is neither cut nor padded."""
        # pandas keeps hide(axis="index") as one flag per index level in hide_index_ (1.4 and later)
        hidden = bool(getattr(self, "hide_index_", [False])[0])
        blocks = []
        for name, row in self.data.iterrows():
            lines = [] if hidden else [" · ".join(map(str, name)) if isinstance(name, tuple) else str(name)]
            lines += [f"{column}: {text}" for column, text in row.items()]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)


def whole_text(frame: pd.DataFrame, columns: list[str] | None = None) -> WholeText:
    """``frame`` styled so its long texts wrap, left-aligned, in HTML and print uncut as plain text."""
    return WholeText(frame).set_properties(subset=columns, **{"text-align": "left", "white-space": "normal"})


class FactsTable(pd.DataFrame):
    """Facts rows as a reader sees them: indexed by the fact's name for code, shown without it.

    A fact's name (``sqs_max_receive_count``) is the course's own key, not something a reader
    should have to read; a table of facts shows its subject, quote and version instead.
    """

    @property
    def _constructor(self) -> type[FactsTable]:
        return FactsTable

    @property
    def style(self) -> Any:
        return whole_text(self).hide(axis="index")

    def _repr_html_(self) -> str | None:
        return self.style.to_html()


@cache
def load_facts() -> FactsTable:
    """All the quoted figures, one row each, indexed by the fact's name (shown without it)."""
    return FactsTable(pd.read_csv(FACTS_FILE, dtype=str).set_index("fact"))


def fact(name: str) -> str:
    """A figure with its unit, as a lesson prints it (``fact("sqs_retention_default")`` gives ``4 days``)."""
    facts = load_facts()
    if name not in facts.index:
        raise KeyError(f"no fact named {name!r} in {FACTS_FILE.name}; add a row with its value, unit and source")
    row = facts.loc[name]
    return f"{row['value']} {row['unit']}"


SECONDS_PER = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


def fact_seconds(name: str) -> float:
    """A duration fact in seconds (``fact_seconds("stripe_v1_key_min_age")`` gives 86400.0)."""
    row = load_facts().loc[name]
    if row["unit"] not in SECONDS_PER:
        raise ValueError(f"fact {name!r} is in {row['unit']!r}, not a duration")
    return float(row["value"]) * SECONDS_PER[row["unit"]]


@cache  # the table is read once (load_facts); a helper such as provider.key_of_call asks for a number per call
def fact_number(name: str) -> int:
    """A fact that is a whole number, such as an HTTP status (``fact_number("ietf_draft06_in_progress_status")`` gives 409)."""
    return int(load_facts().loc[name]["value"])
