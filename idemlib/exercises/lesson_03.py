"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import interleavings
from idemlib.handlers import WorkFirstHandler
from idemlib.races import race
from idemlib.stores import DuckDBPayments

__all__ = ["check_race_loser", "check_interleaving_count"]


@exercise
def check_race_loser(answer: Any) -> Feedback:
    """Lesson 03: on DuckDB, with A holding its transaction open while B runs, who fails and where (``"A at commit"``)."""
    if (missing := blank(answer, 'a string such as "B at record id" or "nobody"')) is not None:
        return missing
    outcome = race(DuckDBPayments())
    if str(answer).strip() == outcome.failed:
        return right(f"{outcome.failed}: DuckDB lets both insert, and whoever commits second fails.")
    if str(answer).strip().startswith("B"):
        return hint("B never had to wait, and it committed while A was still holding its transaction open. "
                     "Who then tries to commit second?")
    return hint("Under DuckDB's optimistic concurrency nobody waits; the clash is found when a transaction commits. "
                 'Answer in the form "A at begin", "B at commit" or "nobody".')


@exercise
def check_interleaving_count(answer: Any) -> Feedback:
    """Lesson 03: how many distinct interleavings of two work-first consumers charge twice."""
    if (missing := blank(answer, "a whole number")) is not None:
        return missing
    table = interleavings(WorkFirstHandler())
    twice = int((table["outcome"] == "charged twice").sum())
    if answer == twice:
        return right(f"{twice} of {len(table)} interleavings charge twice: the check outside the transaction lets both pass.")
    if answer == len(table):
        return hint("That counts every interleaving. Some are safe: which ones, and why?")
    return hint(f"Not {answer}. Count the rows of interleavings(WorkFirstHandler()) whose outcome is 'charged twice'.")
