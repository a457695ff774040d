"""Deliver every message twice: a helper for your own test suite, on your own consumer and database.

The advice for testing an idempotent consumer is blunt: deliver every message twice
in integration tests. :func:`assert_idempotent` does that to any function that
handles one message with a database connection, ``handle(connection, message)``,
and commits its work. It learns what one delivery of each message does (the
business state your ``state`` function reads afterwards), then delivers the messages
again under every scenario that makes duplicates, each from the same starting state:

- every message twice in a row (the ack was lost, the broker redelivered at once);
- every message, then all of them again (the redeliveries come after other work);
- the consumer killed before each of its steps on every first delivery, then the
  message delivered again. Its steps are the calls it makes on the connection
  (statements and commits), seen without changing a line of it, plus any step name
  it ``yield``s (write it as a generator to name steps the database does not see);
- on PostgreSQL, two deliveries of the same message at once: the first paused before
  each of its steps in turn while the second runs (until it ends or waits for a lock).

Each delivery ends without a commit of the helper's, as a process's does when it dies
(its open transaction is lost); the session is then reset (on PostgreSQL with
``DISCARD ALL``) and serves the next delivery, since opening a connection costs more
than most deliveries. A delivery that raises is redelivered, as a broker would, up to
three times in all.
Every message must end acknowledged, and the state must equal one delivery's. If
not, :class:`NotIdempotent` (an ``AssertionError``) names the scenario, the message
and the difference. In a pytest suite::

    from idemlib import assert_idempotent

    def test_payments_consumer_survives_duplicates(postgres_schema):
        assert_idempotent(handle_payment, recorded_messages, connect=postgres_schema.connect,
                          reset=create_tables, state=read_payments)

``postgres_schema`` comes from ``pytest_plugins = ["idemlib.operating.pytest_plugin"]``.

A consumer that never finishes a delivery (it sleeps, waits for a network call with
no timeout, deadlocks on a lock in Python) would hang your suite: the race scenarios
read a wait for a database lock from PostgreSQL, but no database shows those waits. So
each call into your code runs in a thread of its own under a wall-clock limit,
:data:`TIME_LIMIT` seconds unless ``time_limit=`` says otherwise, after which
:class:`Blocked` (an ``AssertionError``) says which delivery waits, after which of its
steps, at which line, and what to do. The limit is a safety net, far above what a
delivery takes on a busy machine: it turns a hang into a failure and changes no
other outcome.

What it cannot see: anything your ``state`` does not read. An email sent, or a
call to another system made without an idempotency key, happens again on a
redelivery and leaves no row behind: the helper passes while the customer gets two.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psycopg

from idemlib.operating.consumer_thread import Blocked, ConsumerThread  # Blocked: a reader catches it from here
from idemlib.operating.steps import Connection, Handle, Sessions, Watch, deliver, two_at_once
from idemlib.stores.postgres_store import postgres_url

MAX_DELIVERIES = 3
"""How often a message whose delivery raised is delivered in all, as a broker's redelivery limit would allow."""

TIME_LIMIT = 60.0
"""Seconds each call into the consumer may take before the test fails it as blocked: a safety net against a hang,
far above what a delivery takes even on a busy machine. The pytest plugin sets it from the ini option
``idempotency_time_limit``; ``time_limit=`` sets it for one call."""


class NotIdempotent(AssertionError):
    """A duplicate changed the business state: the text names the scenario, the message and the difference."""


@dataclass
class _Run:
    problems: list[str] = field(default_factory=list)
    deliveries: int = 0


def label(message: Any) -> str:
    """How a report names a message: its ``message_id`` (or ``id``), else its text."""
    for name in ("message_id", "id"):
        if (value := getattr(message, name, None)) is None and isinstance(message, dict):
            value = message.get(name)
        if value is not None:
            return str(value)
    return repr(message)[:40]


def _deliver(consumer: ConsumerThread, handle: Handle, message: Any, watch: Watch) -> BaseException | None:
    """One delivery in the consumer's thread: None when acknowledged, else what stopped it."""
    consumer.watches = [watch]
    return consumer.call(lambda: deliver(handle, consumer.sessions, message, watch), f"the delivery of {label(message)}")


def _until_acked(handle: Handle, consumer: ConsumerThread, message: Any, run: _Run,
                 failed: BaseException | None = None, tries: int = 0) -> None:
    """Redeliver ``message`` while it is not acknowledged, as a broker does, up to :data:`MAX_DELIVERIES` in all.

    ``tries`` deliveries were made already, the last ending in ``failed`` (None: acknowledged).
    """
    while tries == 0 or (failed is not None and tries < MAX_DELIVERIES):
        failed = _deliver(consumer, handle, message, Watch())
        tries += 1
        run.deliveries += 1
    if failed is not None:
        run.problems.append(f"{label(message)} failed on all {MAX_DELIVERIES} deliveries ({_error(failed)}): "
                            "a duplicate must be acknowledged, or the broker retries it until it is dead-lettered")


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:80]}"


def _twice_in_a_row(handle: Handle, consumer: ConsumerThread, messages: Sequence[Any], run: _Run) -> None:
    """Each message, then at once its copy: the ack of the first was lost."""
    for message in messages:
        _until_acked(handle, consumer, message, run)
        _until_acked(handle, consumer, message, run)


def _all_again(handle: Handle, consumer: ConsumerThread, messages: Sequence[Any], run: _Run) -> None:
    """Every message, then every copy: a redelivery comes after other messages' work."""
    for message in [*messages, *messages]:
        _until_acked(handle, consumer, message, run)


def _crash_before(step: int) -> Callable[..., None]:
    """Each message's first delivery dies before its ``step``-th step (if it has that many), then comes back."""
    def play(handle: Handle, consumer: ConsumerThread, messages: Sequence[Any], run: _Run) -> None:
        for message in messages:
            outcome = _deliver(consumer, handle, message, Watch(crash_at=step))
            run.deliveries += 1
            # Crashed (or failed), the broker has no ack: the message comes back.
            _until_acked(handle, consumer, message, run, outcome, 1)
    return play


def _at_once(step: int) -> Callable[..., None]:
    """Two deliveries of each message at once: the first waits before its ``step``-th step while the second runs."""
    def play(handle: Handle, consumer: ConsumerThread, messages: Sequence[Any], run: _Run) -> None:
        for message in messages:
            watches: list[Watch] = []
            consumer.watches = watches
            race = consumer.call(lambda: two_at_once(handle, consumer.sessions, message, step, watches),
                                 f"two deliveries of {label(message)} at once")
            run.deliveries += 2
            for outcome in (race.first, race.second):
                if outcome is not None:
                    _until_acked(handle, consumer, message, run, outcome, 1)
    return play


def _on_postgres(connect: Sessions) -> bool:
    connection = connect()
    try:
        return type(connection).__module__.startswith("psycopg")
    finally:
        connect.give_back(connection)


def _difference(once: Any, got: Any) -> str:
    if isinstance(once, (list, tuple)) and isinstance(got, (list, tuple)):
        try:
            extra, missing = Counter(got) - Counter(once), Counter(once) - Counter(got)
        except TypeError:  # rows that cannot be hashed: show both
            pass
        else:
            parts = [f"{verb} {sorted(rows.elements(), key=repr)}" for verb, rows in (("extra", extra), ("missing", missing))
                     if rows]
            return "; ".join(parts)
    return f"one delivery leaves {once!r}, this run {got!r}"


def idempotency_report(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                       reset: Callable[[Connection], None], state: Callable[[Connection], Any],
                       time_limit: float | None = None) -> pd.DataFrame:
    """One row per scenario: deliveries made, whether the state equals one delivery's, and what differs.

    ``connect()`` opens a connection to the database under test; ``reset(connection)``
    brings it to the starting state (the helper commits); ``state(connection)`` reads the
    business state to compare, e.g. the payment rows as a sorted list of tuples (leave
    out generated IDs and timestamps, which differ from run to run by design).

    ``time_limit`` (seconds; :data:`TIME_LIMIT` when None) bounds each call into your code:
    one delivery, two deliveries at once, one ``reset`` or ``state``. It is a wall-clock
    safety net, generous so that a busy machine never reaches it: it turns a consumer
    blocked for good (a sleep, a network call without a timeout, a deadlock in Python)
    into :class:`Blocked`, an ``AssertionError`` that
    says which delivery waits after which step and at which line, instead of a suite that
    hangs. A consumer that finishes gets the same report whatever the limit.
    """
    messages = list(messages)
    if not messages:
        raise ValueError("give assert_idempotent at least one message: with none, every consumer passes")
    sessions = Sessions(connect)
    consumer = ConsumerThread(sessions, TIME_LIMIT if time_limit is None else time_limit,
                              repr(getattr(handle, "__name__", handle)))
    try:
        return _report(handle, messages, consumer, reset, state)
    finally:
        if not consumer.broken:
            consumer.call(sessions.close, "closing its connections")  # each in the thread that opened it
        consumer.stop()


def _report(handle: Handle, messages: list[Any], consumer: ConsumerThread, reset: Callable[[Connection], None],
            state: Callable[[Connection], Any]) -> pd.DataFrame:
    connect = consumer.sessions

    def fresh() -> Any:
        with_reset = connect()
        try:
            reset(with_reset)
            with_reset.commit()
            return state(with_reset)
        finally:
            connect.give_back(with_reset)

    def read() -> Any:
        connection = connect()
        try:
            return state(connection)
        finally:
            connect.give_back(connection)

    before = consumer.call(fresh, "reset(connection) and state(connection) before any delivery")
    names: list[str] = []  # the steps of the longest delivery, to name the crash points
    for message in messages:
        watch = Watch()
        if (failed := _deliver(consumer, handle, message, watch)) is not None:
            raise ValueError(f"one clean delivery of {label(message)} failed: {_error(failed)}")
        names = max(names, watch.steps, key=len)
    once = consumer.call(read, "state(connection) after one delivery of each message")
    if once == before:
        # Every scenario would compare an unchanged state with an unchanged state and pass.
        raise ValueError("one delivery of each message changed nothing that `state` reads (did the consumer "
                         "commit?): a duplicate's effect could not be seen, so the test could not fail")
    plays: list[tuple[str, Callable[..., None]]] = [
        ("every message twice in a row (the ack lost)", _twice_in_a_row),
        ("every message, then all of them again", _all_again),
    ]
    plays += [(f"crash before step {k} of {len(names)}: {names[k - 1]}", _crash_before(k))
              for k in range(1, len(names) + 1)]
    if consumer.call(lambda: _on_postgres(connect), "opening a connection"):
        plays += [(f"two at once, one paused before step {k}: {names[k - 1]}", _at_once(k))
                  for k in range(1, len(names) + 1)]
    rows = []
    for name, play in plays:
        consumer.scenario = name
        consumer.call(fresh, "reset(connection) and state(connection) before the scenario")
        run = _Run()
        play(handle, consumer, messages, run)
        got = consumer.call(read, "state(connection) after the scenario")
        if got != once:
            run.problems.insert(0, _difference(once, got))
        rows.append((name, run.deliveries, not run.problems, "; ".join(run.problems)))
    return pd.DataFrame(rows, columns=["scenario", "deliveries", "same state as one delivery", "what differs"])


def assert_idempotent(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                      reset: Callable[[Connection], None], state: Callable[[Connection], Any],
                      time_limit: float | None = None) -> pd.DataFrame:
    """Deliver every message twice, in every way :func:`idempotency_report` knows; raise :class:`NotIdempotent` if any differs.

    Passes, returning the report, when every scenario ends with the state of one
    delivery of each message and every message acknowledged. A delivery still blocked
    after ``time_limit`` seconds (:data:`TIME_LIMIT` by default: a safety net against a
    hang, never a measure of speed) fails it with
    :class:`Blocked`.
    """
    __tracebackhide__ = True  # pytest shows the reader's test line and the message, not this helper's insides
    report = idempotency_report(handle, messages, connect=connect, reset=reset, state=state, time_limit=time_limit)
    failed = report[~report["same state as one delivery"]]
    if not failed.empty:
        lines = [f"- {row['scenario']}: {row['what differs']}" for _, row in failed.iterrows()]
        raise NotIdempotent(f"{getattr(handle, '__name__', handle)!r} is not idempotent in {len(failed)} of "
                            f"{len(report)} scenarios:\n" + "\n".join(lines))
    return report


_schemas = itertools.count(1)


def _drop(url: str, name: str) -> None:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    except psycopg.Error:
        pass  # the server went away: nothing of ours is left to drop


class PostgresSchema:
    """An empty schema of its own on a PostgreSQL server, dropped by :meth:`drop` or when the object goes.

    ``connect()`` opens connections that work inside it.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or postgres_url()
        self.name = f"idempotency_test_{os.getpid()}_{next(_schemas)}"
        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
            admin.execute(f"CREATE SCHEMA {self.name}")
        self.drop = weakref.finalize(self, _drop, self.url, self.name)

    def connect(self) -> psycopg.Connection:
        """A new connection to this schema's tables (its ``search_path``), not in autocommit: the consumer commits."""
        return psycopg.connect(self.url, options=f"-c search_path={self.name}")


@contextmanager
def fresh_schema(url: str | None = None) -> Iterator[PostgresSchema]:
    """An empty schema on the PostgreSQL at ``url`` (``IDEMLIB_POSTGRES_URL`` by default), dropped afterwards."""
    schema = PostgresSchema(url)
    try:
        yield schema
    finally:
        schema.drop()
