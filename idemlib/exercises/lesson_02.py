"""Checks for lesson 02, Save the ID with the work."""

from __future__ import annotations

from typing import Any

import duckdb

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import crash_matrix
from idemlib.handlers import handler_named

__all__ = ["check_inbox_insert", "check_crash_point"]


@exercise
def check_inbox_insert(sql: Any) -> Feedback:
    """Lesson 02: an INSERT with one ``?`` for the message ID that writes 1 row the first time, 0 the second."""
    if (missing := blank(sql, "an INSERT statement (a string) with ? where the message ID goes")) is not None:
        return missing
    if not isinstance(sql, str) or sql.count("?") != 1:
        return hint("Give the statement as a string with exactly one ? for the message ID.")
    db = duckdb.connect(":memory:")
    db.execute("CREATE TABLE processed_messages (message_id VARCHAR PRIMARY KEY)")
    written = []
    for _ in range(2):
        try:
            rows = db.execute(sql, ["m-7f3"]).fetchall()
        except duckdb.ConstraintException:
            return hint("The second insert raised a duplicate-key error. That works, but it aborts the transaction; "
                         "ask the database to do nothing on a conflict instead.")
        except duckdb.Error as error:
            return hint(f"DuckDB could not run it: {error}")
        written.append(len(rows) if "RETURNING" in sql.upper() else int(rows[0][0]))
    if written == [1, 0]:
        return right("1 row the first time, 0 rows for the duplicate. The handler branches on that count.")
    return hint(f"It wrote {written[0]} row(s), then {written[1]}. Insert into processed_messages.")


@exercise
def check_crash_point(handler_name: Any, fault: Any, outcome: str) -> Feedback:
    """Lesson 02: name a handler and a fault (as the crash matrix spells them) that end in ``outcome``."""
    for value, what in ((handler_name, "a handler's name"), (fault, "a fault such as 'crash before commit'")):
        if (missing := blank(value, what)) is not None:
            return missing
    try:
        handler = handler_named(handler_name)
    except KeyError as error:
        return hint(str(error.args[0]))
    matrix = crash_matrix([handler])
    row = matrix[matrix["fault"] == fault]
    if row.empty:
        return hint(f"{handler_name!r} has no fault called {fault!r}; its faults are {list(matrix['fault'])}.")
    found = row["outcome"].iloc[0]
    if found == outcome:
        return right(f"{fault} leaves the {handler_name} consumer with '{outcome}'.")
    return hint(f"With {fault}, the {handler_name} consumer ends with '{found}', not '{outcome}'. "
                 "Think about what is already saved at that moment, and what the redelivery will find.")
