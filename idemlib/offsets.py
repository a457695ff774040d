"""On an ordered log, the position can replace the ID table: store the last sequence applied next to the output.

The consumer reads records from a log (a real NATS JetStream stream, or an
in-process model of one), and in ONE DuckDB transaction applies a record and
stores its stream sequence; a record at or below the stored sequence is skipped.
That works only while records reach the consumer in order: one partition (subject)
per offset, and one record in flight at a time. A crash between any two steps
leaves either both the effect and the offset, or neither.

The NATS code here is the minimum this lesson needs (a stream, a durable pull
consumer, publish, fetch, ack), run on a private asyncio loop in a background
thread so that notebook cells stay synchronous.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import duckdb
import pandas as pd

from idemlib.servers import NATS

STEPS = ("fetch", "begin", "read offset", "apply", "store offset", "commit", "ack")
"""The offset consumer's steps for one record; a crash can strike before any of them."""

T = TypeVar("T")
_runs = itertools.count(1)


@dataclass
class Record:
    """One delivery of a log record: its stream sequence, subject, payload and the way to acknowledge it."""

    seq: int
    subject: str
    data: dict[str, Any]
    ack: Callable[[], None]


class Subscription(Protocol):
    def fetch(self) -> Record | None: ...
    def done(self) -> bool: ...
    def close(self) -> None: ...


class OrderedLog(Protocol):
    """What the offset consumer needs of a log: append records, and durable consumers that redeliver unacked ones."""

    kind: str

    def append(self, subject: str, data: dict[str, Any]) -> int: ...
    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> Subscription: ...
    def close(self) -> None: ...


# --- The in-process model: a list of records and, per consumer, what was delivered and acked.

@dataclass
class _ModelConsumer:
    subject: str | None
    max_in_flight: int
    next_index: int = 0
    unacked: dict[int, int] = field(default_factory=dict)  # seq -> index, delivered but not acked


class MemoryLog:
    """An ordered log in process, with JetStream's rules for a durable consumer with explicit acks.

    Assumptions of the model: a record delivered but never acked comes back to the
    next subscription (a restarted process) once its ack wait has passed, which is
    after any record that may be sent meanwhile: at most ``max_in_flight`` records are
    out unacked at a time, so with one in flight nothing overtakes it.
    """

    kind = "in-process model of an ordered log"

    def __init__(self) -> None:
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        self.consumers: dict[str, _ModelConsumer] = {}

    def append(self, subject: str, data: dict[str, Any]) -> int:
        self.records.append((len(self.records) + 1, subject, dict(data)))
        return len(self.records)

    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> _ModelSubscription:
        state = self.consumers.setdefault(consumer, _ModelConsumer(subject, max_in_flight))
        return _ModelSubscription(self, state)

    def close(self) -> None:
        self.records.clear()


class _ModelSubscription:
    def __init__(self, log: MemoryLog, state: _ModelConsumer) -> None:
        self._log, self._state = log, state
        self._redeliver = sorted(state.unacked)  # what the previous process left unacked comes back first

    def _matches(self, index: int) -> bool:
        return self._state.subject is None or self._log.records[index][1] == self._state.subject

    def fetch(self) -> Record | None:
        state = self._state
        while state.next_index < len(self._log.records) and not self._matches(state.next_index):
            state.next_index += 1
        room = len(state.unacked) < state.max_in_flight
        if self._redeliver and (not room or state.next_index >= len(self._log.records)):
            # its ack wait runs out only after whatever else may be sent meanwhile has been sent
            return self._record(state.unacked[self._redeliver.pop(0)])
        if not room or state.next_index >= len(self._log.records):
            return None
        index, state.next_index = state.next_index, state.next_index + 1
        state.unacked[index + 1] = index
        return self._record(index)

    def _record(self, index: int) -> Record:
        seq, subject, data = self._log.records[index]
        return Record(seq, subject, dict(data), lambda: self._state.unacked.pop(seq, None))

    def done(self) -> bool:
        rest = range(self._state.next_index, len(self._log.records))
        return not self._state.unacked and not any(self._matches(i) for i in rest)

    def close(self) -> None:
        self._redeliver = []


# --- The real NATS JetStream: a stream per run, a durable pull consumer per reader.

class _Loop:
    """A private asyncio event loop in a daemon thread: run a coroutine and wait for its result.

    Jupyter already runs a loop in the main thread, so ``asyncio.run`` cannot be used in a cell.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class JetStreamLog:
    """A real JetStream stream named for this process and run, with subjects ``<stream>.<subject>``.

    ``ack_wait`` is short (seconds) so that a record a crashed consumer left unacked
    comes back quickly. :meth:`close` deletes the stream.
    """

    kind = "real NATS JetStream"

    def __init__(self, url: str | None = None, ack_wait: float = 0.25) -> None:
        import nats

        self.name = f"idemlib_l10_{os.getpid()}_{next(_runs)}"
        self.ack_wait = ack_wait
        self._loop = _Loop()

        async def connect() -> Any:
            connection = await nats.connect(url or NATS.url(), connect_timeout=3, allow_reconnect=False)
            stream = connection.jetstream()
            await stream.add_stream(name=self.name, subjects=[f"{self.name}.>"])
            return connection, stream

        self._connection, self._js = self._loop.run(connect())

    def append(self, subject: str, data: dict[str, Any]) -> int:
        ack = self._loop.run(self._js.publish(f"{self.name}.{subject}", json.dumps(data).encode()))
        return int(ack.seq)

    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> _JetStreamSubscription:
        from nats.js.api import AckPolicy, ConsumerConfig
        from nats.js.errors import NotFoundError

        async def bind() -> Any:
            try:
                await self._js.consumer_info(self.name, consumer)
            except NotFoundError:
                await self._js.add_consumer(self.name, ConsumerConfig(
                    durable_name=consumer, ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
                    max_ack_pending=max_in_flight, filter_subject=f"{self.name}.{subject or '>'}"))
            return await self._js.pull_subscribe_bind(durable=consumer, stream=self.name)

        return _JetStreamSubscription(self, consumer, self._loop.run(bind()))

    def close(self) -> None:
        async def finish() -> None:
            try:
                await self._js.delete_stream(self.name)
            finally:
                await self._connection.close()

        try:
            self._loop.run(finish())
        finally:
            self._loop.stop()


class _JetStreamSubscription:
    def __init__(self, log: JetStreamLog, consumer: str, subscription: Any) -> None:
        self._log, self._consumer, self._sub = log, consumer, subscription

    def fetch(self) -> Record | None:
        import nats.errors

        async def one() -> Any:
            try:
                return (await self._sub.fetch(1, timeout=self._log.ack_wait * 3))[0]
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                return None

        message = self._log._loop.run(one())
        if message is None:
            return None
        subject = message.subject.removeprefix(f"{self._log.name}.")
        return Record(message.metadata.sequence.stream, subject, json.loads(message.data),
                      lambda: self._log._loop.run(message.ack_sync()))

    def done(self) -> bool:
        info = self._log._loop.run(self._log._js.consumer_info(self._log.name, self._consumer))
        return info.num_pending == 0 and info.num_ack_pending == 0

    def close(self) -> None:
        self._log._loop.run(self._sub.unsubscribe())


def open_log(prefer_real: bool = True) -> OrderedLog:
    """The real JetStream when NATS answers (see :func:`idemlib.servers.available`), else the in-process model."""
    from idemlib.servers import available

    if prefer_real and available(NATS):
        return JetStreamLog()
    return MemoryLog()


# --- The consumer: effect and offset in one DuckDB transaction.

class Projection:
    """The consumer's output and its offsets, in one DuckDB database.

    ``totals`` is the output (dollars paid per order: an increment, which is not safe
    to repeat); ``applications`` logs every time a record's effect was committed, so a
    test can count them; ``offsets`` holds the last sequence applied per partition (``part``).
    """

    def __init__(self) -> None:
        self.db = duckdb.connect(":memory:", config={"threads": 1})
        self.db.execute("CREATE TABLE totals (order_id INTEGER PRIMARY KEY, paid INTEGER NOT NULL)")
        self.db.execute("CREATE TABLE applications (seq BIGINT, subject VARCHAR)")
        self.db.execute("CREATE TABLE offsets (part VARCHAR PRIMARY KEY, last_seq BIGINT NOT NULL)")
        self.session = self.db.cursor()

    def restart(self) -> None:
        """A crashed process's open transaction is gone: roll it back and open a new session."""
        try:
            self.session.execute("ROLLBACK")
        except duckdb.Error:
            pass  # no transaction was open
        self.session = self.db.cursor()

    def applied_per_record(self, sequences: list[int]) -> pd.Series:
        counts = self.db.execute("SELECT seq, count(*) FROM applications GROUP BY seq").fetchall()
        return pd.Series(dict(counts), dtype=int).reindex(sequences, fill_value=0).rename("times applied")

    def totals(self) -> dict[int, int]:
        return dict(self.db.execute("SELECT order_id, paid FROM totals ORDER BY order_id").fetchall())


@dataclass(frozen=True)
class CrashAt:
    """Kill the consumer just before ``step`` of the first delivery of record ``seq``."""

    step: str
    seq: int

    def __post_init__(self) -> None:
        if self.step not in STEPS:
            raise ValueError(f"no step {self.step!r}; the offset consumer's steps are {STEPS}")


def consume(log: OrderedLog, projection: Projection, consumer: str = "payments", *, subject: str | None = None,
            part: str | None = None, use_offset: bool = True, crash: CrashAt | None = None,
            max_in_flight: int = 1, max_restarts: int = 5) -> int:
    """Run the offset consumer until its subscription has every record acked; returns how many times it crashed.

    ``consumer`` is the durable consumer's name on the log; ``part`` names the offset
    row (by default the ``subject``, or ``all`` for the whole stream): two consumers
    given the same ``part`` share one stored position.
    With ``use_offset=False`` it applies every delivery: the consumer with no memory.
    """
    part = part or subject or "all"
    crashes = 0
    pending = crash
    while crashes <= max_restarts:
        subscription = log.subscribe(consumer, subject, max_in_flight)
        previous = 0  # the sequence this process handled last
        try:
            while not subscription.done():
                record: Record | None = None
                for step in STEPS:
                    if pending is not None and step == pending.step and (
                            record.seq == pending.seq if record is not None else previous == pending.seq - 1):
                        raise _Crash
                    if step == "fetch":
                        record = subscription.fetch()
                        if record is None:
                            break
                    elif not _step(step, record, projection, part, use_offset):
                        break
                previous = record.seq if record is not None else previous
            return crashes
        except _Crash:
            crashes += 1
            pending = None
            projection.restart()
        finally:
            subscription.close()
    raise RuntimeError(f"the consumer crashed {crashes} times without finishing")


class _Crash(Exception):
    """The consumer's process dies here."""


def _step(step: str, record: Record, projection: Projection, part: str, use_offset: bool) -> bool:
    """Do one step for ``record``; False when the record is finished early (skipped as applied before)."""
    session = projection.session
    if step == "begin":
        session.execute("BEGIN")
    elif step == "read offset":
        row = session.execute("SELECT last_seq FROM offsets WHERE part = ?", [part]).fetchone()
        if use_offset and row is not None and record.seq <= row[0]:
            session.execute("COMMIT")
            record.ack()  # at or below the stored position: applied before, skip it
            return False
    elif step == "apply":
        session.execute("INSERT INTO totals VALUES (?, ?) ON CONFLICT (order_id) DO UPDATE SET paid = totals.paid + "
                        "excluded.paid", [record.data["order_id"], record.data["amount"]])
        session.execute("INSERT INTO applications VALUES (?, ?)", [record.seq, record.subject])
    elif step == "store offset":
        session.execute("INSERT INTO offsets VALUES (?, ?) ON CONFLICT (part) DO UPDATE SET last_seq = excluded.last_seq",
                        [part, record.seq])
    elif step == "commit":
        session.execute("COMMIT")
    elif step == "ack":
        record.ack()
    return True


EVENTS = (("orders", {"order_id": 1042, "amount": 40}), ("orders", {"order_id": 2077, "amount": 15}),
          ("orders", {"order_id": 1042, "amount": -40}))
"""Three records on one subject: order 1042 charged \\$40, order 2077 charged \\$15, order 1042 refunded \\$40."""


def offset_crash_matrix(make_log: Callable[[], OrderedLog], *, crash_seq: int = 2, use_offset: bool = True,
                        max_in_flight: int = 1, events: tuple[tuple[str, dict[str, Any]], ...] = EVENTS
                        ) -> pd.DataFrame:
    """Crash the offset consumer before each step of record ``crash_seq`` on a fresh log; count each record's effects.

    One row per crash point: the crashes, how many records were applied once, twice
    or never, and the totals per order.
    """
    rows = []
    for step in (None, *STEPS):
        log = make_log()
        try:
            sequences = [log.append(subject, data) for subject, data in events]
            projection = Projection()
            crashes = consume(log, projection, crash=CrashAt(step, crash_seq) if step else None,
                              use_offset=use_offset, max_in_flight=max_in_flight)
            applied = projection.applied_per_record(sequences)
            rows.append(("no crash" if step is None else f"crash before {step}", crashes, int((applied == 1).sum()),
                         int((applied >= 2).sum()), int((applied == 0).sum()), projection.totals()))
        finally:
            log.close()
    return pd.DataFrame(rows, columns=["fault", "crashes", "applied once", "applied twice", "never applied",
                                       "paid per order"])
