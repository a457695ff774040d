"""A batched inbox: take N deliveries, record their IDs with one statement, charge only the new ones.

The inbox's price is one more insert and one more unique-index update per
message, each in a transaction of its own. Batching spreads the transaction over
N messages and turns N inserts into one statement:

1. take up to N deliveries from the broker;
2. ``begin``;
3. ``record ids``: insert all N IDs in one ``INSERT ... ON CONFLICT DO NOTHING
   RETURNING message_id``; the IDs it returns are the new ones;
4. ``charge new``: insert the payments of the new messages only, in one statement;
5. ``commit``;
6. ``ack all`` N deliveries.

A crash anywhere before the commit rolls the whole batch back, and the broker
redelivers every message in it when the leases run out; a crash after the commit
leaves IDs that make the redelivered batch a run of skips. Either way each message
is charged once. A message that cannot be read is given back on its own, so one
poison message does not sink its batch.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from idemlib.broker import Broker, Delivery
from idemlib.clock import VirtualClock
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.messages import BadMessage, Charge, Message, parse_charge
from idemlib.sim import RunResult
from idemlib.stores import PaymentsSession, SqlPayments, WriteConflict
from idemlib.trace import Trace

# One statement per write, in each engine's way of passing a whole list as one parameter:
# DuckDB and PostgreSQL take arrays and unnest them, SQLite reads a JSON array with json_each.
RECORD_IDS = {
    # DuckDB: an anti-join instead of ON CONFLICT; which is faster depends on the inbox's size and
    # the machine (costs.record_ids_duckdb times both). The primary key still settles a race: a
    # rival's committed ID fails this insert, and the batch is given back and retried.
    "DuckDB": "INSERT INTO processed_messages (message_id) SELECT id FROM (SELECT unnest(?::VARCHAR[]) AS id) "
              "WHERE id NOT IN (SELECT message_id FROM processed_messages) RETURNING message_id",
    "PostgreSQL": "INSERT INTO processed_messages (message_id) SELECT unnest(%s::text[]) "
                  "ON CONFLICT DO NOTHING RETURNING message_id",
    # SQLite needs the WHERE to tell its upsert's ON from a join's.
    "SQLite": "INSERT INTO processed_messages (message_id) SELECT value FROM json_each(?) WHERE true "
              "ON CONFLICT DO NOTHING RETURNING message_id",
}
_INSERT_PAYMENTS = {
    "DuckDB": "INSERT INTO payments SELECT unnest(?::INTEGER[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[])",
    "PostgreSQL": "INSERT INTO payments SELECT * FROM unnest(%s::int[], %s::int[], %s::text[])",
    "SQLite": "INSERT INTO payments SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)",
}
STEPS = ("begin", "record ids", "charge new", "commit", "ack all")


class BatchSession(PaymentsSession):
    """A consumer's connection with the two bulk statements of the batched inbox."""

    def __init__(self, database: SqlPayments) -> None:
        if database.engine not in RECORD_IDS:
            raise ValueError(f"the batched inbox speaks DuckDB, SQLite and PostgreSQL, not {database.engine!r}")
        super().__init__(database.connect(), database)
        self._engine = database.engine

    def record_messages(self, message_ids: Sequence[str]) -> set[str]:
        """Insert every ID with one statement; returns the IDs that were new (the others were handled before)."""
        ids = list(message_ids)
        parameter: Any = json.dumps(ids) if self._engine == "SQLite" else ids
        return {row[0] for row in self._run(RECORD_IDS[self._engine], (parameter,), rows=True)}

    def charge_many(self, charges: Sequence[tuple[int, int, str]]) -> None:
        """Insert the (order_id, amount, message_id) payments with one statement."""
        if not charges:
            return
        if self._engine == "SQLite":
            self._run(_INSERT_PAYMENTS["SQLite"], (json.dumps([list(charge) for charge in charges]),))
        else:
            orders, amounts, ids = (list(column) for column in zip(*charges))
            self._run(_INSERT_PAYMENTS[self._engine], (orders, amounts, ids))


@dataclass
class BatchConsumer:
    """One consumer process running the batched inbox, one step at a time.

    ``take`` leases a batch; each ``advance`` does the pending step and pauses
    before the next, so a crash (from the fault plan) or a rival can come in between.
    """

    name: str
    database: SqlPayments
    broker: Broker
    trace: Trace
    faults: FaultPlan = field(default_factory=FaultPlan)
    session: BatchSession = field(init=False)
    deliveries: list[Delivery] = field(default_factory=list)
    step: str | None = None
    _job: Iterator[str] | None = None

    def __post_init__(self) -> None:
        self.session = BatchSession(self.database)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def take(self, batch_size: int) -> bool:
        """Lease up to ``batch_size`` deliveries and start on them; False when none is available."""
        taken: list[Delivery] = []
        while len(taken) < batch_size and (delivery := self.broker.receive(self.name)) is not None:
            taken.append(delivery)
        charges = {}
        for delivery in taken:
            try:
                charges[delivery.message_id] = parse_charge(delivery.message)
            except BadMessage as error:
                self._record("rejected", delivery, str(error))
                self.broker.release(delivery, str(error))
        self.deliveries = [d for d in taken if d.message_id in charges]
        if not self.deliveries:
            return bool(taken)
        self._job = self._run(charges)
        self._pause_before(next(self._job))
        return True

    def advance(self) -> None:
        """Do the pending step, then stop before the next one (or finish, crash, or give the batch back)."""
        assert self._job is not None, "take a batch first"
        try:
            upcoming = next(self._job, None)
        except WriteConflict as error:
            self.session.rollback()
            for delivery in self.deliveries:
                self._record("conflict", delivery, str(error))
                self.broker.release(delivery, str(error))
            return self._end()
        if upcoming is None:
            return self._end()
        self._pause_before(upcoming)

    def _pause_before(self, upcoming: str) -> None:
        assert self._job is not None
        first = self.deliveries[0]
        if self.faults.crashes_before(upcoming, first.message_id, first.count):
            was_open = self.session.in_transaction
            self.session.rollback()
            self._record("crashed", first, f"before {upcoming} (batch of {len(self.deliveries)})")
            if was_open:
                self._record("rolled back", first)
            self._job.close()
            self.session = BatchSession(self.database)  # the restarted process connects again
            return self._end()
        self.step = upcoming

    def _run(self, charges: dict[str, Charge]) -> Iterator[str]:
        yield "begin"
        self.session.begin()
        yield "record ids"
        new = self.session.record_messages(list(charges))
        yield "charge new"
        self.session.charge_many([(c.order_id, c.amount, mid) for mid, c in charges.items() if mid in new])
        for delivery in self.deliveries:
            if delivery.message_id not in new:
                self._record("duplicate skipped", delivery)
        yield "commit"
        self.session.commit()
        yield "ack all"
        # Drawing a lost ack costs a random generator per delivery; a plan that loses none skips the draws.
        may_lose = bool(self.faults.lost_acks) or self.faults.ack_loss_rate > 0
        for delivery in self.deliveries:
            if may_lose and self.faults.loses_ack(delivery.message_id, delivery.count):
                self._record("ack lost", delivery)
            else:
                self.broker.ack(delivery)

    def _record(self, event: str, delivery: Delivery, detail: str = "") -> None:
        self.trace.record(self.name, event, delivery.message_id, delivery.count, detail)

    def _end(self) -> None:
        self._job, self.step, self.deliveries = None, None, []


def setup_queue(database: SqlPayments, messages: Sequence[Message], lease_seconds: float,
           max_deliveries: int) -> tuple[VirtualClock, Trace, Broker]:
    """A fresh clock, trace and broker with ``messages`` published on it, for batched consumers to work."""
    clock = VirtualClock()
    trace = Trace(clock)
    broker = Broker(clock, trace, visibility_timeout=lease_seconds, max_deliveries=max_deliveries)
    for message in messages:
        broker.publish(message)
    return clock, trace, broker


def _result(messages: Sequence[Message], database: SqlPayments, clock: VirtualClock, trace: Trace,
            broker: Broker) -> RunResult:
    return RunResult(list(messages), trace.to_frame(), database.payments(), list(broker.dead_letters), clock.now())


def drain(consumer: BatchConsumer, clock: VirtualClock, batch_size: int) -> None:
    """Let ``consumer`` work the queue until it is empty, waiting out leases when nothing is available."""
    broker = consumer.broker
    while not broker.is_empty:
        if not consumer.take(batch_size):
            if broker.is_empty:
                break  # the last message was dead-lettered as the consumer looked
            expiry = broker.next_lease_expiry()
            if expiry is None:
                raise RuntimeError("messages are stored but none is leased or ready: the broker lost track of them")
            clock.advance_to(expiry)
            continue
        while consumer.busy:
            clock.advance(1.0)
            consumer.advance()


def consume(database: SqlPayments, messages: Sequence[Message], *, batch_size: int = 100,
            faults: FaultPlan | None = None, lease_seconds: float = 30.0, max_deliveries: int = 5) -> RunResult:
    """Publish ``messages`` and let one batched-inbox consumer work the queue until it is empty."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    clock, trace, broker = setup_queue(database, messages, lease_seconds, max_deliveries)
    drain(BatchConsumer("consumer A", database, broker, trace, faults or FaultPlan()), clock, batch_size)
    return _result(messages, database, clock, trace, broker)


def fault_points() -> list[tuple[str, FaultPlan]]:
    """Every single fault that can strike a batch's first delivery: a crash before each step, or lost acks."""
    points = [("no fault", FaultPlan())]
    # A crash is drawn for the batch's first message, and it takes the whole batch down with it.
    points += [(f"crash before {step}", FaultPlan(crashes=[Crash(step)])) for step in STEPS]
    points.append(("every ack lost once", FaultPlan(lost_acks=[LostAck()])))
    return points


def crash_matrix(make_database: Callable[[], SqlPayments], messages: Sequence[Message],
                 batch_size: int) -> pd.DataFrame:
    """The batched inbox crashed before each step of every batch's first delivery (or its acks lost).

    One row per fault: how many messages ended charged once, lost or twice, and the
    dollars charged against what is owed.
    """
    rows = []
    for fault, plan in fault_points():
        result = consume(make_database(), messages, batch_size=batch_size, faults=plan)
        outcomes = result.outcomes().value_counts()
        rows.append((fault, *(int(outcomes.get(name, 0)) for name in ("charged once", "charge lost", "charged twice")),
                     result.total_charged, result.expected_total))
    return pd.DataFrame(rows, columns=["fault", "charged once", "charge lost", "charged twice", "total charged ($)",
                                       "owed ($)"])


def interleavings(database: SqlPayments, messages: Sequence[Message], batch_size: int) -> pd.DataFrame:
    """Every order in which two batched consumers holding overlapping batches can take their steps.

    Consumer A takes a batch; its leases run out; consumer B takes a batch that
    holds some of A's messages again. Each schedule says who moves next; the loser
    of a write conflict gives its batch back, and whatever is left unacked is then
    redelivered until the queue is empty. ``database`` is emptied before each
    schedule. One row per distinct interleaving, with how each message ended.
    """
    steps = len(STEPS)
    seen: dict[tuple[str, ...], tuple[int, int, int, int]] = {}
    for a_turns in itertools.combinations(range(2 * steps), steps):
        database.empty()
        clock, trace, broker = setup_queue(database, messages, 30.0, 10)
        a = BatchConsumer("consumer A", database, broker, trace)
        a.take(batch_size)
        clock.advance(broker.visibility_timeout)  # A's leases run out before B takes its batch
        b = BatchConsumer("consumer B", database, broker, trace)
        b.take(batch_size)
        taken = []
        for turn in range(2 * steps):
            mover = a if turn in a_turns else b
            if not mover.busy:
                mover = b if mover is a else a
            if not mover.busy:
                break
            taken.append(f"{mover.name[-1]}:{mover.step}")
            mover.advance()
        drain(a, clock, batch_size)
        result = _result(messages, database, clock, trace, broker)
        outcomes = result.outcomes().value_counts()
        conflicts = int((result.trace["event"] == "conflict").sum())
        seen.setdefault(tuple(taken), (*(int(outcomes.get(name, 0)) for name in
                                         ("charged once", "charge lost", "charged twice")), conflicts))
    rows = [(" → ".join(taken), *counts) for taken, counts in seen.items()]
    return pd.DataFrame(rows, columns=["interleaving", "charged once", "charge lost", "charged twice",
                                       "conflicting deliveries"])
