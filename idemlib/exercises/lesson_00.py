"""Checks for lesson 00, Start here."""

from __future__ import annotations

from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.messages import Message

__all__ = ["check_running_example"]


@exercise
def check_running_example(message: Any) -> Feedback:
    """Lesson 00: the running example as a :class:`~idemlib.messages.Message`."""
    if (missing := blank(message, "a Message built with Message.charge(...)")) is not None:
        return missing
    if not isinstance(message, Message):
        return hint(f"That is a {type(message).__name__}; build a Message with Message.charge(message_id, order_id, amount).")
    if message.message_id != RUNNING_EXAMPLE.message_id:
        return hint(f"The ID is {message.message_id!r}. Look again at the story: which ID does the message carry?")
    if message != RUNNING_EXAMPLE:
        return hint("The ID is right; check the order number and the amount against the story.")
    return right("that is m-7f3, the message the whole course follows.")
