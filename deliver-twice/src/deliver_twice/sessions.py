"""Database sessions for many deliveries: each ends rolled back and reset, then serves the next delivery."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from deliver_twice import orm
from deliver_twice.asynchronous import is_async, settle
from deliver_twice.steps import Connection


def close_connection(connection: Connection) -> None:
    """Roll back and close, as a process ending does; a connection already closed or broken is left as it is."""
    for end in ("rollback", "close"):
        with contextlib.suppress(Exception):  # a connection a consumer closed itself, or one already broken
            settle(getattr(connection, end)())


RESET_SESSION = ("CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
                 "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES")
"""What ``DISCARD ALL`` does except ``DEALLOCATE ALL``: psycopg prepares a statement run five times on a connection
and keeps its name; deallocating it behind the driver's back fails the consumer's next run of that statement
(``InvalidSqlStatementName``), which no production consumer meets."""


class Sessions:
    """``connect`` for many deliveries: a connection ends each delivery rolled back and, on PostgreSQL, reset with
    :data:`RESET_SESSION` (its session locks, cursors, settings and temporary tables gone, as a dead process's are;
    the driver's prepared statements kept, as they are a property of the driver, not of the delivery), then
    serves the next delivery instead of a new one. Opening a connection costs more than most deliveries."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self._connect = connect
        self._idle: list[Connection] = []
        self._lent: dict[int, Connection] = {}
        self._home: int | None = None
        """The thread of the first call (the consumer's): SQLite refuses a connection in any other thread, so the
        connections a race opens in threads of its own are closed when given back, not kept."""

    def __call__(self) -> Connection:
        if self._home is None:
            self._home = threading.get_ident()
        if self._idle and threading.get_ident() == self._home:
            connection = self._idle.pop()
        else:
            connection = settle(self._connect())
        self._lent[id(connection)] = connection
        return connection

    def give_back(self, connection: Connection) -> None:
        """Roll ``connection`` back and keep it for the next delivery; close it if it cannot be reset."""
        self._lent.pop(id(connection), None)
        if threading.get_ident() != self._home or is_async(connection) or orm.is_session(connection):
            # A race's thread: this session ends with it. An async one: closed rather than reset (asyncpg keeps no
            # transaction state a rollback can end, and a new connection costs an async consumer's test little).
            # A SQLAlchemy session: closed, so the next one starts with an empty identity map (its engine's pool
            # keeps the driver's connection).
            close_connection(connection)
            return
        try:
            connection.rollback()
            if type(connection).__module__.startswith("psycopg"):
                autocommit = connection.autocommit
                connection.autocommit = True  # the reset runs outside a transaction
                connection.execute(RESET_SESSION)
                connection.autocommit = autocommit
        except Exception:  # noqa: BLE001 - closed by the consumer, or broken: a new one serves next time
            close_connection(connection)
        else:
            self._idle.append(connection)

    def close(self) -> None:
        """Close every connection kept."""
        while self._idle:
            close_connection(self._idle.pop())

    def end_lent(self) -> None:
        """End the sessions still lent out, held by a delivery the test gave up on, as a dead process's end.

        On PostgreSQL the server terminates each one, so its open transaction and its locks
        go and nothing else (the next test, dropping the schema) waits for them; on SQLite and
        DuckDB a statement running is interrupted. A blocked thread cannot be killed: if it ever
        wakes, its next call on the connection fails.
        """
        lent = list(self._lent.values())
        pids = [pid for connection in lent if (pid := backend_pid(connection))]
        if not pids:
            for connection in lent:
                with contextlib.suppress(Exception):  # no interrupt on this driver, or the connection is closed
                    connection.interrupt()
            return
        try:
            admin = self._connect()
        except Exception:  # noqa: BLE001 - the server went away: its sessions went with it
            return
        with contextlib.suppress(Exception):  # refused (another role's session): nothing more to do from here
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            admin.commit()
        close_connection(admin)


def backend_pid(connection: Connection | None) -> int | None:
    """The PostgreSQL server process serving ``connection``; None on another database or when closed."""
    try:
        return getattr(getattr(connection, "info", None), "backend_pid", None) or None
    except Exception:  # noqa: BLE001 - a connection closed or broken has no server process to name
        return None
