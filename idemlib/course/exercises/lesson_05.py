"""Checks for lesson 05, Choosing the ID."""

from __future__ import annotations

import random
import subprocess
from dataclasses import replace
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.ids import SOURCES, Copy, judge, make_copies, record, twin_facts

__all__ = ["check_message_id"]


# Request IDs of many lengths (9 to 184 characters), in groups that differ only in the middle: an ID cut to a
# prefix or to a suffix collides with another request's.
_STEM = "checkout-session/" + "5d1e08b3" * 25


def _request_id(fact: int) -> str:
    stem = _STEM[:(3, 7, 20, 45, 90)[fact % 5]]
    return f"{stem}-{fact}-{stem[::-1]}"


def spread(copies: list[Copy], *, seed: int = 10) -> list[Copy]:
    """The copies with request IDs of many lengths, sent minutes (a producer's retry) or hours (a relay's) apart."""
    draw = random.Random(seed)
    later = {"producer retry": (60.0, 1800.0), "relay republish": (3600.0, 36000.0)}
    return [replace(copy, request_id=_request_id(copy.fact),
                    seconds_later=draw.uniform(*later[copy.source]) if copy.source in later else None)
            for copy in copies]


@exercise
def check_message_id(message_id: Any) -> Feedback:
    """Lesson 05: a function from what a copy carries (its record) to the ID the inbox should trust."""
    if (missing := blank(message_id, "a function such as def message_id(record): ...")) is not None:
        return missing
    if not callable(message_id):
        return hint("Give a function that takes one copy's record (a dict) and returns its message ID.")
    facts = twin_facts(30, twins=3, seed=8)
    copies = spread(make_copies(facts, {source: 0.3 for source in SOURCES if source != "redelivery"}, seed=9))
    try:
        ids = [message_id(record(copy)) for copy in copies]
    except Exception as error:  # the learner's code: any error is worth a hint, not a traceback
        return hint(f"Calling it on a record such as {record(copies[0])} failed ({type(error).__name__}: {error}).")
    if any(value is None or value == "" for value in ids):
        return hint("It returned no ID (None or an empty string) for some copies; every copy needs one.")
    outcome = judge(message_id, copies, facts, ack_loss_rate=0.2)
    missed, dropped = outcome["duplicates missed"], outcome["real messages dropped"]
    if not missed and not dropped:
        try:
            restarted = [in_fresh_process(message_id, [(record(copy),) for copy in copies], machine, seed)
                         for seed, machine in enumerate(OTHER_MACHINES, start=1)]
        except (OSError, RuntimeError, SyntaxError, TypeError, ValueError, subprocess.TimeoutExpired) as error:
            return hint(f"The check computes the IDs again in a fresh Python process, as a restarted consumer would, and "
                        f"that failed ({error}). Write it with def, and import what it uses at the top of its cell.")
        if any(again != [str(value) for value in ids] for again in restarted):
            return hint("In a fresh process (a consumer restarted after a crash, on another machine, a day or a year later) it gave "
                        "other IDs for the same copies, so every redelivery after a restart would look new to the inbox. "
                        "A restart brings back your code, not your memory: a dict starts empty, a UUID made at start-up "
                        "is a new one, and Python's hash() of a string, a process ID, a host name and the clock change. "
                        "Build the ID only from what the copy carries.")
        return right(f"{len(copies)} copies of {len(facts)} payments, with lost acks on top: every payment charged once, "
                     "none twice, none dropped.")
    if dropped:
        return hint(f"{dropped} real payment(s) were never charged: two different payment requests got the same ID, so "
                    "the second looked like a copy of the first. What tells two requests for the same order and "
                    "amount apart?")
    return hint(f"{missed} charge(s) too many: copies of one payment request got different IDs, so the inbox took "
                "each for a new payment. Which field is the same on every copy, however it was copied?")
