"""Deliver every message twice: a helper for your own test suite, on your own consumer and database.

The advice for testing an idempotent consumer is blunt: deliver every message twice
in integration tests. :func:`assert_idempotent` does that to any function that
handles one message with a database connection, ``handle(connection, message)``,
and commits its work. It learns what one delivery of each message does (the
business state your ``state`` function reads afterwards), then delivers the messages
again under every scenario that makes duplicates, each from the same starting state:

- every message twice in a row (the ack was lost, the broker redelivered at once);
- every message, then all of them again (the redeliveries come after other work);
- every message, then the oldest one again (a late duplicate after newer messages);
- every message, then all of them again in reverse order (a replay from a stored log);
- the consumer killed before each of its steps on every first delivery, then the
  message delivered again. Its steps are the calls it makes on the connection
  (statements and commits), seen without changing a line of it, plus any step name
  it ``yield``s (write it as a generator to name steps the database does not see);
- the connection lost before each step on every first delivery (an error the consumer
  may catch: one that catches it and acknowledges anyway loses the message);
- on PostgreSQL or a SQLite file, two deliveries of the same message at once: the first
  paused before each of its steps in turn while the second runs (until it ends or waits
  for a lock the first holds).

Each delivery ends without a commit of the helper's, as a process's does when it dies
(its open transaction is lost); the session is then reset (on PostgreSQL as
``DISCARD ALL`` would, keeping the driver's prepared statements) and serves the next delivery,
since opening a connection costs more
than most deliveries. A delivery that raises is redelivered, as a broker would, up to
three times in all.
Every message must end acknowledged, and the state must equal one delivery's. If
not, :class:`NotIdempotent` (an ``AssertionError``) names the scenario, the message
and the difference. In a pytest suite::

    from deliver_twice import assert_idempotent

    def test_payments_consumer_survives_duplicates(postgres_schema):
        assert_idempotent(handle_payment, recorded_messages, connect=postgres_schema.connect,
                          reset=create_tables)

``postgres_schema`` comes from this package's pytest plugin, installed with it. Without
``state=`` every table the connection sees is compared, so a side effect written anywhere
in the database is seen.

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

import contextvars
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deliver_twice.asynchronous import settle
from deliver_twice.consumer_thread import Blocked, ConsumerThread  # Blocked: a reader catches it from here
from deliver_twice.delivery import deliver
from deliver_twice.race import two_at_once, why_no_race
from deliver_twice.report import NotIdempotent, Report, Scenario, difference, not_idempotent_text
from deliver_twice.restart import Process
from deliver_twice.sessions import Sessions
from deliver_twice.state import whole_database
from deliver_twice.steps import Connection, Crashed, Handle, Watch

MAX_DELIVERIES = 3
"""How often a message whose delivery raised is delivered in all, as a broker's redelivery limit would allow."""

TIME_LIMIT = 60.0
"""Seconds each call into the consumer may take before the test fails it as blocked: a safety net against a hang,
far above what a delivery takes even on a busy machine. In a pytest run the ini option ``idempotency_time_limit``
replaces it for the tests of that run; ``time_limit=`` sets it for one call."""

suite_time_limit: contextvars.ContextVar[float | None] = contextvars.ContextVar("suite_time_limit", default=None)
"""The running test's ``idempotency_time_limit``, set by the pytest plugin around each test (from its pytest config)
and reset after it: a second pytest session in the same process reads its own configuration, never the first's."""

__all__ = [
    "MAX_DELIVERIES",
    "TIME_LIMIT",
    "Blocked",
    "NotIdempotent",
    "Report",
    "Scenario",
    "assert_idempotent",
    "idempotency_report",
    "label",
]


@dataclass
class _Run:
    redelivered: Callable[[Any], Any] | None = None
    problems: list[str] = field(default_factory=list)
    deliveries: int = 0
    _seen: set[int] = field(default_factory=set)

    def envelope(self, message: Any) -> Any:
        """What the broker hands over: the message itself the first time, then its redelivered copy."""
        if id(message) in self._seen and self.redelivered is not None:
            return self.redelivered(message)
        self._seen.add(id(message))
        return message


def label(message: Any) -> str:
    """How a report names a message: its ``message_id`` (or ``id``), else its text."""
    for name in ("message_id", "id"):
        if (value := getattr(message, name, None)) is None and isinstance(message, dict):
            value = message.get(name)
        if value is not None:
            return str(value)
    return repr(message)[:40]


def _deliver(consumer: ConsumerThread, handle: Handle, message: Any, watch: Watch,
             run: _Run | None = None) -> BaseException | None:
    """One delivery in the consumer's thread (a copy, after the first, when ``run`` makes them): None when
    acknowledged, else what stopped it."""
    consumer.watches = [watch]
    handed = message if run is None else run.envelope(message)
    outcome = consumer.call(lambda: deliver(handle, consumer.sessions, handed, watch, ack=consumer.ack),
                            f"the delivery of {label(message)}")
    if isinstance(outcome, Crashed) and isinstance(handle, Process):
        handle.restart()  # the process died: the redelivery meets a new one, its memory empty
    return outcome


def _until_acked(handle: Handle, consumer: ConsumerThread, message: Any, run: _Run,
                 failed: BaseException | None = None, tries: int = 0) -> None:
    """Redeliver ``message`` while it is not acknowledged, as a broker does, up to :data:`MAX_DELIVERIES` in all.

    ``tries`` deliveries were made already, the last ending in ``failed`` (None: acknowledged).
    """
    while tries == 0 or (failed is not None and tries < MAX_DELIVERIES):
        failed = _deliver(consumer, handle, message, Watch(), run)
        tries += 1
        run.deliveries += 1
    if failed is not None:
        run.problems.append(f"{label(message)} failed on all {MAX_DELIVERIES} deliveries ({_error(failed)}): "
                            "a duplicate must be acknowledged, or the broker retries it until it is dead-lettered")


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:80]}"


def _in_order(order: Callable[[list[Any]], list[Any]]) -> Callable[..., None]:
    """Deliver the messages in ``order(messages)``, each until acknowledged."""
    def play(handle: Handle, consumer: ConsumerThread, messages: list[Any], run: _Run) -> None:
        for message in order(messages):
            _until_acked(handle, consumer, message, run)
    return play


def _restarted(handle: Handle, consumer: ConsumerThread, messages: list[Any], run: _Run) -> None:
    """Every message, then the consumer's process restarts (its memory empty) and every message comes again."""
    _in_order(lambda ms: ms)(handle, consumer, messages, run)
    if isinstance(handle, Process):
        handle.restart()
    _in_order(lambda ms: ms)(handle, consumer, messages, run)


def _crash_before(step: int, error: bool = False) -> Callable[..., None]:
    """Each message's first delivery dies (or, with ``error``, loses its connection) before its ``step``-th step
    (if it has that many), then comes back unless it was acknowledged."""
    def play(handle: Handle, consumer: ConsumerThread, messages: list[Any], run: _Run) -> None:
        for message in messages:
            watch = Watch(fail_at=step) if error else Watch(crash_at=step)
            outcome = _deliver(consumer, handle, message, watch, run)
            run.deliveries += 1
            if error and watch.lost and outcome is None:
                # The consumer caught the error and acknowledged: the broker never sends the message again.
                run.problems.append(f"{label(message)} lost its connection before {watch.steps[-1]}, and the "
                                    "consumer acknowledged it anyway: the broker will not redeliver it")
                continue
            if watch.acked and outcome is not None:
                # The broker has the ack: it never sends the message again, whatever the consumer left undone.
                run.problems.append(f"{label(message)} was acknowledged before {watch.steps[-1]} and the consumer "
                                    "died there: the broker will not redeliver it")
                continue
            # Crashed (or failed), the broker has no ack: the message comes back.
            _until_acked(handle, consumer, message, run, outcome, 1)
    return play


def _at_once(step: int) -> Callable[..., None]:
    """Two deliveries of each message at once: the first waits before its ``step``-th step while the second runs."""
    def play(handle: Handle, consumer: ConsumerThread, messages: list[Any], run: _Run) -> None:
        for message in messages:
            watches: list[Watch] = []
            consumer.watches = watches
            first, second = run.envelope(message), run.envelope(message)
            beside = handle.another() if isinstance(handle, Process) else handle
            race = consumer.call(functools.partial(two_at_once, handle, consumer.sessions, first, step, watches,
                                                   ack=consumer.ack, second=second, beside=beside),
                                 f"two deliveries of {label(message)} at once")
            run.deliveries += 2
            for outcome in (race.first, race.second):
                if outcome is not None:
                    _until_acked(handle, consumer, message, run, outcome, 1)
    return play


_FIXES = {
    "twice": "record the message ID in an inbox table with a unique key, in the same transaction as the effect, "
             "and skip the effect when the insert finds it there",
    "late": "a late or replayed copy must change nothing: check the inbox before the effect, and never overwrite "
            "newer state with an older message's (compare a version or the message's position)",
    "restart": "keep what the consumer knows of past messages in the database, in the same transaction as the "
               "effect: memory in the process is gone after a restart, and another consumer process never had it",
    "crash": "make the effect and the inbox row one transaction, committed before the ack; an effect outside the "
             "database needs an idempotency key of its own",
    "error": "let an error end the delivery unacknowledged (raise, or nack) so the broker redelivers it; catch only "
             "what you can handle, and never acknowledge a message whose transaction did not commit",
    "race": "let the database settle it: a unique key on the message ID (INSERT ... ON CONFLICT DO NOTHING), "
            "not a SELECT then INSERT",
}


def idempotency_report(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                       reset: Callable[[Connection], None], state: Callable[[Connection], Any] | None = None,
                       expected: Any = None, ack: bool = False, redelivered: Callable[[Any], Any] | None = None,
                       time_limit: float | None = None) -> Report:
    """One :class:`Scenario` per way of making duplicates: deliveries made, whether the state held, what differs.

    ``connect()`` opens a connection to the database under test; ``reset(connection)``
    brings it to the starting state (the helper commits); ``state(connection)`` reads the
    business state to compare, e.g. the payment rows as a sorted list of tuples (leave
    out generated IDs and timestamps, which differ from run to run by design). Without
    ``state``, every table the connection sees is read, so a row written anywhere counts.

    ``expected``: what one delivery of each message must leave (as ``state`` reads it):
    a consumer wrong on its first delivery is then refused, not compared with itself.

    ``ack=True``: the consumer is called ``handle(connection, message, ack)`` and a message is
    acknowledged only when it calls ``ack()``, as with a broker's ``basic_ack``; a death after
    the ack is then one the broker never redelivers, so acking before the commit fails.

    ``redelivered(message)``: the copy a broker hands over on every delivery after a message's
    first (a new delivery tag, the redelivered flag) or a producer's retry (a new ``sent_at``);
    by default the copy is the message itself. A consumer that recognises a duplicate by
    anything but its message ID then fails.

    ``time_limit`` (seconds; the suite's ``idempotency_time_limit``, else :data:`TIME_LIMIT`)
    bounds each call into your code: one delivery, two deliveries at once, one ``reset`` or
    ``state``. It is a wall-clock safety net, generous so that a busy machine never reaches it:
    it turns a consumer blocked for good (a sleep, a network call without a timeout, a deadlock
    in Python) into :class:`Blocked`, an ``AssertionError`` that says which delivery waits after
    which step and at which line, instead of a suite that hangs. A consumer that finishes gets
    the same report whatever the limit.
    """
    messages = list(messages)
    if not messages:
        raise ValueError("give assert_idempotent at least one message: with none, every consumer passes")
    if time_limit is None:
        time_limit = suite_time_limit.get() or TIME_LIMIT
    sessions = Sessions(connect)
    consumer = ConsumerThread(sessions, time_limit, repr(getattr(handle, "__name__", handle)), ack=ack)
    try:
        return _report(Process(handle), messages, consumer, reset, state or whole_database, expected, redelivered)
    finally:
        if not consumer.broken:
            consumer.call(sessions.close, "closing its connections")  # each in the thread that opened it
        consumer.stop()


def _report(handle: Process, messages: list[Any], consumer: ConsumerThread, reset: Callable[[Connection], None],
            state: Callable[[Connection], Any], expected: Any, redelivered: Callable[[Any], Any] | None) -> Report:
    connect = consumer.sessions

    def fresh() -> Any:
        with_reset = connect()
        try:
            settle(reset(with_reset))  # type: ignore[func-returns-value]  # an async reset returns its coroutine
            if (commit := getattr(with_reset, "commit", None)) is not None:  # asyncpg has none: it autocommits
                settle(commit())
            return settle(state(with_reset))
        finally:
            connect.give_back(with_reset)

    def read() -> Any:
        connection = connect()
        try:
            return settle(state(connection))
        finally:
            connect.give_back(connection)

    handle.restart()  # a new process for the clean deliveries too: what an earlier test left in memory is gone
    before = consumer.call(fresh, "reset(connection) and state(connection) before any delivery")
    names: list[str] = []  # the steps of the longest delivery, to name the crash points
    for message in messages:
        watch = Watch()
        if (failed := _deliver(consumer, handle, message, watch)) is not None:
            raise ValueError(f"one clean delivery of {label(message)} failed: {_error(failed)}")
        names = max(names, watch.steps, key=len)
    once = consumer.call(read, "state(connection) after one delivery of each message")
    if expected is not None and once != expected:
        raise NotIdempotent(f"one delivery of each message does not leave what expected= says: "
                            f"{difference(expected, once)} (scenario: one clean delivery of each message; fix the "
                            "consumer's handling of a first delivery before testing its duplicates)")
    if once == before:
        # Every scenario would compare an unchanged state with an unchanged state and pass.
        raise ValueError("one delivery of each message changed nothing that `state` reads (did the consumer "
                         "commit?): a duplicate's effect could not be seen, so the test could not fail")
    plays: list[tuple[str, str, Callable[..., None]]] = [
        ("every message twice in a row (the ack lost)", "twice",
         _in_order(lambda ms: [m for m in ms for _ in (1, 2)])),
        ("every message, then all of them again", "twice", _in_order(lambda ms: ms + ms)),
    ]
    if len(messages) > 1:
        plays += [
            (f"every message, then the oldest ({label(messages[0])}) again after the newer ones", "late",
             _in_order(lambda ms: ms + ms[:1])),
            ("every message, then all of them again in reverse order (a replay)", "late",
             _in_order(lambda ms: ms + ms[::-1])),
        ]
    report = Report()
    if handle.why_not is None:
        plays.append(("every message, then the consumer restarts (its memory empty) and every message comes again",
                      "restart", _restarted))
    else:
        report.not_played.append(f"a restart that empties the consumer's memory: {handle.why_not} (in the crash "
                                 "scenarios too)")
    plays += [(f"crash before step {k} of {len(names)}: {names[k - 1]}", "crash", _crash_before(k))
              for k in range(1, len(names) + 1)]
    plays += [(f"connection lost before step {k} of {len(names)}: {names[k - 1]} (an error the consumer can catch)",
               "error", _crash_before(k, error=True)) for k in range(1, len(names) + 1)]
    no_race = consumer.call(lambda: why_no_race(connect), "opening a connection")
    if no_race is None:
        plays += [(f"two at once, one paused before step {k}: {names[k - 1]}", "race", _at_once(k))
                  for k in range(1, len(names) + 1)]
    else:
        report.not_played.append(no_race)
    if len(messages) == 1:
        report.not_played.append("a late duplicate and a replay in reverse order: they need two messages or more")
    for name, family, play in plays:
        consumer.scenario = name
        handle.restart()  # a new database, so a new process: nothing remembered from the last scenario
        consumer.call(fresh, "reset(connection) and state(connection) before the scenario")
        run = _Run(redelivered)
        play(handle, consumer, messages, run)
        got = consumer.call(read, "state(connection) after the scenario")
        if got != once:
            run.problems.insert(0, difference(once, got))
        report.append(Scenario(name, run.deliveries, not run.problems, "; ".join(run.problems),
                               "" if not run.problems else _FIXES[family]))
    return report


def assert_idempotent(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                      reset: Callable[[Connection], None], state: Callable[[Connection], Any] | None = None,
                      expected: Any = None, ack: bool = False, redelivered: Callable[[Any], Any] | None = None,
                      time_limit: float | None = None) -> Report:
    """Deliver every message twice, in every way :func:`idempotency_report` knows; raise :class:`NotIdempotent` if any differs.

    Passes, returning the report, when every scenario ends with the state of one
    delivery of each message and every message acknowledged. A delivery still blocked
    after ``time_limit`` seconds (a safety net against a hang, never a measure of speed)
    fails it with :class:`Blocked`.
    """
    __tracebackhide__ = True  # pytest shows the reader's test line and the message, not this helper's insides
    report = idempotency_report(handle, messages, connect=connect, reset=reset, state=state, expected=expected,
                                ack=ack, redelivered=redelivered, time_limit=time_limit)
    if report.failed():
        raise NotIdempotent(not_idempotent_text(handle, report))
    return report
