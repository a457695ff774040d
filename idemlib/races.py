"""Real races on real engines: consumers in real threads, running the same handler code.

The simulator interleaves consumers in one thread, which cannot show an engine
that makes a writer *wait*: the waiter would wait for itself. Here each consumer
has a thread and a connection of its own, so PostgreSQL's lock waits and SQLite's
busy timeout happen for real and are measured in real seconds.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb

from idemlib.broker import Broker, Delivery
from idemlib.clock import VirtualClock
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.handlers import Context, Handler, InboxHandler, Steps
from idemlib.messages import Message, expected_total, valid_charges
from idemlib.stores import (
    DuckDBPayments,
    PaymentsSession,
    PostgresPayments,
    SQLitePayments,
    SqlPayments,
    WriteConflict,
    postgres_unavailable,
    require_servers,
)
from idemlib.stores.snapshots import engine_version
from idemlib.trace import Trace

PATIENCE_SECONDS = 30.0
"""How long A waits for B to finish or to be seen waiting, before the race is declared broken."""


@dataclass
class _Timed:
    """One consumer's run through a handler: the time each step took and where it failed."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    failed_at: str | None = None
    error: str | None = None
    ended_at: float | None = None  # when the commit step returned (perf_counter)
    running: str | None = None  # the step under way, for the watcher that sees this consumer wait

    def drive(self, job: Steps, session: PaymentsSession, until: str | None = None) -> str | None:
        """Run ``job`` step by step, timing each, up to (not into) step ``until``; returns the step it stopped before."""
        step = next(job, None)
        while step is not None and step != until:
            self.running = step
            started = time.perf_counter()
            try:
                following = next(job, None)
            except WriteConflict as conflict:
                self.steps.append((step, time.perf_counter() - started))  # a wait can end in a failure
                self.failed_at, self.error = step, str(conflict)
                session.rollback()
                return None
            finished = time.perf_counter()
            self.steps.append((step, finished - started))
            if step == "commit":
                self.ended_at = finished
            step = following
        return step

    def resume(self, job: Steps, session: PaymentsSession, step: str) -> None:
        """Carry on from the paused ``step`` to the end of the job."""
        self.drive(_prepend(step, job), session)


def _prepend(step: str, job: Steps) -> Steps:
    yield step
    yield from job


@dataclass(frozen=True)
class RaceOutcome:
    """How one engine settled two consumers inserting the same message ID at once."""

    engine: str
    a_then: str
    a_held_seconds: float
    b_waited_at: str
    b_wait_seconds: float
    b_inserted: bool
    failed: str
    error: str
    retry: str
    total_charged: int


def race(
    database: SqlPayments,
    *,
    first_commits: bool = True,
    a_ack_lost: bool = False,
    hold_seconds: float = 0.3,
    handler: Handler | None = None,
    message: Message = RUNNING_EXAMPLE,
) -> RaceOutcome:
    """Consumer A inserts the ID and charges, then holds its transaction open while B runs the same message.

    Consumer B, in its own thread, runs the whole handler for the same message. A
    keeps its transaction open until B has either finished or is waiting for A, as
    the engine itself shows it, and then for ``hold_seconds`` more, so every race
    overlaps the same way however busy the machine is. Then A commits (or, with
    ``first_commits=False``, dies and is rolled back). A delivery that failed is
    given back and delivered once more, as the broker would, to show that the losing
    delivery does not lose the message; with ``a_ack_lost`` A's ack never arrives,
    so that retry finds the message still queued.
    """
    handler = handler or InboxHandler()
    clock = VirtualClock()
    broker = Broker(clock, Trace(clock))
    broker.publish(message)
    a_delivery = broker.receive("consumer A")
    clock.advance(broker.visibility_timeout)  # A is slow: its lease runs out and B gets the message
    b_delivery = broker.receive("consumer B")
    assert a_delivery is not None and b_delivery is not None

    a_cursor, b_cursor = database.connect(), database.connect()
    a_session, b_session = PaymentsSession(a_cursor, database), PaymentsSession(b_cursor, database)
    a, b = _Timed(), _Timed()
    a_job = handler.run(_context(a_delivery, a_session, broker, ack_lost=a_ack_lost))
    paused = a.drive(a_job, a_session, until="commit")
    with _waits_for_a(database, a_cursor, b_cursor, b) as waiting_at:
        rival = threading.Thread(target=lambda: b.drive(handler.run(_context(b_delivery, b_session, broker)),
                                                        b_session), daemon=True)
        rival_started = time.perf_counter()  # before start(): B's thread may run at once
        rival.start()
        b_waited_at = _finished_or_waiting(rival, waiting_at)
        time.sleep(hold_seconds)
        if first_commits and paused is not None:
            a.resume(a_job, a_session, paused)
        else:
            a_job.close()
            a_session.rollback()  # what the engine does when A's connection dies
        # How long A kept B company: from B's start to the end of A's transaction (its commit or rollback).
        a_ended = a.ended_at if first_commits and a.ended_at is not None else time.perf_counter()
        rival.join(timeout=PATIENCE_SECONDS)
        if rival.is_alive():
            raise RuntimeError(f"consumer B was still running {PATIENCE_SECONDS:g} s after A's transaction ended")

    losers = [(name, timed, delivery) for name, timed, delivery in (("A", a, a_delivery), ("B", b, b_delivery))
              if timed.failed_at is not None]
    retry = "not needed"
    for _, timed, delivery in losers:
        broker.release(delivery, timed.error or "")
        again = broker.receive("consumer B")
        if again is None:
            retry = "none: the winner had acked the message"
        else:
            notes: list[str] = []
            retry_session = database.session()
            _Timed().drive(handler.run(_context(again, retry_session, broker, notes)), retry_session)
            retry = "duplicate skipped" if "duplicate skipped" in notes else "charged"
    return RaceOutcome(
        engine=database.engine,
        a_then="commits" if first_commits else "rolls back",
        a_held_seconds=a_ended - rival_started,
        b_waited_at=b_waited_at or "did not wait",
        b_wait_seconds=next((seconds for step, seconds in b.steps if step == b_waited_at), 0.0),
        b_inserted=any(step == "charge" for step, _ in b.steps),
        failed=", ".join(f"{name} at {timed.failed_at}" for name, timed, _ in losers) or "nobody",
        error="; ".join((timed.error or "").split("\n")[0] for _, timed, _ in losers),
        retry=retry,
        total_charged=database.total_charged(),
    )


@contextmanager
def _waits_for_a(database: SqlPayments, a_cursor: Any, b_cursor: Any, b: _Timed) -> Iterator[Callable[[], str | None]]:
    """A probe that names the step at which B is waiting for A's transaction, or None while B is not.

    The wait is read from the engine, never guessed from the clock. PostgreSQL lists
    the sessions that block a waiting one (``pg_blocking_pids``). SQLite has no such
    view, but its wait has a certain cause: a ``BEGIN IMMEDIATE`` that B has issued
    while A holds the write lock must wait in SQLite's busy handler (with no busy
    timeout it fails at once instead, which is no wait). DuckDB never makes a writer wait.
    """
    if isinstance(database, PostgresPayments):
        watcher = database.connect()
        pids = (a_cursor.connection.info.backend_pid, b_cursor.connection.info.backend_pid)

        def blocked_by_a() -> str | None:
            watcher.execute("SELECT %s = ANY(pg_blocking_pids(%s))", pids)
            return b.running if watcher.fetchall()[0][0] else None

        try:
            yield blocked_by_a
        finally:
            watcher.connection.close()
    elif isinstance(database, SQLitePayments) and database.busy_timeout > 0:
        issued: list[str] = []

        def on_statement(sql: str) -> None:  # SQLite calls this in B's thread as a statement starts to run
            if sql == database.begin_statement and b.running is not None:
                issued.append(b.running)

        # Never unset: B's connection ends with the race, and unsetting it while B runs a statement
        # could deadlock (SQLite would wait for B's statement, which waits to call this function).
        b_cursor.connection.set_trace_callback(on_statement)
        yield lambda: issued[0] if issued else None
    else:
        yield lambda: None


def _finished_or_waiting(rival: threading.Thread, waiting_at: Callable[[], str | None]) -> str | None:
    """Block until B's thread has finished (None) or the engine shows B waiting for A (the step it waits at)."""
    deadline = time.monotonic() + PATIENCE_SECONDS
    while rival.is_alive():
        if (step := waiting_at()) is not None:
            return step
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumer B neither finished nor waited for A within {PATIENCE_SECONDS:g} s")
        time.sleep(0.002)  # how often to look: it changes how soon A goes on, never what happens
    return None


def _context(delivery: Delivery, session: PaymentsSession, broker: Broker, notes: list[str] | None = None,
             *, ack_lost: bool = False) -> Context:
    return Context(delivery, session, ack=(lambda: None) if ack_lost else lambda: broker.ack(delivery),
                   note=(notes.append if notes is not None else lambda event: None))


def with_duplicates(messages: list[Message], *, every: int = 3) -> list[Message]:
    """The stream with every ``every``-th message published twice in a row, as a retrying producer would."""
    if every < 1:
        raise ValueError(f"every must be at least 1 (1 doubles every message), got {every}")
    doubled: list[Message] = []
    for position, message in enumerate(messages):
        doubled.append(message)
        if position % every == 0:
            doubled.append(message)
    return doubled


@dataclass(frozen=True)
class StressResult:
    """What several real consumers did to a stream with duplicates.

    ``distinct`` counts the valid message IDs, the payments a correct consumer makes;
    ``conflicts`` counts every delivery given back, whatever failed it.
    """

    engine: str
    consumers: int
    published: int
    distinct: int
    total_charged: int
    expected_total: int
    messages_charged_twice: int
    messages_never_charged: int
    dead_lettered: int
    conflicts: int
    seconds: float


def stress(
    database: SqlPayments,
    messages: list[Message],
    *,
    consumers: int = 4,
    handler: Handler | None = None,
    max_deliveries: int = 50,
) -> StressResult:
    """Several consumer threads work one queue of ``messages`` on ``database`` until it is empty.

    Every write conflict, busy database or lock timeout gives the message back to
    the broker, which delivers it again, so nothing is lost on the way.
    """
    if consumers < 1:
        raise ValueError(f"consumers must be at least 1, got {consumers}: somebody has to work the queue")
    handler = handler or InboxHandler()
    clock = VirtualClock()
    broker = Broker(clock, Trace(clock), max_deliveries=max_deliveries)
    for message in messages:
        broker.publish(message)
    lock = threading.Lock()
    conflicts = [0]

    def work(name: str) -> None:
        session = database.session()
        while True:
            with lock:
                if broker.is_empty:
                    return
                delivery = broker.receive(name)
            if delivery is None:
                time.sleep(0.001)  # rivals hold the rest; look again shortly
                continue

            def ack(delivery: Delivery = delivery) -> None:
                with lock:
                    broker.ack(delivery)

            context = Context(delivery, session, ack=ack, note=lambda event: None)
            try:
                for _ in handler.run(context):
                    pass
            except Exception as error:  # noqa: BLE001 - any failure gives the message back, never kills the worker
                # A worker that died here would hold the lease for ever (this clock never
                # moves, so it would never expire) and the run would never end.
                try:
                    session.rollback()
                except Exception:  # noqa: BLE001 - a broken connection: reconnect, the engine drops its transaction
                    session = database.session()
                with lock:
                    conflicts[0] += 1
                    broker.release(delivery, f"{type(error).__name__}: {error}")

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(f"consumer {chr(65 + i)}",), daemon=True) for i in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started

    charges = database.payments()["message_id"].value_counts()
    distinct = valid_charges(messages)
    counts = [int(charges.get(message_id, 0)) for message_id in distinct]
    return StressResult(
        engine=database.engine,
        consumers=consumers,
        published=len(messages),
        distinct=len(distinct),
        total_charged=database.total_charged(),
        expected_total=expected_total(messages),
        messages_charged_twice=sum(count > 1 for count in counts),
        messages_never_charged=sum(count == 0 for count in counts),
        dead_lettered=len(broker.dead_letters),
        conflicts=conflicts[0],
        seconds=seconds,
    )


def race_engines() -> tuple[dict[str, Callable[[], SqlPayments]], str]:
    """The engines a race can run on here, and a note on any that cannot.

    DuckDB and SQLite are always there; PostgreSQL when a server answers. Where
    servers are required (``IDEMLIB_REQUIRE_SERVERS=1``, as in CI), a missing one
    raises instead of being skipped.
    """
    engines: dict[str, Callable[[], SqlPayments]] = {"DuckDB": DuckDBPayments, "SQLite": SQLitePayments}
    # The engines' behaviour is the behaviour of these versions, so the note names them.
    versions = f"DuckDB {duckdb.__version__} and SQLite {sqlite3.sqlite_version} run in this process."
    reason = postgres_unavailable()
    if reason is None:
        engines["PostgreSQL"] = PostgresPayments
        server = engine_version(PostgresPayments())
        return engines, f"{versions} PostgreSQL {server} answers as the server: all three engines are real."
    if require_servers("postgres"):
        raise RuntimeError(reason)
    return engines, f"{versions} Skipping PostgreSQL. {reason}"


ISOLATION_LEVELS = ("READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")
"""PostgreSQL's isolation levels, weakest first; READ COMMITTED is its default and the course's."""


def postgres_at(isolation: str) -> PostgresPayments:
    """A PostgreSQL payments database whose handler transactions begin at ``isolation``.

    At READ COMMITTED a racing ``INSERT ... ON CONFLICT DO NOTHING`` waits, then writes
    zero rows. At REPEATABLE READ and SERIALIZABLE the same wait ends in a
    serialization failure instead, because the winner's row is not in the loser's
    snapshot: the loser must give the message back and try again in a new transaction.
    """
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, not {isolation!r}")
    database = PostgresPayments()
    database.begin_statement = f"BEGIN ISOLATION LEVEL {isolation}"
    database.engine = f"PostgreSQL, {isolation}"
    return database
