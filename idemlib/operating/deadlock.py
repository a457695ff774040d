"""Two consumers inserting overlapping batches of IDs into one inbox on PostgreSQL, row by row in lock step.

A multi-row ``INSERT … ON CONFLICT DO NOTHING`` writes its rows in the order it is given
them, and an insert of an ID that another open transaction has just inserted waits for that
transaction to end. Two batches that share IDs in opposite orders can therefore each wait for
the other: a deadlock, which PostgreSQL breaks by failing one transaction after its
``deadlock_timeout``. Here each row is its own statement, so the interleaving is chosen, not
left to chance: the consumers take turns, a turn ending when the statement is done or its
session waits for a lock (read from ``pg_locks``, a condition rather than a sleep).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pandas as pd
import psycopg

from idemlib.stores.sql import inbox_table, single_value

INSERT_ID = "INSERT INTO processed_messages (message_id) VALUES (%s) ON CONFLICT DO NOTHING"


class _Consumer:
    """One consumer's transaction, inserting its batch one ID per turn on a thread of its own."""

    def __init__(self, name: str, connection: psycopg.Connection, ids: Sequence[str]) -> None:
        self.name, self.connection, self.ids = name, connection, list(ids)
        self.pid = connection.info.backend_pid
        self.inserted = 0
        self.waits = 0  # turns that ended with this session waiting for another's lock
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.outcome = ""

    def _insert(self, message_id: str) -> None:
        try:
            self.connection.execute(INSERT_ID, (message_id,))
        except psycopg.Error as error:  # the deadlock victim: its transaction is aborted
            self.error = error

    def start_next(self) -> None:
        self.thread = threading.Thread(target=self._insert, args=(self.ids[self.inserted],))
        self.thread.start()

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def settle(self) -> None:
        """After a finished turn: count the row, or end the transaction as the error left it."""
        self.thread = None
        if self.error is not None:
            self.connection.rollback()
            self.outcome = f"{type(self.error).__name__}: rolled back, its batch goes back to the broker"
            return
        self.inserted += 1
        if self.inserted == len(self.ids):
            self.connection.commit()
            self.outcome = "committed"


def _waiting(observer: psycopg.Connection, pid: int) -> bool:
    return bool(single_value(observer.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,))))


def overlapping_batches(connect: Callable[[], psycopg.Connection], batches: dict[str, Sequence[str]],
                        timeout: float = 30.0) -> pd.DataFrame:
    """Each named consumer inserts its batch into an empty ``processed_messages``, one ID per turn, turns in the
    order given; one row per consumer: its insert order, how many of its inserts waited for another's lock, and
    how its transaction ended."""
    observer = connect()
    observer.autocommit = True
    observer.execute("DROP TABLE IF EXISTS processed_messages")
    observer.execute(inbox_table("text"))
    consumers = [_Consumer(name, connect(), ids) for name, ids in batches.items()]
    deadline = time.monotonic() + timeout
    try:
        while any(not consumer.outcome for consumer in consumers):
            if time.monotonic() > deadline:
                raise TimeoutError("the consumers neither finished nor failed in time")
            for consumer in consumers:
                if consumer.outcome or consumer.busy:
                    continue
                if consumer.thread is not None:
                    consumer.settle()
                    continue
                consumer.start_next()
                # The turn ends when the row is in, or the session waits for another's row.
                while consumer.busy and not _waiting(observer, consumer.pid):
                    time.sleep(0.005)
                if not consumer.busy:
                    consumer.settle()
                else:
                    consumer.waits += 1
            time.sleep(0.005)
        stored = single_value(observer.execute("SELECT count(*) FROM processed_messages"))
    finally:
        for consumer in consumers:
            if consumer.thread is not None:
                consumer.thread.join()
            consumer.connection.close()
        observer.execute("DROP TABLE IF EXISTS processed_messages")
        observer.close()
    table = pd.DataFrame([(c.name, " → ".join(c.ids), c.waits, c.outcome) for c in consumers],
                         columns=["consumer", "inserts, in order", "waits for a lock", "its transaction"]
                         ).set_index("consumer")
    table.attrs["IDs stored"] = stored
    return table
