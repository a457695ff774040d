"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

import math
import re
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import interleavings
from idemlib.handlers import IdFirstHandler
from idemlib.races import race
from idemlib.stores import DuckDBPayments

__all__ = ["check_race_loser", "check_interleaving_count"]


def _swap_roles(failed: str) -> str:
    return failed.translate(str.maketrans("AB", "BA"))


_STEP_WORDS = {"begin": "begin", "begins": "begin", "insert": "record id", "inserts": "record id",
               "record": "record id", "charge": "charge", "charges": "charge", "commit": "commit",
               "commits": "commit", "ack": "ack", "acks": "ack"}
"""The inbox's steps (begin, record id, charge, commit, ack), as a learner may word them."""

_FILLER = {"consumer", "fails", "failed", "fail", "loses", "lost", "at", "its", "the", "on", "in", "step",
           "id", "is", "refused", "when", "it", "tries", "to", "with", "error", "an"}


def _read_loser(answer: str) -> str:
    """Read a loser the way a learner may write it.

    ``"B at commit"``, ``"consumer B fails at its COMMIT"``, ``"B's commit"`` and ``"b, commit"``
    all read as ``"B at commit"``; ``"nobody"``, ``"none"`` and ``"neither"`` as ``"nobody"``; a
    consumer named without a step as ``"B at ?"``. Anything else comes back as it was given.
    """
    words = re.sub(r"'s\b|[,.:;!()\"]", " ", answer.strip().lower()).split()
    if words in (["nobody"], ["none"], ["neither"], ["no", "one"]):
        return "nobody"
    words = [word for word in words if word not in _FILLER]
    who = [word for word in words if word in ("a", "b")]
    steps = list(dict.fromkeys(_STEP_WORDS[word] for word in words if word in _STEP_WORDS))
    rest = [word for word in words if word not in ("a", "b") and word not in _STEP_WORDS]
    if len(who) == 1 and words[0] == who[0] and len(steps) <= 1 and not rest:
        return f"{who[0].upper()} at {steps[0] if steps else '?'}"
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
    if given.endswith(" at ?"):
        return hint("Say at which step too: the inbox's steps are begin, record id, charge, commit and ack.")
    if given.endswith(("record id", "begin", "charge")):
        return hint("DuckDB is optimistic: it lets both inserts through, since neither can see the other's "
                    "uncommitted row. The clash is found later. When?")
    if given.endswith(" at ack"):
        return hint("A consumer acks only after its commit has succeeded, so nothing fails at the ack. "
                    "Which earlier step does DuckDB refuse?")
    return hint('Answer with a consumer and a step of the inbox (begin, record id, charge, commit, ack), '
                'in the form "A at record id", or with "nobody".')


def _whole(value: Any) -> int | None:
    """12, 12.0, numpy's 12 and "12" read as 12; 12.5, True and "twelve" as None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return int(value.strip()) if value.strip().isdigit() else None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number == value else None


def _pair(answer: Any) -> tuple[int, int] | None:
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        count, twice = (_whole(value) for value in answer)
        if count is not None and twice is not None:
            return count, twice
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
