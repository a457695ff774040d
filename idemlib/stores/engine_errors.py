"""What each SQL engine does with a transaction after one of its statements fails.

Lesson 02 inserts a message ID that is already in ``processed_messages`` in the
middle of a transaction, then tries to go on. Engines disagree about what is left:
PostgreSQL and DuckDB abort the whole transaction and refuse everything until it
ends, while SQLite undoes only the failed statement and lets the transaction carry
on. ``ON CONFLICT DO NOTHING`` makes the difference moot, which is why the inbox uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemlib.stores.sql import Cursor, SqlPayments

VERSION_QUERIES = {"DuckDB": "SELECT version()", "SQLite": "SELECT sqlite_version()", "PostgreSQL": "SHOW server_version"}


@dataclass(frozen=True)
class AfterAnError:
    """One engine's answer to: a duplicate insert failed inside my transaction; what now?"""

    engine: str
    version: str
    duplicate_insert: str
    next_statement: str
    commit: str
    charges_saved: int


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"


def _try(cursor: Cursor, sql: str, parameters: tuple[object, ...] = ()) -> str:
    try:
        cursor.execute(sql, parameters)
        return "ran"
    except Exception as error:  # noqa: BLE001 - what the engine says is the measurement
        return f"refused: {_first_line(error)}"


def after_a_duplicate(database: SqlPayments, message_id: str = "m-7f3") -> AfterAnError:
    """Record ``message_id``, then in a new transaction insert it again, charge, and commit.

    Reports what the engine did with each of the three statements and how many
    charges were saved in the end: 1 if the transaction survived the failed insert.
    """
    cursor = database.connect()
    p = database.placeholder
    cursor.execute(VERSION_QUERIES[database.engine])
    version = str(cursor.fetchall()[0][0])
    insert = f"INSERT INTO processed_messages (message_id) VALUES ({p})"
    cursor.execute(insert, (message_id,))  # the first delivery, committed on its own
    cursor.execute(database.begin_statement)
    duplicate = _try(cursor, insert, (message_id,))
    charge = _try(cursor, f"INSERT INTO payments (order_id, amount, message_id) VALUES ({p}, {p}, {p})",
                  (1042, 40, message_id))
    commit = _try(cursor, "COMMIT")
    if commit == "ran" and getattr(cursor, "statusmessage", None) == "ROLLBACK":
        commit = "no error, but the server answered ROLLBACK"  # PostgreSQL ends an aborted transaction so
    _try(cursor, "ROLLBACK")  # whatever is still open ends here
    charges = len(database.payments())
    return AfterAnError(database.engine, version, duplicate, charge, commit, charges)
