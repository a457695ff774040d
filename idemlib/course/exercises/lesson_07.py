"""Checks for lesson 07, What brokers call exactly-once.

Both checks work the answer out by playing the broker's model, so the verdict comes
from the same rules the lesson's table and timeline show, never from a stored answer.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pandas as pd

from idemlib.brokers.models import SQS_FIFO, SQS_FIFO_CONTENT
from idemlib.brokers.sources import SOURCES, run_broker
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.messages import Message

__all__ = ["SENDS", "check_content_based", "check_interval_sends"]

SENDS = (0, 3, 9, 10, 16)
"""Minutes after its first send at which exercise 2's producer sends ``m-7f3`` with the same deduplication ID.

Chosen so that every send comes five minutes or more after the last send SQS *dropped*
as well as after the last one it stored: the documentation does not say whether a
dropped send restarts the interval, and the answer must not hang on it."""

M7F3 = Message.charge("m-7f3", 1042, 40)


def _name(item: Any) -> str:
    # "Dead-letter replay", "dead letter replay" and "dead-letter  replay." name the same source as the table's
    # row: case, spaces, punctuation and the kind of apostrophe are not what the exercise asks about.
    return " ".join(re.sub(r"[^0-9a-z]+", " ", re.sub(r"['\u2019]", "", str(item).lower())).split())


def _yes_or_no(value: Any) -> bool | None:
    """True, numpy's True and 1 read as True; False, numpy's False and 0 as False; anything else as None."""
    if isinstance(value, (bool, np.bool_, numbers.Integral)) and value in (0, 1):
        return bool(value)
    return None


def _chosen(answer: Any, items: dict[Any, Any], read: Callable[[Any], Any]) -> set[Any] | None | str:
    """The items an answer picks: a collection of them, or a mapping of every item to True/False.

    ``items`` maps each accepted spelling to its item, ``read`` turns one answer element
    into a spelling. Returns the set picked, None for an unreadable answer, or the
    message for a mapping that leaves items out.
    """
    if isinstance(answer, pd.Series) and pd.api.types.is_bool_dtype(answer):
        answer = answer.to_dict()  # a Series of True/False by item is the mapping answer, built with pandas
    if isinstance(answer, Mapping):
        picked, seen = set(), set()
        for key, value in answer.items():
            item, verdict = items.get(read(key)), _yes_or_no(value)
            if item is None or verdict is None:
                return None
            seen.add(item)
            if verdict:
                picked.add(item)
        missing = len(set(items.values()) - seen)
        return picked if not missing else f"Your mapping leaves {missing} out: give every one True or False."
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
        return None
    try:
        return {items[read(item)] for item in answer}
    except (KeyError, TypeError, ValueError):
        return None


@exercise
def check_content_based(answer: Any) -> Feedback:
    """Lesson 07: which duplicate sources reach the consumer on SQS FIFO with content-based deduplication."""
    if (missing := blank(answer, "a set of source names, as the table's rows spell them")) is not None:
        return missing
    chosen = _chosen(answer, {_name(source): source for source in SOURCES}, _name)
    if isinstance(chosen, str):
        return hint(chosen)
    if chosen is None:
        return hint(f"Answer with a set (or list) of source names, each one of {list(SOURCES)}, or a mapping of "
                    "every source to True (reaches the consumer) or False.")
    runs = run_broker(SQS_FIFO_CONTENT.open, M7F3)
    reached = set(runs.loc[runs["charges without inbox"] > 1, "source"])
    if chosen == reached:
        return right("the body is the key, so the relay's copy with its new ID is caught inside the five minutes; "
                     "what comes after the window, and every redelivery on the way out, still reaches the consumer.")
    hints = []
    if "relay republish with a new ID" in chosen:
        hints.append("With content-based deduplication and no deduplication ID sent, SQS computes the key from the "
                     "message: from which part, and does the relay's second send get the same key within the interval?")
    if "ack lost on the way" in chosen:
        hints.append("Look at the model table's \"ack answered\" column: does an SQS consumer learn that its delete "
                     "(its ack) did not arrive, while it can still send it again?")
    if chosen - reached - {"relay republish with a new ID", "ack lost on the way"}:
        hints.append("Some sources you listed are stopped by the broker: which sends repeat the same body inside "
                     "the interval?")
    if reached - chosen:
        hints.append("Some sources you left out get through: the window only works on the way in, and only for a "
                     "while. What happens to a message the broker already delivered?")
    return hint(" ".join(hints))


def _minutes(item: Any) -> float | None:
    """A send's time in minutes: 9, 9.0, numpy's 9, Decimal("9"), "9" or timedelta(minutes=9); else None."""
    if isinstance(item, timedelta):
        return item.total_seconds() / 60
    if isinstance(item, str):
        try:
            item = Decimal(item.strip())
        except InvalidOperation:
            return None
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (numbers.Real, Decimal)):
        return None
    return float(item)


def _delivered_sends() -> set[float]:
    """Play :data:`SENDS` on the SQS FIFO model: the minutes of the sends its consumer receives."""
    channel = SQS_FIFO.open()
    start = channel.clock.now()
    stored = set()
    for minute in SENDS:
        channel.clock.advance_to(start + 60 * minute)  # publish moves the model's clock on by one second
        if channel.publish(M7F3, "m-7f3", retry=minute > 0):
            stored.add(float(minute))
    delivered = 0
    while (delivery := channel.receive()) is not None:
        channel.ack(delivery)
        delivered += 1
    assert delivered == len(stored), "the model delivered a different number of copies than it stored"
    return stored


@exercise
def check_interval_sends(answer: Any) -> Feedback:
    """Lesson 07: which of :data:`SENDS` an SQS FIFO consumer receives, given the 5-minute deduplication interval."""
    if (missing := blank(answer, "a set of the minutes (from SENDS) whose send reaches the consumer")) is not None:
        return missing
    spellings = {float(minute): float(minute) for minute in SENDS}
    chosen = _chosen(answer, spellings, _minutes)
    if isinstance(chosen, str):
        return hint(chosen)
    if chosen is None:
        return hint(f"Answer with a set of minutes, each one of SENDS = {SENDS}, such as {{0, 3}}, or a mapping of "
                    "every minute to True (delivered) or False.")
    delivered = _delivered_sends()
    if chosen == delivered:
        return right("the interval starts at a send SQS stored and lasts five minutes; a repeat inside it is "
                     "accepted and dropped, the first send after it is stored and starts a new interval. Every "
                     "copy after the first that does reach the consumer is the inbox's to stop.")
    if 0.0 not in chosen:
        return hint("The first send has nothing before it to repeat: does it reach the consumer?")
    if chosen == {0.0}:
        return hint("An ID is not remembered for ever: how long after a stored send does SQS still drop a repeat?")
    if chosen == set(spellings):
        return hint("Some of these sends repeat an ID that SQS stored less than five minutes earlier.")
    if chosen - delivered:
        return hint("At least one send you chose comes less than five minutes after a send SQS stored. The "
                    "interval runs from a stored send, not from the very first one only.")
    return hint("At least one send you left out comes five minutes or more after the last send SQS stored: "
                "it is a new message to the queue.")
