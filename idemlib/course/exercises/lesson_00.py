"""Checks for lesson 00, Start here."""

from __future__ import annotations

from typing import Any

import numpy as np

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.idempotence import STATEMENTS, is_idempotent
from idemlib.messages import Message

__all__ = ["check_running_example", "check_idempotent_statements"]


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


def _yes_or_no(value: Any) -> bool | None:
    """True, numpy's True, 1, "yes" and "true" read as True; their opposites as False; anything else as None."""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value) if value in (0, 1) else None
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false"):
        return value.strip().lower() in ("yes", "true")
    return None


@exercise
def check_idempotent_statements(answer: Any) -> Feedback:
    """Lesson 00: for each statement of :data:`~idemlib.idempotence.STATEMENTS`, is it idempotent?

    The check runs every statement once and three times on a fresh DuckDB database
    and compares the two states, so it never relies on a stored answer.
    """
    if (missing := blank(answer, f"a dict with a True or False for each of {list(STATEMENTS)}")) is not None:
        return missing
    if not isinstance(answer, dict) or set(answer) != set(STATEMENTS):
        return hint(f"Answer with a dict whose keys are exactly {list(STATEMENTS)}, each mapped to True or False.")
    given = {name: _yes_or_no(value) for name, value in answer.items()}
    if any(value is None for value in given.values()):
        return hint("Give each statement True (idempotent) or False (not idempotent).")
    truth = {name: is_idempotent(sql) for name, sql in STATEMENTS.items()}
    wrong = sum(given[name] != truth[name] for name in STATEMENTS)
    if wrong == 0:
        return right("setting a value, upserting it and deleting can run again with no further effect; "
                      "subtracting and inserting a row cannot.")
    if all(given.values()):
        return hint("Not every statement is safe to repeat. For each, ask: after the third run, is any row "
                     "different from after the first?")
    if not any(given.values()):
        return hint("Some of these leave the data exactly as the first run did. Which ones set a value rather "
                     "than change it by an amount or add a row?")
    return hint(f"{wrong} of {len(STATEMENTS)} are not right yet. Try each one: `from idemlib.idempotence import "
                 "scratch, state`, run the statement three times on one scratch() database and once on another, "
                 "and compare state(...) of the two.")
