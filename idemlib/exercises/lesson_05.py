"""Checks for lesson 05, Choosing the ID."""

from __future__ import annotations

from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.ids import STRATEGIES, compare_strategies, twin_facts

__all__ = ["check_id_strategies"]


@exercise
def check_id_strategies(answer: Any) -> Feedback:
    """Lesson 05: which strategy catches every duplicate, which only redeliveries, which drops real payments."""
    cases = ("catches every duplicate", "catches redeliveries only", "drops real payments")
    if (missing := blank(answer, f"a dict with the keys {list(cases)}")) is not None:
        return missing
    if not isinstance(answer, dict) or set(answer) != set(cases):
        return hint(f"Answer with a dict with exactly these keys: {list(cases)}; values among {list(STRATEGIES)}.")
    measured = compare_strategies(twin_facts(30, twins=2), share=0.3)
    table = measured.groupby("strategy").sum(numeric_only=True)
    misses_new_copies = measured[~measured["source of duplicates"].isin(["redelivery", "all at once"])]
    truth = {
        "catches every duplicate": table[(table["duplicates missed"] == 0) & (table["real messages dropped"] == 0)].index[0],
        "catches redeliveries only": misses_new_copies.groupby("strategy")["duplicates caught"].sum().idxmin(),
        "drops real payments": table["real messages dropped"].idxmax(),
    }
    wrong = [case for case in cases if answer[case] != truth[case]]
    if not wrong:
        return right("producer IDs catch everything, broker IDs only redeliveries, and a hash of the bytes "
                      "drops real payments that look alike.")
    return hint(f"Look again at: {', '.join(wrong)}. Read the table row by row: which strategy has duplicates missed, "
                 "which has real messages dropped?")
