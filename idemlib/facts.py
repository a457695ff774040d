"""The figures the lessons quote, read from ``data/facts.csv`` so each is written once.

Every row names its source, so a reader can check a figure and a maintainer can
update it in one place.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

FACTS_FILE = Path(__file__).resolve().parent.parent / "data" / "facts.csv"


@cache
def load_facts() -> pd.DataFrame:
    """All the quoted figures, one row each, indexed by the fact's name."""
    return pd.read_csv(FACTS_FILE, dtype=str).set_index("fact")


def fact(name: str) -> str:
    """A figure with its unit, as a lesson prints it (``fact("sqs_retention_default")`` gives ``4 days``)."""
    facts = load_facts()
    if name not in facts.index:
        raise KeyError(f"no fact named {name!r} in {FACTS_FILE.name}; add a row with its value, unit and source")
    row = facts.loc[name]
    return f"{row['value']} {row['unit']}"
