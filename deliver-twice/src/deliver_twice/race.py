"""Two deliveries of one message at once, on PostgreSQL or a SQLite file: the first paused before a chosen step while
the second runs.

Whether the second waits for a lock the paused first one holds is read, never guessed from a
timeout, so a busy machine gives the same interleaving as an idle one: on PostgreSQL from the
server (``pg_stat_activity``); on SQLite, whose waits no view shows, each connection of the race
has a busy timeout of 0, so a statement finding the database locked fails at once, and the
watched connection turns that into a wait for the first delivery to end, then runs the statement
again, as SQLite's own busy timeout would (the model's rule: SQLite retries for up to its timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deliver_twice import orm
from deliver_twice.asynchronous import is_async
from deliver_twice.delivery import deliver
from deliver_twice.sessions import Sessions, backend_pid, close_connection
from deliver_twice.steps import Connection, Handle, Watch


@dataclass
class Race:
    """Two deliveries of one message at once: what each did, how each ended (None: acknowledged), and
    whether the second had to wait for a lock the paused first one held."""

    first_steps: list[str]
    second_steps: list[str]
    first: BaseException | None
    second: BaseException | None
    second_waited: bool
    first_state: str | None = None
    """What PostgreSQL said the paused first delivery's session was doing meanwhile (``idle in transaction``)."""


def two_at_once(handle: Handle, connect: Callable[[], Connection], message: Any, pause_before: int,
                watches: list[Watch] | None = None, *, ack: bool = False, second: Any = None,
                beside: Handle | None = None) -> Race:
    """Deliver ``message`` twice at once: the first delivery waits before its ``pause_before``-th step, the second
    runs until it ends or waits for a lock, then the first goes on.

    Whether the second waits for a lock is read from PostgreSQL's ``pg_stat_activity``,
    never guessed from a timeout, so a busy machine gives the same interleaving. A second
    delivery that neither ends nor waits for a lock keeps this waiting: a caller that must
    not hang runs it in a thread of its own and passes ``watches``, which gets both
    deliveries' :class:`Watch` to say where each stands. ``second``: the copy the second delivery gets
    (the message itself by default); ``beside``: the consumer that makes the second delivery (another process's,
    with memory of its own; ``handle`` by default).
    """
    copy = message if second is None else second
    first = Watch(pause_at=pause_before)
    second = Watch(beside=first)
    if watches is not None:
        watches += [first, second]
    outcomes: dict[int, BaseException | None] = {}

    def start(number: int, watch: Watch) -> threading.Thread:
        handed = message if number == 1 else copy
        consumer = handle if number == 1 or beside is None else beside

        def run() -> None:
            outcomes[number] = deliver(consumer, connect, handed, watch, ack=ack)

        # A daemon: a delivery blocked for good must not keep the test process from ending.
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    a = start(1, first)
    while a.is_alive() and not first.paused.is_set():
        a.join(0.001)
    b = start(2, second)
    waited = _until_done_or_waiting(b, second, connect)
    state = _session_state(first, connect)
    first.resume()
    a.join()
    b.join()
    return Race(first.steps, second.steps, outcomes[1], outcomes[2], waited, state)


def _session_state(watch: Watch, connect: Callable[[], Connection]) -> str | None:
    """PostgreSQL's word for what ``watch``'s session is doing now; None on another database."""
    if (pid := backend_pid(watch.connection)) is None:
        return None
    monitor = connect()
    try:
        row = monitor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        return None if row is None else row[0]
    finally:
        getattr(connect, "give_back", close_connection)(monitor)


def _until_done_or_waiting(thread: threading.Thread, watch: Watch, connect: Callable[[], Connection]) -> bool:
    """Wait for ``thread``'s delivery to end (False) or to wait for a lock the first delivery holds (True): on
    PostgreSQL as the server says, on SQLite as the delivery's own locked statement says."""
    monitor = connect()
    try:
        while thread.is_alive():
            if watch.waiting.is_set():  # SQLite: its statement found the first one's lock (see Watch.run)
                return True
            if (pid := backend_pid(watch.connection)) is not None:
                row = monitor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                monitor.rollback()
                if row is not None and row[0] == "Lock":
                    return True
            thread.join(0.002)
        return False
    finally:
        getattr(connect, "give_back", close_connection)(monitor)


def why_no_race(connect: Sessions) -> str | None:
    """Why two deliveries at once cannot be played on this database; None when they can (PostgreSQL, a SQLite file)."""
    connection = connect()
    try:
        driver = type(connection).__module__
        if orm.is_session(connection):
            return ("two deliveries at once: not played for a SQLAlchemy session (the test cannot yet tell when one "
                    "session waits for another's lock through the ORM); race the same statements with the driver's "
                    "own connection (psycopg, or a SQLite file), which it plays")
        if is_async(connection):
            return ("two deliveries at once: not played for an async connection (the test reads the second "
                    "delivery's lock wait with a connection of its own, which it opens with a blocking driver only); "
                    "test the same statements once with psycopg's blocking connection, which races them")
        if driver.startswith("psycopg"):
            return None
        if driver == "sqlite3":
            files = [row[2] for row in connection.execute("PRAGMA database_list").fetchall() if row[1] == "main"]
            if files and files[0]:
                return None
            return ("two deliveries at once: this SQLite database is in memory, which each connection sees alone; "
                    "give connect= a database file, e.g. functools.partial(sqlite3.connect, tmp_path / 'test.db')")
        return (f"two deliveries at once: played on PostgreSQL and SQLite files, where the test can tell when the "
                f"second delivery waits for the first one's lock, not on {driver}; test the consumer there too")
    finally:
        connect.give_back(connection)
