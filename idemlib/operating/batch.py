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

import json
from collections.abc import Callable, Sequence
from typing import Any

from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, Steps
from idemlib.messages import Charge, Message, parse_charge
from idemlib.provider import PaymentProvider
from idemlib.sim import Durations, Engine, Policy, RunResult, simulate
from idemlib.stores import PaymentsDatabase, PaymentsSession, SqlPayments
from idemlib.trace import Event

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


class BatchConsumer(Handler):
    """The batched inbox as a consumer on the simulator's engine: up to ``batch_size`` deliveries per job.

    The engine leases the batch, gives back any message the consumer cannot read,
    and pauses before each step, so a crash (from the fault plan, drawn for the
    batch's first delivery) or a rival can come in between.
    """

    name = "batched inbox"
    steps = STEPS

    def __init__(self, batch_size: int = 100) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size

    def run(self, ctx: Context) -> Steps:
        assert isinstance(ctx.db, BatchSession), "run the batched inbox on BatchSession sessions (see batch_engine)"
        return self._run(ctx, ctx.db, {d.message_id: parse_charge(d.message) for d in ctx.deliveries})

    def _run(self, ctx: Context, db: BatchSession, charges: dict[str, Charge]) -> Steps:
        yield "begin"
        db.begin()
        yield "record ids"
        new = db.record_messages(list(charges))
        yield "charge new"
        db.charge_many([(c.order_id, c.amount, mid) for mid, c in charges.items() if mid in new])
        for delivery in ctx.deliveries:
            if delivery.message_id not in new:
                ctx.record(delivery, "duplicate skipped", "")
        yield "commit"
        db.commit()
        yield "ack all"
        ctx.ack()  # each delivery of the batch; the engine says which acks the fault plan loses

    def crash_detail(self, step: str, ctx: Context) -> str:
        return f"before {step} (batch of {len(ctx.deliveries)})"

    def sessions(self, database: PaymentsDatabase) -> Callable[[], BatchSession]:
        """Sessions with the two bulk statements, on a SQL ``database`` (DuckDB, SQLite or PostgreSQL)."""
        if not isinstance(database, SqlPayments):
            raise ValueError(f"the batched inbox runs on a SQL database, not {type(database).__name__}")
        return lambda: BatchSession(database)


def batch_engine(database: SqlPayments, batch_size: int, *, faults: FaultPlan | None = None,
                 lease_seconds: float = 30.0, max_deliveries: int = 5, policy: Policy | None = None,
                 step_seconds: Durations | None = None) -> Engine:
    """The simulator's engine set up with the batched inbox on ``database``; add consumers and messages, then run."""
    consumer = BatchConsumer(batch_size)
    return Engine(consumer, consumer.sessions(database), faults=faults, policy=policy,
                  visibility_timeout=lease_seconds, max_deliveries=max_deliveries, step_seconds=step_seconds)


def consume(database: SqlPayments, messages: Sequence[Message], *, batch_size: int = 100,
            faults: FaultPlan | None = None, lease_seconds: float = 30.0, max_deliveries: int = 5) -> RunResult:
    """Publish ``messages`` and let one batched-inbox consumer work the queue until it is empty."""
    return simulate(BatchConsumer(batch_size), messages, faults=faults, visibility_timeout=lease_seconds,
                    max_deliveries=max_deliveries, database=database)


def outcomes_and_conflicts(engine: Engine, messages: Sequence[Message], database: PaymentsDatabase,
                           provider: PaymentProvider | None) -> dict[str, object]:
    """An interleaving's row for two batched consumers holding overlapping batches (the ``tally`` of
    :func:`idemlib.explore.interleavings`, with ``max_deliveries=10``): how each message ended, and how many
    deliveries met a write conflict, whose loser gives its batch back."""
    outcomes = engine.result(list(messages), database.payments()).outcomes().value_counts()
    counts = {name: int(outcomes.get(name, 0)) for name in ("charged once", "charge lost", "charged twice")}
    return {**counts, "conflicting deliveries": engine.trace.count(Event.CONFLICT)}
