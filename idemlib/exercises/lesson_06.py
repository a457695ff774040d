"""Checks for lesson 06, Where to remember IDs."""

from __future__ import annotations

from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import (
    places_to_remember,
    store_matrix,
)
from idemlib.stores.cache import MemoryCache

__all__ = ["check_store_window"]


@exercise
def check_store_window(setup: Any, fault: Any) -> Feedback:
    """Lesson 06: a (store, crash point) where a cache outside the transaction charges twice."""
    for value, what in ((setup, "a store's label from the matrix"), (fault, "a fault such as 'crash before commit'")):
        if (missing := blank(value, what)) is not None:
            return missing
    setups = places_to_remember(MemoryCache())
    if setup not in setups:
        return hint(f"No store labelled {setup!r}; the labels are {list(setups)}.")
    table = store_matrix({setup: setups[setup]})
    row = table[table["fault"] == fault]
    if row.empty:
        return hint(f"{setup!r} has no fault {fault!r}; its faults are {list(table['fault'])}.")
    if row["outcome"].iloc[0] == "charged twice":
        return right(f"{setup}, {fault}: the charge is committed but the ID never claimed, so the redelivery charges again.")
    return hint(f"{setup}, {fault} ends in '{row['outcome'].iloc[0]}'. Which order saves the work before the ID, "
                 "and where can a crash fall between the two?")
