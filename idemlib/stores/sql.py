"""The payments schema and the SQL a handler runs, shared by every SQL engine.

Engines differ in how they pass parameters and how they report a lost race; those
two things are all an engine module supplies. ``RETURNING`` lets every engine say
how many rows an insert really wrote, which is what the inbox branches on.
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS payments (
           order_id   INTEGER NOT NULL,
           amount     INTEGER NOT NULL,
           message_id VARCHAR
       )""",
    """CREATE TABLE IF NOT EXISTS processed_messages (
           message_id VARCHAR PRIMARY KEY
       )""",
)


class WriteConflict(Exception):
    """The engine refused a write because a concurrent transaction got there first.

    The transaction is over. The consumer should give the message back so that a
    later delivery, which will see the winner's row, can decide what to do.
    """


class Cursor(Protocol):
    def execute(self, sql: str, parameters: Any = ...) -> Any: ...
    def fetchall(self) -> list[tuple[Any, ...]]: ...


class PaymentsSession:
    """One consumer's connection: the statements of the handler's steps.

    Outside :meth:`begin` every statement commits on its own (autocommit), which is
    how the wrong orderings of lesson 02 save the ID and the charge separately.
    """

    def __init__(self, cursor: Cursor, placeholder: str, conflict_errors: tuple[type[BaseException], ...]) -> None:
        self._cursor = cursor
        self._p = placeholder
        self._conflict_errors = conflict_errors
        self.in_transaction = False

    def begin(self) -> None:
        """Open a transaction: what follows is saved together at commit or not at all."""
        self._run("BEGIN")
        self.in_transaction = True

    def commit(self) -> None:
        """Make the transaction's writes permanent. Raises :class:`WriteConflict` if a rival won."""
        self.in_transaction = False
        self._run("COMMIT")

    def rollback(self) -> None:
        """Undo the open transaction, if there is one (a crashed process leaves nothing behind)."""
        if self.in_transaction:
            self.in_transaction = False
            self._run("ROLLBACK")

    def record_message(self, message_id: str) -> bool:
        """Insert ``message_id`` into the inbox; True if it is new, False if it was handled before.

        ``ON CONFLICT DO NOTHING`` turns a duplicate into zero rows written instead of
        an error, so the handler branches on the count.
        """
        rows = self._run(
            f"INSERT INTO processed_messages (message_id) VALUES ({self._p}) "
            "ON CONFLICT DO NOTHING RETURNING message_id",
            (message_id,),
            rows=True,
        )
        return len(rows) == 1

    def has_processed(self, message_id: str) -> bool:
        """Whether the inbox already holds ``message_id`` (a read, which protects nothing on its own)."""
        return bool(self._run(f"SELECT 1 FROM processed_messages WHERE message_id = {self._p}", (message_id,), rows=True))

    def charge(self, order_id: int, amount: int, message_id: str) -> None:
        """Record a charge of ``amount`` dollars against ``order_id``: the effect the customer pays for."""
        self._run(
            f"INSERT INTO payments (order_id, amount, message_id) VALUES ({self._p}, {self._p}, {self._p})",
            (order_id, amount, message_id),
        )

    def _run(self, sql: str, parameters: tuple[Any, ...] = (), *, rows: bool = False) -> list[tuple[Any, ...]]:
        try:
            self._cursor.execute(sql, parameters)
            return self._cursor.fetchall() if rows else []
        except self._conflict_errors as error:
            self.in_transaction = False
            raise WriteConflict(str(error)) from error


class PaymentsDatabase(Protocol):
    """A database with the payments and processed_messages tables."""

    engine: str

    def session(self) -> PaymentsSession: ...
    def payments(self) -> pd.DataFrame: ...
    def total_charged(self) -> int: ...
