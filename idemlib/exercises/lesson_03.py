"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

import math
import re
from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import interleavings
from idemlib.handlers import IdFirstHandler
from idemlib.races import race
from idemlib.stores import DuckDBPayments

__all__ = ["check_race_loser", "check_interleaving_count"]


def _swap_roles(failed: str) -> str:
    return failed.translate(str.maketrans("AB", "BA"))


def _read_loser(answer: str) -> str:
    """``"consumer B at COMMIT"``, ``"b at commit"`` and ``"B, at commit"`` all read as ``"B at commit"``."""
    words = re.sub(r"\bconsumer\b|[,.]", " ", answer.strip().lower()).split()
    if words == ["nobody"] or words == ["none"]:
        return "nobody"
    if len(words) >= 3 and words[0] in ("a", "b") and words[1] == "at":
        return f"{words[0].upper()} at {' '.join(words[2:])}"
    return answer.strip()


@exercise
def check_race_loser(answer: Any) -> Feedback:
    """Lesson 03: DuckDB, roles swapped: B holds its transaction open while A runs the whole handler.

    The check runs the lesson's real race (A holds, B runs) on DuckDB and swaps the
    names, since the two consumers run the same code.
    """
    if (missing := blank(answer, 'a string such as "A at record id" or "nobody"')) is not None:
        return missing
    if not isinstance(answer, str):
        return hint('Answer with a string such as "A at record id", "B at begin" or "nobody".')
    truth = _swap_roles(race(DuckDBPayments(), hold_seconds=0.1).failed)
    given = _read_loser(answer)
    if given == truth:
        return right(f"{truth}: DuckDB lets both insert, nobody waits, and whoever commits second fails.")
    if given == _swap_roles(truth):
        return hint("That is the race of section 3, where A was the slow one. Here B holds its transaction open "
                     "and A runs the whole handler. Who reaches COMMIT second now?")
    if given == "nobody":
        return hint("Both transactions wrote the same message_id, and only one of them can keep it. DuckDB does not "
                     "make anyone wait: so one of them must fail. Which one, and when does DuckDB find out?")
    if given.endswith(("record id", "begin", "charge")):
        return hint("DuckDB is optimistic: it lets both inserts through, since neither can see the other's "
                     "uncommitted row. The clash is found later. When?")
    return hint('Answer in the form "A at commit", "B at record id" or "nobody".')


def _pair(answer: Any) -> tuple[int, int] | None:
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        try:
            numbers = [int(value) for value in answer]
        except (TypeError, ValueError):
            return None
        if all(numbers[i] == answer[i] for i in range(2)):
            return numbers[0], numbers[1]
    return None


@exercise
def check_interleaving_count(answer: Any) -> Feedback:
    """Lesson 03: (distinct interleavings, how many charge twice) for two **ID first** consumers."""
    if (missing := blank(answer, "a pair (distinct interleavings, interleavings that charge twice)")) is not None:
        return missing
    pair = _pair(answer)
    if pair is None:
        return hint("Answer with a pair of whole numbers: (distinct interleavings, interleavings that charge twice).")
    table = interleavings(IdFirstHandler())
    truth = (len(table), int((table["outcome"] == "charged twice").sum()))
    steps = len(IdFirstHandler().steps)
    schedules = math.comb(2 * steps, steps)  # who moves at each turn: every way to pick A's turns
    if pair == truth:
        return right(f"{truth[0]} distinct orders, {truth[1]} of them charged twice: the loser's insert is refused by "
                      "the unique key, so it never charges. (What ID first cannot survive is a crash, lesson 02.)")
    count, twice = pair
    if count == schedules:
        return hint(f"{schedules} is the number of schedules, C({2 * steps}, {steps}). A consumer that finds the ID "
                     "takes fewer steps, and different schedules then play out the same order. Count distinct orders.")
    if count != truth[0]:
        return hint("The number of distinct interleavings is off. Run interleavings(IdFirstHandler()) and count its rows, "
                     "or count by hand: the winner's steps, then the loser's shorter path.")
    return hint("The count of interleavings is right; the number that charge twice is not. Which step of ID first "
                 "decides who charges, and can both consumers pass it?")
