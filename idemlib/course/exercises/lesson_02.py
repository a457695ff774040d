"""Checks for lesson 02, Save the ID with the work."""

from __future__ import annotations

import re
from typing import Any

import duckdb

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import crash_matrix
from idemlib.handlers import handler_named
from idemlib.stores.sql import SCHEMA

__all__ = ["check_inbox_insert", "check_crash_point"]


DELIVERIES = ("m-7f3", "m-7f3", "m-8a1", "m-9c2", "m-8a1", "m-7f3")
"""Several messages, each delivered more than once, interleaved as a queue would hand them out."""


def _without_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.DOTALL)


def _rows_reported(db: duckdb.DuckDBPyConnection, sql: str, message_id: str) -> int:
    # What the handler would branch on: the rows the statement itself says it wrote
    # (RETURNING lists them; without it, DuckDB answers an INSERT with its row count).
    rows = db.execute(sql, [message_id] * sql.count("?")).fetchall()
    if "RETURNING" in sql.upper():
        return len(rows)
    return int(rows[0][0]) if rows and isinstance(rows[0][0], int) else -1


@exercise
def check_inbox_insert(sql: Any) -> Feedback:
    """Lesson 02: the inbox's INSERT without ``ON CONFLICT``: 1 row for a new ID, 0 for a duplicate, no error.

    Every ``?`` is bound to the message ID.
    Tried on the lesson's ``processed_messages`` table the way a queue delivers:
    several messages, each more than once, every delivery in a transaction of its
    own followed by the charge and a commit, as the inbox handler runs it.
    """
    if (missing := blank(sql, "an INSERT statement (a string) with ? where the message ID goes")) is not None:
        return missing
    if not isinstance(sql, str) or "?" not in sql:
        return hint("Give the statement as a string, with ? where the message ID goes.")
    if not sql.lstrip().upper().startswith("INSERT"):
        return hint("The inbox records the ID by writing a row: the statement should be an INSERT.")
    if "processed_messages" not in sql.lower():
        return hint("The IDs are remembered in the processed_messages table; write the row there.")
    words = " ".join(_without_comments(sql).upper().split())
    if re.match(r"INSERT OR (IGNORE|REPLACE)\b", words):
        return hint("INSERT OR IGNORE and INSERT OR REPLACE are DuckDB's and SQLite's short forms of ON CONFLICT, "
                     "and the engines without ON CONFLICT lack them too. Write a plain INSERT that takes its rows "
                     "from a query instead of VALUES: when should that query return none?")
    if "ON CONFLICT" in words:
        return hint("That is the lesson's own statement. The exercise asks for one that does without ON CONFLICT. "
                     "An INSERT can take its rows from a query instead of VALUES: when should that query return none?")
    db = duckdb.connect(":memory:")
    db.execute(SCHEMA[1])
    db.execute("CREATE TABLE payments (message_id VARCHAR)")
    seen: set[str] = set()
    for message_id in DELIVERIES:
        db.execute("BEGIN")
        try:
            written = _rows_reported(db, sql, message_id)
            if written == 1:
                db.execute("INSERT INTO payments VALUES (?)", [message_id])
            db.execute("COMMIT")
        except duckdb.ConstraintException:
            return hint(f"{message_id} came back and the statement tried to insert it again: a duplicate-key error. "
                         "Inside the handler's transaction an error aborts the transaction (on DuckDB and PostgreSQL), "
                         "so nothing could be committed or acked. Make the statement itself find the ID already "
                         "recorded and write no row.")
        except duckdb.Error as error:
            if "columns but" in str(error):
                return hint("processed_messages has two columns (message_id and an optional fingerprint): name the "
                             "column you fill, in parentheses after the table's name.")
            return hint(f"DuckDB could not run it: {str(error).splitlines()[0]}")
        new = message_id not in seen
        seen.add(message_id)
        if written < 0:
            return hint("The statement does not say how many rows it wrote. Let it report the rows it inserted, "
                         "so the handler can branch on the count.")
        if new and written != 1:
            return hint(f"{message_id} had never been seen, yet the statement wrote {written} rows. Every new "
                         "message must get its row: does your condition compare the ID, or only look at the table?")
        if not new and written != 0:
            return hint(f"{message_id} came back and the statement reported {written} row(s) written, so the handler "
                         "would charge it again. A duplicate must write nothing and report zero rows.")
    charged = [row[0] for row in db.execute("SELECT message_id FROM payments ORDER BY 1").fetchall()]
    if charged != sorted(seen):
        return hint(f"The payments that followed were {charged}; each message should be charged once.")
    return right(f"{len(DELIVERIES)} deliveries of {len(seen)} messages: one row for each new ID, zero for each "
                  "repeat, and no error, so each transaction went on to commit. One caveat: two consumers running "
                  "it at the same moment can both find no row, and then the unique key refuses the second with an "
                  "error. The money is still safe, but ON CONFLICT DO NOTHING, where the engine has it, turns even "
                  "that into zero rows.")


def _fault_named(fault: str, faults: list[str], steps: tuple[str, ...]) -> str:
    """The crash matrix's own spelling of ``fault``.

    Case, spacing and a missing "crash" are forgiven, and a crash *after* a step reads
    as the crash before the next one (nothing runs between the two).
    """
    words = " ".join(fault.lower().split()).removeprefix("crash ")
    after = words.removeprefix("after ")
    if after != words and after in steps[:-1]:
        words = f"before {steps[steps.index(after) + 1]}"
    for candidate in (words, f"crash {words}"):
        if candidate in faults:
            return candidate
    return fault


@exercise
def check_crash_point(handler_name: Any, fault: Any, outcome: str) -> Feedback:
    """Lesson 02: name a handler and a **crash** (as the crash matrix spells it) that ends in ``outcome``."""
    for value, what in ((handler_name, "a handler's name"), (fault, "a fault such as 'crash before commit'")):
        if (missing := blank(value, what)) is not None:
            return missing
    try:
        handler = handler_named(handler_name)
    except KeyError as error:
        return hint(str(error.args[0]))
    if not isinstance(fault, str):
        return hint(f"Give the crash as a string, such as 'crash before begin', not a {type(fault).__name__}.")
    matrix = crash_matrix([handler])
    crashes = [name for name in matrix["fault"] if name.startswith("crash ")]
    named = _fault_named(fault, list(matrix["fault"]), tuple(handler.steps))
    row = matrix[matrix["fault"] == named]
    if row.empty:
        return hint(f"{handler_name!r} has no fault called {fault!r}; its crashes are {crashes}.")
    if named not in crashes:
        return hint(f"'{named}' is not a crash of the consumer: the question asks which crash does it. "
                     f"Its crashes are {crashes}.")
    found = row["outcome"].iloc[0]
    if found == outcome:
        return right(f"{named} leaves the {handler_name} consumer with '{outcome}'.")
    return hint(f"With {named}, the {handler_name} consumer ends with '{found}', not '{outcome}'. "
                 "Think about what is already saved at that moment, and what the redelivery will find.")
