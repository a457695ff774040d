"""What a provider call made inside the transaction holds on a real PostgreSQL server.

While the consumer waits for the provider, its transaction is open: the inbox row it
inserted keeps its lock, and its connection sits ``idle in transaction``. A second
delivery of the same message, on another connection, inserts the same ID and waits
for the first transaction to end. The course's PostgreSQL reports all of it in
``pg_stat_activity`` and ``pg_blocking_pids``. The model's provider answers only when
an event is set, after the readings, so the outcome does not depend on how fast the
machine is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from idemlib.provider import PaymentProvider
from idemlib.stores.postgres_store import PostgresPayments
from idemlib.stores.sql import PaymentsSession, WriteConflict, single_value

WAIT_LIMIT_SECONDS = 30.0
"""How long to wait for the second delivery to be seen waiting before giving up with an error."""


def _activity(reader: psycopg.Connection, pid: int) -> tuple[str, str | None, str | None]:
    row = reader.execute("SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                         (pid,)).fetchone()
    return (row[0], row[1], row[2]) if row else ("gone", None, None)


def _ended_by(error: BaseException) -> str:
    """How a timeout ended the second delivery's wait, by the server's own error: never a skip."""
    cause = error.__cause__ if isinstance(error, WriteConflict) and error.__cause__ is not None else error
    state = getattr(cause, "sqlstate", None)
    return (f"ended by {type(cause).__name__} ({state}) before it saw the first commit: "
            "no row seen, given back to come again")


def call_inside_on_postgres(message_id: str = "m-7f3", *,
                            second_settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Deliver ``message_id`` twice at once to the *call inside* consumer, the first held in its provider call.

    The first delivery, on a thread of its own, begins, inserts the ID into the inbox and
    calls the provider, whose answer waits until this function lets it come. The second
    delivery, on a connection of its own, inserts the same ID. Read while the call is still
    out: the first connection's state, the second's wait and who blocks it. Then the
    provider answers, the first delivery charges and commits, and the second finishes its
    insert. Returns what the server reported, by name.

    ``second_settings`` are set on the second delivery's connection before its insert (``lock_timeout``,
    ``statement_timeout``), and the provider's answer is then held until the second delivery has ended, as
    a provider slower than those timeouts would: a wait a timeout ends is reported as such, not as a skip.
    """
    database = PostgresPayments()
    first_cursor, second_cursor = database.connect(), database.connect()  # one connection per consumer
    first, second = PaymentsSession(first_cursor, database), PaymentsSession(second_cursor, database)
    reader = database.connect().connection
    first_pid, second_pid = first_cursor.connection.info.backend_pid, second_cursor.connection.info.backend_pid
    provider = PaymentProvider()
    calling, answered = threading.Event(), threading.Event()  # the call is out; the provider may answer
    second_outcome: list[str] = []

    def first_delivery() -> None:
        first.begin()
        first.record_message(message_id)
        calling.set()
        if not answered.wait(WAIT_LIMIT_SECONDS):  # the provider's answer, held until the readings are taken
            first.rollback()
            return
        response = provider.charge(f"{message_id}:charge", order_id=1042, amount=40)
        first.charge(1042, response.body["amount"], message_id)
        first.commit()

    def second_delivery() -> None:
        for name, value in (second_settings or {}).items():
            second.execute("SELECT set_config(%s, %s, false)", (name, value))
        second.begin()
        try:
            new = second.record_message(message_id)  # waits here for the first transaction
        except (WriteConflict, psycopg.errors.QueryCanceled) as error:  # lock_timeout, statement_timeout
            second.rollback()
            second_outcome.append(_ended_by(error))
            return
        second.commit()
        second_outcome.append("new: it would call again" if new else "duplicate: skip (it saw the committed row)")

    threads = [threading.Thread(target=first_delivery), threading.Thread(target=second_delivery)]
    threads[0].start()
    if not calling.wait(WAIT_LIMIT_SECONDS):
        raise TimeoutError(f"the first delivery did not reach its provider call within {WAIT_LIMIT_SECONDS:g} s")
    threads[1].start()
    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    while threads[1].is_alive() and _activity(reader, second_pid)[1] != "Lock":  # a short timeout may end it first
        if time.monotonic() > deadline:
            answered.set()
            raise TimeoutError(f"the second delivery was not seen waiting within {WAIT_LIMIT_SECONDS:g} s")
        time.sleep(0.01)
    during = {
        "first delivery's connection, during the call": _activity(reader, first_pid)[0],
        "second delivery waits on": "{1} ({2})".format(*_activity(reader, second_pid)),
        "second delivery blocked by the first": single_value(reader.execute("SELECT %s = ANY(pg_blocking_pids(%s))",
                                                                            (first_pid, second_pid))),
        "second delivery finished before the answer": bool(second_outcome),
    }
    if second_settings:
        threads[1].join(WAIT_LIMIT_SECONDS)  # the provider answers only after the second's timeout ended its wait
    answered.set()
    for thread in threads:
        thread.join(WAIT_LIMIT_SECONDS)
    settings = {name: single_value(reader.execute(f"SHOW {name}"))
                for name in ("transaction_isolation", "idle_in_transaction_session_timeout", "max_connections")}
    server = single_value(reader.execute("SHOW server_version")).split()[0]
    lock_timeout = single_value(reader.execute("SHOW lock_timeout"))  # the course's connections' safety net
    return {**during,
            "second delivery, once the first committed": (second_outcome or ["still waiting"])[0],
            "calls to the provider": provider.calls,
            "charges in the database": database.total_charged() // 40,
            **{f"server setting {name}": value for name, value in settings.items()},
            "lock_timeout of the course's connections": lock_timeout,
            "server": f"PostgreSQL {server}"}
