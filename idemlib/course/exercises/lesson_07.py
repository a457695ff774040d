"""Checks for lesson 07, What brokers call exactly-once."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from idemlib.brokers.models import SERVICE_BUS, SQS_FIFO_CONTENT, asb_window
from idemlib.brokers.sources import SOURCES, run_broker
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.messages import Message

__all__ = ["RETRY_SCHEDULE", "check_content_based", "check_detection_window"]

RETRY_SCHEDULE = (30, 60, 120, 240, 480, 960)
"""Seconds after its first send at which the exercise's producer publishes the same MessageId again."""


def _name(item: Any) -> str:
    # "Dead-letter replay" or "dead-letter  replay" name the same source as the table's row.
    return " ".join(str(item).split()).lower()


def _sources(answer: Any) -> set[str] | None:
    if isinstance(answer, str) or not isinstance(answer, Iterable):
        return None
    names = {_name(source): source for source in SOURCES}
    try:
        return {names[_name(item)] for item in answer}
    except KeyError:
        return None


@exercise
def check_content_based(answer: Any) -> Feedback:
    """Lesson 07: which duplicate sources reach the consumer on SQS FIFO with content-based deduplication."""
    if (missing := blank(answer, "a set of source names, as the table's rows spell them")) is not None:
        return missing
    chosen = _sources(answer)
    if chosen is None:
        return hint(f"Answer with a set (or list) of source names, each one of {list(SOURCES)}.")
    runs = run_broker(SQS_FIFO_CONTENT.open, Message.charge("m-7f3", 1042, 40))
    reached = set(runs.loc[runs["charges without inbox"] > 1, "source"])
    if chosen == reached:
        return right("the body is the key, so the relay's copy with its new ID is caught inside the five minutes; "
                     "everything after the window, and everything on the way out, still reaches the consumer.")
    hints = []
    if "relay republish with a new ID" in chosen:
        hints.append("With content-based deduplication and no deduplication ID sent, SQS computes the key from the "
                     "message: from which part, and does the relay's second send get the same key within the interval?")
    elif chosen - reached:
        hints.append("Some sources you listed are stopped by the broker: which sends repeat the same body inside "
                     "the interval?")
    if reached - chosen:
        hints.append("Some sources you left out get through: the window only works on the way in, and only for a "
                     "while. What happens to a message the broker already delivered?")
    return hint(" ".join(hints))


@exercise
def check_detection_window(seconds: Any) -> Feedback:
    """Lesson 07: a Service Bus duplicate-detection window that drops every retry of :data:`RETRY_SCHEDULE`."""
    if (missing := blank(seconds, "a window in seconds")) is not None:
        return missing
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (numbers.Real, Decimal)):
        return hint("Give the window as a number of seconds, such as 120.")
    try:
        window = asb_window(float(seconds))
    except ValueError as error:
        return hint(f"Service Bus would refuse that window: {error}.")
    channel = replace(SERVICE_BUS, window=window).open()
    message = Message.charge("m-7f3", 1042, 40)
    channel.publish(message, "m-7f3")
    start = channel.clock.now()
    stored = 1 + sum(_resend(channel, message, start + after) for after in RETRY_SCHEDULE)
    if stored == 1:
        return right(f"with {window:g} s every retry up to the last one at {RETRY_SCHEDULE[-1]} s lands inside the "
                     "window, so the queue keeps one copy.")
    return hint(f"With {window:g} s the queue stores {stored} copies: a retry that comes after the window is a new "
                "message. The window has to outlast the producer's last retry.")


def _resend(channel: Any, message: Message, at: float) -> bool:
    channel.clock.advance_to(at - 1.0)  # publish moves the model's clock on by one second
    return bool(channel.publish(message, "m-7f3", retry=True))
