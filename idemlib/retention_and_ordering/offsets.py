"""On an ordered log, the position can replace the ID table: store the last sequence applied next to the output.

The consumer reads records from a log (a real NATS JetStream stream, or an
in-process model of one), and in ONE DuckDB transaction applies a record and
stores its stream sequence; a record at or below the stored sequence is skipped.
That works only while records reach the consumer in order: one partition (subject)
per offset, and one record in flight at a time. A crash between any two steps
leaves either both the effect and the offset, or neither.

The log is a real NATS JetStream stream (:mod:`idemlib.retention_and_ordering.jetstream_log`) or an
in-process model of one (:mod:`idemlib.retention_and_ordering.ordered_log`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import duckdb
import pandas as pd

from idemlib.broker import Delivery
from idemlib.clock import VirtualClock
from idemlib.faults import Crash, FaultPlan
from idemlib.handlers import Context, Handler, Steps
from idemlib.messages import Message
from idemlib.retention_and_ordering.jetstream_log import JetStreamLog
from idemlib.retention_and_ordering.ordered_log import MemoryLog, OrderedLog, Record, Subscription
from idemlib.servers import NATS, available
from idemlib.sim import Engine
from idemlib.stores.sql import inbox_table
from idemlib.trace import Event, Trace

STEPS = ("fetch", "begin", "read offset", "apply", "store offset", "commit", "ack")
"""The offset consumer's steps for one record; a crash can strike before any of them."""


def log_factory() -> Callable[[], OrderedLog]:
    """:class:`JetStreamLog` when NATS answers, else :class:`MemoryLog` (after saying why and how to start NATS)."""
    return JetStreamLog if available(NATS) else MemoryLog


# --- The consumer: effect and offset in one DuckDB transaction.

class Projection:
    """The consumer's output and its offsets, in one DuckDB database.

    ``totals`` is the output (dollars paid per order: an increment, which is not safe
    to repeat); ``applications`` logs every time a record's effect was committed, so a
    test can count them; ``offsets`` holds the last sequence applied per partition (``part``);
    ``processed_messages`` holds the message IDs applied, for a consumer that also checks IDs.
    """

    def __init__(self) -> None:
        self.db = duckdb.connect(":memory:", config={"threads": 1})
        self.db.execute("CREATE TABLE totals (order_id INTEGER PRIMARY KEY, paid INTEGER NOT NULL)")
        self.db.execute("CREATE TABLE applications (seq BIGINT, subject VARCHAR, message_id VARCHAR)")
        self.db.execute("CREATE TABLE offsets (part VARCHAR PRIMARY KEY, last_seq BIGINT NOT NULL)")
        self.db.execute(inbox_table())
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

    def times_applied(self, message_id: str) -> int:
        """How many times the effect of message ``message_id`` was committed, whatever records carried it."""
        count = self.db.execute("SELECT count(*) FROM applications WHERE message_id = ?", [message_id]).fetchall()
        return int(count[0][0])

    def totals(self) -> dict[int, int]:
        return dict(self.db.execute("SELECT order_id, paid FROM totals ORDER BY order_id").fetchall())


def CrashAt(step: str, seq: int) -> FaultPlan:
    """A fault plan that kills the offset consumer just before ``step`` of the first delivery of record ``seq``."""
    if step not in STEPS:
        raise ValueError(f"no step {step!r}; the offset consumer's steps are {STEPS}")
    return FaultPlan(crashes=[Crash(step, 1, copy=seq)])


class LogSource:
    """An ordered log as the run engine's source: each record fetched through a durable consumer is a delivery.

    A delivery's message is the record (its ``message_id``, else ``seq N``), its
    position the record's stream sequence, its count how many times this source has
    fetched it. One process reads at a time; when it dies its subscription closes, and
    the next one (the restarted process) gets what it left unacked first, as the log's
    rules say. A log has no give-back either: a record whose step failed comes back
    the same way, on the next subscription.
    """

    def __init__(self, log: OrderedLog, consumer: str, subject: str | None, max_in_flight: int, clock: VirtualClock,
                 trace: Trace) -> None:
        self.log, self.consumer, self.subject, self.max_in_flight = log, consumer, subject, max_in_flight
        self.clock, self.trace = clock, trace
        self.fetched: dict[int, int] = {}  # per stream sequence: how many times it was fetched
        self._open: Subscription | None = None

    def _subscription(self) -> Subscription:
        if self._open is None:
            self._open = self.log.subscribe(self.consumer, self.subject, self.max_in_flight)
        return self._open

    @property
    def is_empty(self) -> bool:
        """True when the durable consumer has every record acked."""
        return self._subscription().done()

    def receive(self, consumer: str) -> Delivery | None:
        """Fetch the next record the log sends this consumer, or None when it sends none now."""
        record = self._subscription().fetch()
        if record is None:
            return None
        count = self.fetched[record.seq] = self.fetched.get(record.seq, 0) + 1
        message = Message(str(record.data.get("message_id") or f"seq {record.seq}"), record)
        self.trace.record(consumer, Event.DELIVERED, message.label, count, "redelivered" if count > 1 else "")
        return Delivery(message, record.seq, count, count, consumer, float("inf"))

    def ack(self, delivery: Delivery) -> bool:
        self.trace.record(delivery.consumer, Event.ACKED, delivery.message_id, delivery.count)
        delivery.message.body.ack()
        return True

    def release(self, delivery: Delivery, reason: str) -> None:
        self.crashed(delivery.consumer)

    def extend(self, delivery: Delivery) -> bool:
        return False  # the log's ack wait is its own

    def next_lease_expiry(self) -> float | None:
        """When to fetch again after the log sent nothing: at once, since a record out unacked comes back on the
        log's own clock (JetStream's ack wait, in real seconds)."""
        return None if self.is_empty else self.clock.now()

    def crashed(self, consumer: str) -> None:
        self.close()

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


class OffsetConsumer(Handler):
    """The offset consumer's job for one record: its :data:`STEPS`, each done by :func:`apply_step`."""

    name = "offset consumer"
    steps = STEPS
    restart_seconds = 0.0

    def __init__(self, projection: Projection, part: str, use_offset: bool, use_ids: bool) -> None:
        self.projection, self.part, self.use_offset, self.use_ids = projection, part, use_offset, use_ids

    def run(self, ctx: Context) -> Steps:
        # the record as the log delivered it, acked through the run (where the fault plan may lose the ack)
        record = replace(ctx.delivery.message.body, ack=ctx.ack)
        yield "fetch"  # the log has sent the record; the process takes it
        for step in STEPS[1:]:
            yield step
            ctx.db.in_transaction = step in ("begin", "read offset", "apply", "store offset")
            if not apply_step(step, record, self.projection, self.part, self.use_offset, self.use_ids):
                ctx.db.in_transaction = False
                return


class _Process:
    """The offset consumer's session: a crash ends its DuckDB transaction (the projection opens a new session)."""

    def __init__(self, projection: Projection) -> None:
        self.projection, self.in_transaction = projection, False

    def rollback(self) -> None:
        self.projection.restart()
        self.in_transaction = False


def consume(log: OrderedLog, projection: Projection, consumer: str = "payments", *, subject: str | None = None,
            part: str | None = None, use_offset: bool = True, use_ids: bool = False, crash: FaultPlan | None = None,
            max_in_flight: int = 1) -> int:
    """Run the offset consumer until its subscription has every record acked; returns how many times it crashed.

    ``consumer`` is the durable consumer's name on the log; ``part`` names the offset
    row (by default the ``subject``, or ``all`` for the whole stream): two consumers
    given the same ``part`` share one stored position.
    With ``use_offset=False`` it applies every delivery: the consumer with no memory.
    With ``use_ids`` it also records each message's ID in the same transaction and
    skips the effect of a message whose ID it has applied before, whatever its sequence.
    ``max_in_flight`` is the durable consumer's ``max_ack_pending``. ``crash`` is the
    run's fault plan (:func:`CrashAt` builds one), which the run engine consults as for
    any consumer: a record is a copy on the queue, its stream sequence the copy's
    position and its ``message_id`` (else ``seq N``) the message's.
    """
    handler = OffsetConsumer(projection, part or subject or "all", use_offset, use_ids)
    sources: list[LogSource] = []

    def source(clock: VirtualClock, trace: Trace) -> LogSource:
        sources.append(LogSource(log, consumer, subject, max_in_flight, clock, trace))
        return sources[0]

    engine = Engine(handler, lambda: _Process(projection), faults=crash, source=source)
    engine.add_consumers(1)
    try:
        engine.run()
    finally:
        for opened in sources:
            opened.close()
    return engine.trace.count(Event.CRASHED)


def apply_step(step: str, record: Record, projection: Projection, part: str, use_offset: bool,
               use_ids: bool = False) -> bool:
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
        message_id = record.data.get("message_id")
        if use_ids and not session.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING "
                                           "RETURNING 1", [message_id]).fetchall():
            return True  # a second record of a message applied before: no effect, but still move the offset past it
        session.execute("INSERT INTO totals VALUES (?, ?) ON CONFLICT (order_id) DO UPDATE SET paid = totals.paid + "
                        "excluded.paid", [record.data["order_id"], record.data["amount"]])
        session.execute("INSERT INTO applications VALUES (?, ?, ?)", [record.seq, record.subject, message_id])
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
                        max_in_flight: int = 1, events: tuple[tuple[str, dict[str, Any]], ...] = EVENTS,
                        steps: tuple[str | None, ...] = (None, *STEPS)) -> pd.DataFrame:
    """Crash the offset consumer before each of ``steps`` (None: no crash) of record ``crash_seq``, each on a fresh
    log, and count each record's effects.

    One row per crash point: the crashes, how many records were applied once, twice
    or never, the totals per order, and the consumer's ``max_ack_pending`` as the log holds it.
    """
    rows = []
    for step in steps:
        log = make_log()
        try:
            sequences = [log.append(subject, data) for subject, data in events]
            projection = Projection()
            crashes = consume(log, projection, crash=CrashAt(step, crash_seq) if step else None,
                              use_offset=use_offset, max_in_flight=max_in_flight)
            applied = projection.applied_per_record(sequences)
            rows.append(("no crash" if step is None else f"crash before {step}", crashes, int((applied == 1).sum()),
                         int((applied >= 2).sum()), int((applied == 0).sum()), projection.totals(),
                         log.max_ack_pending("payments")))
        finally:
            log.close()
    return pd.DataFrame(rows, columns=["fault", "crashes", "applied once", "applied twice", "never applied",
                                       "paid per order", "max_ack_pending (server)"])


def shared_offset_run(make_log: Callable[[], OrderedLog], *, shared: bool) -> pd.DataFrame:
    """Records alternating between subjects ``a`` and ``b``, each read by its own consumer, b's first.

    With ``shared`` both consumers store one position for the whole stream: b's
    reader moves it past a's records, which a's reader then skips as applied.
    Without it each subject keeps its own offset. One row per record.
    """
    log = make_log()
    try:
        events = [("a", {"order_id": 1042, "amount": 40}), ("b", {"order_id": 2077, "amount": 15}),
                  ("a", {"order_id": 1042, "amount": 5}), ("b", {"order_id": 2077, "amount": 25})]
        sequences = [log.append(subject, data) for subject, data in events]
        projection = Projection()
        for subject in ("b", "a"):
            consume(log, projection, f"reader-{subject}", subject=subject, part="all" if shared else subject)
        applied = projection.applied_per_record(sequences)
    finally:
        log.close()
    return pd.DataFrame({"subject": [s for s, _ in events], "order": [d["order_id"] for _, d in events],
                         "amount ($)": [d["amount"] for _, d in events], "times applied": list(applied)},
                        index=pd.Index(sequences, name="stream sequence"))


def rebuild_projection(make_log: Callable[[], OrderedLog], events: tuple[tuple[str, dict[str, Any]], ...],
                       crash: FaultPlan) -> pd.DataFrame:
    """Build the totals live, then rebuild them from the log with a fresh consumer that crashes once on the way.

    The rebuild starts from an empty output and the stream's first record; its offset
    makes the redelivery after the crash harmless. One row per order, live and rebuilt.
    """
    log = make_log()
    try:
        for subject, data in events:
            log.append(subject, data)
        live = Projection()
        consume(log, live, "live")
        rebuilt = Projection()
        crashes = consume(log, rebuilt, "rebuild", crash=crash)
    finally:
        log.close()
    frame = pd.DataFrame({"live projection ($)": live.totals(), "rebuilt from the log ($)": rebuilt.totals()})
    frame.index.name = "order"
    frame.attrs["crashes during rebuild"] = crashes
    return frame


def fold_outcomes(matrix: pd.DataFrame) -> pd.DataFrame:
    """The crash matrix with the crash points that end alike folded into one row, named in its first column."""
    outcome = ["applied once", "applied twice", "never applied", "paid per order", "max_ack_pending (server)"]
    keyed = matrix.assign(**{"paid per order": matrix["paid per order"].map(str)})
    folded = keyed.groupby(outcome, sort=False)["fault"].agg(", ".join).rename("faults that end this way")
    return folded.reset_index().set_index("faults that end this way")
