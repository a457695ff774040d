"""Checks for lesson 10, Retention and ordering."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import duckdb
import numpy as np

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.facts import fact_seconds
from idemlib.retention_and_ordering.horizon import INCIDENTS, KEEP_IDS, DatedInbox, play_incident
from idemlib.retention_and_ordering.ordering import (
    HISTORY,
    OTHER_HISTORY,
    StatusChange,
    Writer,
    arrival_orders,
    explore_orderings,
    interleaved_orders,
)

__all__ = ["check_safe_retention", "check_version_guard"]


def _outcomes() -> dict[str, str]:
    queue, dlq = fact_seconds("sqs_retention_default"), fact_seconds("sqs_retention_max")
    inbox = DatedInbox()
    return {incident.name: play_incident(incident, KEEP_IDS, queue, dlq, inbox) for incident in INCIDENTS}


def _caught_names(answer: Any) -> set[str] | str:
    """The incidents the answer says the inbox survives, or why the answer cannot be read."""
    names = {incident.name for incident in INCIDENTS}
    if isinstance(answer, dict):
        keys = {str(key).strip().upper(): value for key, value in answer.items()}
        if set(keys) != names:
            return f"a dict needs exactly the keys {', '.join(sorted(names))}; got {', '.join(sorted(keys)) or 'none'}"
        # 1 and 0 read as True and False, as a spreadsheet writes them (lesson 12's check reads them so too).
        if not all(isinstance(value, bool | np.bool_) or (isinstance(value, int | np.integer) and value in (0, 1))
                   for value in keys.values()):
            return "each incident maps to True (the inbox survives it) or False (it charges again)"
        return {name for name, value in keys.items() if value}
    if isinstance(answer, str):
        parts = [part for part in re.split(r"[\s,;]+", answer) if part]
        answer = list(parts[0]) if len(parts) == 1 and set(parts[0].upper()) <= names else parts
    if isinstance(answer, Iterable):
        given = [str(item).strip().upper() for item in answer]
        if not set(given) <= names:
            strangers = ", ".join(repr(stranger) for stranger in sorted(set(given) - names))
            return f"name incidents by their letters among {', '.join(sorted(names))}; {strangers} is not one of them"
        return set(given)
    return f"give the letters of the incidents the inbox survives, or a dict of letter to True/False, not {answer!r}"


@exercise
def check_safe_retention(survives: Any) -> Feedback:
    """Lesson 10: which of :data:`INCIDENTS` an inbox keeping IDs for :data:`KEEP_IDS` survives without charging twice.

    The answer is the set (or list, or string) of the incidents' letters it survives,
    or a dict of every letter to True/False. Each incident is played on a dated DuckDB
    inbox pruned every 15 minutes: survived means its copy was caught or never arrived.
    """
    if (missing := blank(survives, "the set of the letters of the incidents the inbox survives (or a dict of "
                                   "every letter to True or False)")) is not None:
        return missing
    said = _caught_names(survives)
    if isinstance(said, str):
        return hint(said[0].upper() + said[1:] + ".")
    outcomes = _outcomes()
    survived = {name for name, outcome in outcomes.items() if outcome != "charged again"}
    if said == survived:
        return right("Each incident ends as you said: what decides is when the copy reaches the consumer, counted "
                     "from the first delivery, against the 144 hours; a redriven message's retention starts again "
                     "at the redrive, and a copy the dead-letter queue has already deleted never comes back.")
    missed = {name: outcomes[name] for name in said - survived}  # said to survive, but charges again
    feared = {name: outcomes[name] for name in survived - said}  # said to charge, but is survived
    wrong = len(missed) + len(feared)
    lines = [f"Incidents that end otherwise than you said: {wrong} of {len(INCIDENTS)}."]
    if "B" in missed:
        lines.append("A redriven message is a new message: from when does its retention count, and how long can it "
                     "then wait for consumers that are down?")
    if "C" in missed:
        lines.append("Does the queue's 4-day retention bound a copy that went through the dead-letter queue, or "
                     "does the redrive decide when it comes back (section 2, what the horizon adds up)?")
    if "D" in feared:
        lines.append("Can a dead-letter queue still hand back a copy after its own retention, counted from the "
                     "message's first enqueue, has run out?")
    if feared.keys() - {"D"}:
        lines.append("Some copy you expect to charge again arrives while the inbox still holds the ID: compare its "
                     "arrival, counted from the first delivery, with the 144 hours.")
    if missed.keys() - {"B", "C"}:
        lines.append("Some copy you expect to be caught arrives after the inbox has pruned the ID.")
    return hint(" ".join(lines))


REPAID_HISTORY = (StatusChange("m-6e1", 2077, "PAID", 8), StatusChange("m-6e2", 2077, "REFUNDED", 9),
                  StatusChange("m-6e3", 2077, "PAID", 10))
"""Order 2077 later in its life: paid again after a refund, at versions 8 to 10. Its newest status is not the
furthest along (a guard that ranks statuses instead of versions fails), its versions go past 9 (compared as
text, "10" < "9") and past 3 (a guard that knows order 1042's versions fails)."""

UNRELATED_ORDER = 3000
"""The one row exercise 2's read model already holds: an order no message is about, which must stay as it is."""


def _interleaved() -> list[tuple]:
    """Every arrival order of each order alone, and runs with both orders' messages interleaved, and every
    arrival order of :data:`REPAID_HISTORY` with its REFUNDED duplicated."""
    first, second = arrival_orders(HISTORY), arrival_orders(OTHER_HISTORY, duplicated=OTHER_HISTORY[:1])
    repaid = arrival_orders(REPAID_HISTORY, duplicated=REPAID_HISTORY[1:2])
    return first + second + interleaved_orders(first, second, per_order=1) + repaid


# What the engine reads as no statement break: a comment ("--" to the end of the line, or /* ... */) or a quoted
# text (a doubled quote inside it is one quote), whichever starts first.
_COMMENT_OR_TEXT = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", re.DOTALL)


@exercise
def check_version_guard(statement: Any) -> Feedback:
    """Lesson 10: one SQL statement for a read model whose rows the messages create, applying a status change
    only if it is newer than the version the order's row has seen.

    The ``orders(order_id PRIMARY KEY, status, version)`` table starts with no row for the
    orders the messages are about (only order :data:`UNRELATED_ORDER`, which must stay NEW,
    version 0). It is run on DuckDB against every arrival order of order 1042's PAID, SHIPPED
    and REFUNDED with duplicates of the first two, every arrival order of order 2077's PAID
    and SHIPPED with a duplicate of PAID, runs where both orders' messages arrive
    interleaved, and every arrival order of :data:`REPAID_HISTORY` (versions 8 to 10): each
    run must end with every order's row in its newest status.
    """
    if (missing := blank(statement, "an SQL statement using $order_id, $status and $version")) is not None:
        return missing
    if not isinstance(statement, str):
        return hint(f"Write the statement as a string of SQL, not {type(statement).__name__}.")
    if not statement.strip():
        return hint("The string is empty: write the one statement that applies one status change.")
    if "$version" not in statement:
        return hint("The statement never looks at the message's $version, so it cannot tell old from new.")
    if "$status" not in statement:
        return hint("The statement never writes the message's $status: each message brings the status to set.")
    if ";" in _COMMENT_OR_TEXT.sub(" ", statement).strip().rstrip(";"):  # a comment or a text may hold a semicolon
        return hint("That is more than one statement: write the one statement that creates the row or updates it "
                    "(an upsert can do both), so nothing runs between two halves.")
    try:
        explored = explore_orderings([Writer("yours", statement)], orders=_interleaved(), existing=(UNRELATED_ORDER,))
    except duckdb.Error as error:
        return hint(f"DuckDB refused the statement: {str(error).splitlines()[0]} The table is "
                    "orders(order_id PRIMARY KEY, status, version); parameters are $order_id, $status, $version.")
    wrong = explored[~explored["right"]]
    if wrong.empty:
        return right(f"All {len(explored)} runs, each order alone and both interleaved, end with every order's row in "
                     "its newest status, whichever message came first and created it: an old message, or a late "
                     "duplicate, no longer overwrites newer state.")
    trampled = wrong[~wrong["other order untouched"]]
    if not trampled.empty:
        first = trampled.iloc[0]
        return hint(f"Applying order {first['order']}'s messages ({first['arrival order']}) changed another order's "
                    "row too. Which rows should one message's write touch?")
    missing_rows = wrong[wrong["final status"] == "(no row)"]
    if len(missing_rows) == len(wrong):
        first = wrong.iloc[0]
        return hint(f"After {first['arrival order']} order {first['order']} has no row at all. Here no row exists "
                    "before the first message about an order: an UPDATE finds nothing to change. Which statement "
                    "creates a row when there is none and changes it when there is one (section 7)?")
    if (wrong["orders in the run"] > 1).all():
        first = wrong.iloc[0]
        return hint(f"Each order's messages alone end right, but {len(wrong)} runs with both orders interleaved end "
                    f"wrong, for example {first['arrival order']} leaves order {first['order']} "
                    f"{first['final status']}. Does the guard compare the message's version with its own order's row, "
                    "and nothing else?")
    first = wrong.iloc[0]
    return hint(f"{len(wrong)} of {len(explored)} arrival orders end wrong, for example order {first['order']}'s "
                f"{first['arrival order']} ends {first['final status']} (version {first['final version']}). When the "
                "row already exists, does your statement change it for exactly the messages newer than the version "
                "it holds, and remember that version (section 6)?")
