"""The payments schema and the SQL a handler runs, shared by every SQL engine.

Engines differ in how they pass parameters and how they report a lost race; those
two things are all an engine module supplies. ``RETURNING`` lets every engine say
how many rows an insert really wrote, which is what the inbox branches on.
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

from idemlib.messages import BadMessage


def inbox_table(id_type: str = "VARCHAR", *, also: str = "", if_not_exists: bool = False) -> str:
    """The inbox's CREATE TABLE: ``processed_messages``, keyed by the message ID, the unique key that turns a
    duplicate's insert into zero rows. ``id_type`` is the engine's text type; ``also`` adds columns (a fingerprint,
    the day it was processed). Every inbox of the course is made by it; :data:`SCHEMA` keeps its own laid-out copy,
    which lesson 02 prints, and a test holds the two to the same statement."""
    exists, more = ("IF NOT EXISTS " if if_not_exists else ""), (f", {also}" if also else "")
    return f"CREATE TABLE {exists}processed_messages (message_id {id_type} PRIMARY KEY{more})"


SCHEMA = (
    """CREATE TABLE IF NOT EXISTS payments (
           order_id   INTEGER NOT NULL,
           amount     INTEGER NOT NULL,
           message_id VARCHAR
       )""",
    """CREATE TABLE IF NOT EXISTS processed_messages (
           message_id  VARCHAR PRIMARY KEY,
           fingerprint VARCHAR
       )""",
    """CREATE TABLE IF NOT EXISTS orders (
           order_id        INTEGER PRIMARY KEY,
           paid            INTEGER NOT NULL,
           last_message_id VARCHAR,
           version         INTEGER
       )""",
)


class IdReused(BadMessage):
    """A message ID came back with a different payload: the producer reused it for a new message."""

    @classmethod
    def for_message(cls, message_id: str) -> IdReused:
        """The error for ``message_id``, saying what happened and what the producer should do."""
        return cls(f"{message_id}: this ID was first used for a different payload. The producer reused an ID "
                   "for a new message; give every new message a new ID. Sent to the dead-letter queue.")


class WriteConflict(Exception):
    """The engine refused a write because a concurrent transaction got there first.

    The transaction is over. The consumer should give the message back so that a
    later delivery, which will see the winner's row, can decide what to do.
    """


class Cursor(Protocol):
    def execute(self, sql: str, parameters: Any = ...) -> Any: ...
    def fetchall(self) -> list[tuple[Any, ...]]: ...
    def close(self) -> None: ...


class Rows(Protocol):
    def fetchone(self) -> Any: ...


def single_value(rows: Rows) -> Any:
    """The one value a query such as ``SELECT count(*)`` returns, from any engine's cursor.

    A query that returned no row is a bug in the query, so it raises rather than reading ``None[0]``.
    """
    row = rows.fetchone()
    if row is None:
        raise LookupError("the query returned no row, where one value was expected")
    return row[0]


class PaymentsSession:
    """One consumer's connection: the statements of the handler's steps.

    Outside :meth:`begin` every statement commits on its own (autocommit), which is
    how the wrong orderings of lesson 02 save the ID and the charge separately.
    """

    def __init__(self, cursor: Cursor, engine: SqlPayments) -> None:
        self._cursor = cursor
        self._p = engine.placeholder
        self._begin = engine.begin_statement
        self._conflict_errors = engine.conflict_errors
        self.in_transaction = False

    def begin(self) -> None:
        """Open a transaction: what follows is saved together at commit or not at all."""
        self._run(self._begin)
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

    def record_message(self, message_id: str, fingerprint: str | None = None) -> bool:
        """Insert ``message_id`` into the inbox; True if it is new, False if it was handled before.

        ``ON CONFLICT DO NOTHING`` turns a duplicate into zero rows written instead of
        an error, so the handler branches on the count. With a ``fingerprint`` of the
        payload, a duplicate whose stored fingerprint differs raises :class:`IdReused`.
        """
        rows = self._run(
            f"INSERT INTO processed_messages (message_id, fingerprint) VALUES ({self._p}, {self._p}) "
            "ON CONFLICT DO NOTHING RETURNING message_id",
            (message_id, fingerprint),
            rows=True,
        )
        if rows or fingerprint is None:
            return len(rows) == 1
        stored = self._run(f"SELECT fingerprint FROM processed_messages WHERE message_id = {self._p}", (message_id,),
                           rows=True)
        if stored and stored[0][0] not in (None, fingerprint):
            raise IdReused.for_message(message_id)
        return False

    def charge_order_once(self, order_id: int, amount: int, message_id: str, version: int | None = None) -> bool:
        """Charge through the order's own row, remembering only its last message: True if applied.

        Without ``version`` the update is conditional on the row's ``last_message_id``
        differing from this message's, so a repeat of the latest message changes
        nothing. With ``version`` (the order's sequence number, carried by the message)
        the row keeps the highest version applied and the update is conditional on the
        message being newer, so any older message, a late duplicate or not, changes nothing.
        """
        p = self._p
        newer = ("orders.version IS NULL OR orders.version < excluded.version" if version is not None
                 else "orders.last_message_id IS DISTINCT FROM excluded.last_message_id")
        applied = self._run(
            f"INSERT INTO orders (order_id, paid, last_message_id, version) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (order_id) DO UPDATE SET paid = orders.paid + excluded.paid, "
            f"last_message_id = excluded.last_message_id, version = excluded.version WHERE {newer} RETURNING order_id",
            (order_id, amount, message_id, version), rows=True)
        if applied:
            self.charge(order_id, amount, message_id)
        return bool(applied)

    def has_processed(self, message_id: str) -> bool:
        """Whether the inbox already holds ``message_id`` (a read, which protects nothing on its own)."""
        return bool(self._run(f"SELECT 1 FROM processed_messages WHERE message_id = {self._p}", (message_id,), rows=True))

    def charge(self, order_id: int, amount: int, message_id: str) -> None:
        """Record a charge of ``amount`` dollars against ``order_id``: the effect the customer pays for."""
        self._run(
            f"INSERT INTO payments (order_id, amount, message_id) VALUES ({self._p}, {self._p}, {self._p})",
            (order_id, amount, message_id),
        )

    @property
    def placeholder(self) -> str:
        """How this engine writes a statement's parameter (``?`` or ``%s``), for :meth:`execute`'s SQL."""
        return self._p

    def execute(self, sql: str, parameters: tuple[Any, ...] = (), *, rows: bool = False) -> list[tuple[Any, ...]]:
        """Run a statement on a table of the caller's own (lesson 04's pending calls) in this session's transaction;
        with ``rows``, return what it selected. A lost race raises :class:`WriteConflict`, as the steps' own do."""
        return self._run(sql, parameters, rows=rows)

    def _run(self, sql: str, parameters: tuple[Any, ...] = (), *, rows: bool = False) -> list[tuple[Any, ...]]:
        try:
            self._cursor.execute(sql, parameters)
            return self._cursor.fetchall() if rows else []
        except self._conflict_errors as error:
            if self.in_transaction:
                self.in_transaction = False
                self._end_quietly()
            raise WriteConflict(f"{type(error).__name__}: {error}".strip()) from error

    def _end_quietly(self) -> None:
        # Some engines end a failed transaction themselves (DuckDB at COMMIT), others
        # keep it open and aborted (PostgreSQL); a ROLLBACK settles both.
        try:
            self._cursor.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - no transaction left to roll back
            pass


class SqlPayments:
    """The payments database on one SQL engine; subclasses say how to connect and how it reports a lost race."""

    engine: str = ""
    placeholder: str = "?"
    begin_statement: str = "BEGIN"
    conflict_errors: tuple[type[BaseException], ...] = ()

    def connect(self) -> Cursor:
        """A cursor on a new connection of its own, as each consumer process would hold."""
        raise NotImplementedError

    def _create_schema(self) -> None:
        self._reader = self.connect()
        for statement in SCHEMA:
            self._reader.execute(statement)

    def session(self) -> PaymentsSession:
        """A consumer's session on its own connection, with a transaction of its own."""
        return PaymentsSession(self.connect(), self)

    def empty(self) -> None:
        """Delete every payment and every remembered ID, so the next run starts from nothing."""
        for table in ("payments", "processed_messages", "orders"):
            self._reader.execute(f"DELETE FROM {table}")

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        self._reader.execute(sql)
        return self._reader.fetchall()

    def payments(self) -> pd.DataFrame:
        """Every committed charge, in the order written."""
        return pd.DataFrame(self._rows("SELECT order_id, amount, message_id FROM payments"),
                            columns=["order_id", "amount", "message_id"])

    def processed_ids(self) -> list[str]:
        """The message IDs the inbox holds."""
        return [row[0] for row in self._rows("SELECT message_id FROM processed_messages ORDER BY 1")]

    def total_charged(self) -> int:
        """The sum of all committed charges, in dollars."""
        return int(self._rows("SELECT coalesce(sum(amount), 0) FROM payments")[0][0])


class PaymentsDatabase(Protocol):
    """What the simulator needs of a database: sessions, and the committed payments to read back.

    The SQL engines and the key-value model both provide it.
    """

    engine: str

    def session(self) -> Any: ...
    def payments(self) -> pd.DataFrame: ...
    def processed_ids(self) -> list[str]: ...
    def total_charged(self) -> int: ...
    def empty(self) -> None: ...
