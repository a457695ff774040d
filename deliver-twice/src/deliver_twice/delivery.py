"""One delivery of a message to the consumer, on a connection of its own, ended as a process's end ends it."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Generator
from typing import Any

from deliver_twice import orm
from deliver_twice.asynchronous import settle
from deliver_twice.sessions import close_connection
from deliver_twice.steps import Connection, Crashed, Handle, Watch, WatchedConnection


class NotAcknowledged(Exception):
    """The consumer returned without calling the ``ack`` it was given: the broker redelivers the message."""


def deliver(handle: Handle, connect: Callable[[], Connection], message: Any, watch: Watch, *,
            ack: bool = False) -> BaseException | None:
    """One delivery of ``message`` on a connection of its own: None when acknowledged, else what stopped it.

    With ``ack`` the consumer is called ``handle(connection, message, ack)`` and acknowledges
    by calling ``ack()``, a step like a statement (a death may come just before or just after
    it); returning without calling it leaves the message unacknowledged.

    The connection is closed without a commit afterwards, as a process's is when it
    ends: an open transaction is lost, whatever happened. A :class:`Sessions` given as
    ``connect`` takes it back instead, reset as a new session would be.
    """
    watch.thread = threading.get_ident()
    connection = settle(connect())
    watch.connection = connection
    # A SQLAlchemy session is handed over as it is: its engine's events make each statement, flush and commit a step.
    watched: Any = connection if orm.is_session(connection) else WatchedConnection(connection, watch)
    if orm.is_session(connection):
        orm.watch(connection, watch)
    busy = _no_busy_wait(connection) if watch.racing else None
    try:
        if ack:
            def acknowledge() -> None:
                watch.step("ack")
                watch.acked = True
            outcome = handle(watched, message, acknowledge)
        else:
            outcome = handle(watched, message)
        if isinstance(outcome, Generator):
            _run_steps(outcome, watch)
        elif inspect.isawaitable(outcome):
            settle(outcome)  # an async consumer, awaited here to its end
        if ack and not watch.acked:
            return NotAcknowledged("the consumer returned without calling ack()")
        return None
    except Crashed as crash:
        return crash
    except Exception as error:  # noqa: BLE001 - a failed delivery is a result here, reported by the caller
        return error
    finally:
        watch.ended = True
        with contextlib.suppress(Exception):  # closed by the consumer, or broken (or asyncpg): give_back ends it
            settle(connection.rollback())  # the process ended: what it left open is lost
        orm.unwatch()
        if isinstance(watched, WatchedConnection):
            watched.restore()
        if busy is not None:
            with contextlib.suppress(Exception):  # closed by the consumer: nothing to put back
                connection.execute(f"PRAGMA busy_timeout = {busy}")
        getattr(connect, "give_back", close_connection)(connection)
        watch.finished.set()


def _no_busy_wait(connection: Connection) -> int | None:
    """On SQLite, make a locked database an immediate error (which :meth:`Watch.run` turns into a wait for the
    delivery beside) instead of SQLite's own wait of up to its busy timeout; returns the timeout to put back."""
    if type(connection).__module__ != "sqlite3":
        return None
    timeout = int(connection.execute("PRAGMA busy_timeout").fetchone()[0])
    connection.execute("PRAGMA busy_timeout = 0")
    return timeout


def _run_steps(steps: Generator[Any, None, Any], watch: Watch) -> None:
    try:
        for name in steps:
            watch.step(f"step {name!r}")
    except Crashed:
        steps.close()  # GeneratorExit at the consumer's yield: its open blocks roll back, as a death leaves them
        raise
