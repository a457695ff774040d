"""Checks for lesson 00, Start here."""

from __future__ import annotations

from typing import Any

import numpy as np

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.idempotence import INSERTS, STATEMENTS, is_idempotent

__all__ = ["check_idempotent_inserts", "check_idempotent_statements"]


def _yes_or_no(value: Any) -> bool | None:
    """True, numpy's True, 1, "yes" and "true" read as True; their opposites as False; anything else as None."""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value) if value in (0, 1) else None
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false"):
        return value.strip().lower() in ("yes", "true")
    return None


def _read_verdicts(answer: Any, names: dict[str, str]) -> dict[str, bool] | Feedback:
    """The answer as {name: idempotent?}, or the hint that says what shape it should have."""
    if not isinstance(answer, dict) or set(answer) != set(names):
        return hint(f"Answer with a dict whose keys are exactly {list(names)}, each mapped to True or False.")
    given = {name: _yes_or_no(value) for name, value in answer.items()}
    if any(value is None for value in given.values()):
        return hint("Give each statement True (idempotent) or False (not idempotent).")
    return {name: bool(value) for name, value in given.items()}


@exercise
def check_idempotent_inserts(answer: Any) -> Feedback:
    """Lesson 00, exercise 1: for each of :data:`~idemlib.idempotence.INSERTS`, is it idempotent?

    Their repeats answer differently from their first runs (zero rows, an error, one
    row changed), so only the definition tells them apart: the check runs each once and
    three times on fresh DuckDB databases and compares the rows left.
    """
    if (missing := blank(answer, f"a dict with a True or False for each of {list(INSERTS)}")) is not None:
        return missing
    given = _read_verdicts(answer, INSERTS)
    if isinstance(given, Feedback):
        return given
    truth = {name: is_idempotent(sql) for name, sql in INSERTS.items()}
    wrong = [name for name in INSERTS if given[name] != truth[name]]
    if not wrong:
        return right("the definition compares the data, not the answer. A repeat that writes zero rows, or one "
                     "refused with a duplicate-key error, leaves the rows as one run did; ON CONFLICT ... DO UPDATE "
                     "that adds to the amount is an upsert, and still charges again. Lesson 02 shows why a handler "
                     "prefers zero rows to the error: on DuckDB and PostgreSQL the error takes the handler's whole "
                     "transaction down with it.")
    if len(wrong) > 1:
        return hint(f"{len(wrong)} of {len(INSERTS)} are not right yet. For each, ask only: after the third run, is "
                    "any row different from after the first? `repeat_answers(...)` shows what a repeat says, "
                    "`state(...)` what it leaves (both in idemlib.idempotence).")
    changed_rows = not truth[wrong[0]]
    if changed_rows:
        return hint("One statement you called idempotent changes a row again on every repeat. A keyword "
                    "(ON CONFLICT, upsert) does not decide it: run each three times and read the rows.")
    return hint("One statement you called not idempotent answers its repeat differently from its first run. "
                "What does the definition compare, the answer a statement gives or the rows it leaves?")


_STATEMENT_HINTS = {
    # (name, the learner's verdict) -> the misconception that verdict shows
    ("record the payment under the next number", True):
        "The payments table has a unique key on message_id, and that key refused exercise 1's repeat. Does it refuse "
        "this one? Run the statement three times on one scratch() database and read payments' message_id column: "
        "does each run insert under the same ID?",
    ("delete a cart", False):
        "A delete changes the data the first time. What does the second run find to delete, and what is left "
        "different from after one run?",
    ("add cart 11 unless it exists", False):
        "This insert looks for its own row first. After one run, what does the NOT EXISTS find on the next one?",
    ("upsert the status", False):
        "An upsert inserts or updates, but what does it set the row to on a repeat, compared with the first run?",
    ("take 40 off the balance", True):
        "Which of section 5's two bank commands is this one like, the one that sets the balance or the one that "
        "adds to it (with a minus sign)? Run it three times on scratch() and read the balance after each run.",
    ("set the status", False):
        "Which of section 5's two bank commands is this one like? After a third run, is the status any different "
        "from after the first?",
}


@exercise
def check_idempotent_statements(answer: Any) -> Feedback:
    """Lesson 00, exercise 2: for each statement of :data:`~idemlib.idempotence.STATEMENTS`, is it idempotent?

    The check runs every statement once and three times on a fresh DuckDB database
    and compares the two states, so it never relies on a stored answer.
    """
    if (missing := blank(answer, f"a dict with a True or False for each of {list(STATEMENTS)}")) is not None:
        return missing
    given = _read_verdicts(answer, STATEMENTS)
    if isinstance(given, Feedback):
        return given
    truth = {name: is_idempotent(sql) for name, sql in STATEMENTS.items()}
    wrong = [name for name in STATEMENTS if given[name] != truth[name]]
    if not wrong:
        return right("setting a value, upserting it, deleting and inserting only what is missing can run again with "
                     "no further effect, one run after another (two runs at the same moment can both find cart 11 "
                     "missing: lesson 03 races them); subtracting, and inserting under a fresh number each run, "
                     "cannot. A unique "
                     "key protects a repeat only if the repeat carries the same ID, which is why lesson 05 asks where "
                     "the ID comes from.")
    if all(given.values()):
        return hint("Not every statement is safe to repeat. For each, ask: after the third run, is any row "
                    "different from after the first?")
    if not any(given.values()):
        return hint("Some of these leave the data exactly as the first run did. Which ones set a value or look for "
                    "their row, rather than change a value by an amount or add a new row?")
    first = wrong[0]
    return hint(f"{len(wrong)} of {len(STATEMENTS)} are not right yet. "
                + _STATEMENT_HINTS.get((first, given[first]), "Run that one three times on a scratch() database and "
                                                               "compare state(...) with one run."))
