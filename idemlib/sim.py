"""Runs producers, the broker and consumers on a virtual clock and records a trace.

Every step of a handler takes a few simulated seconds (``step_seconds``). The
scheduler always moves the consumer whose next action is due soonest, so with one
consumer a run is a plain loop, and with several their steps interleave the way
real processes' would, inside the real database engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from idemlib.broker import Broker, DeadLetter, Delivery
from idemlib.clock import VirtualClock
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, ProviderError, ResponseLost, Steps
from idemlib.messages import BadMessage, Charge, Message, expected_total
from idemlib.provider import PaymentProvider, Response
from idemlib.stores import DuckDBPayments, PaymentsDatabase, PaymentsSession, WriteConflict
from idemlib.trace import Trace

DEFAULT_STEP_SECONDS = 1.0
RESTART_SECONDS = 5.0
STEP_EVENTS = {"commit": "committed", "charge": "charged"}
"""Steps whose completion the trace names by its effect; every other step is a plain ``step``."""

OUTCOMES = ("charge lost", "charged once", "charged twice")
FAILURE_EVENTS = {BadMessage: "rejected", WriteConflict: "conflict", ProviderError: "provider failed",
                  ResponseLost: "response lost", Exception: "failed"}
"""The trace event for a step that raised, by the most specific kind of error; any other error is ``failed``."""


def outcome_of(charges: int) -> str:
    """Name the effect of one message: lost (0 charges), once (1) or twice (2 or more)."""
    return OUTCOMES[min(charges, 2)]


@dataclass
class _Consumer:
    name: str
    session: PaymentsSession
    ready_at: float = 0.0
    turn: int = 0
    delivery: Delivery | None = None
    job: Steps | None = None
    step: str | None = None


@dataclass
class RunResult:
    """What a run did: its trace, the committed payments and the dead-letter queue."""

    messages: list[Message]
    trace: pd.DataFrame
    payments: pd.DataFrame
    dead_letters: list[DeadLetter]
    duration: float
    provider: PaymentProvider | None = None

    @property
    def total_charged(self) -> int:
        """Dollars charged in all, counting only committed payments."""
        return int(self.payments["amount"].sum())

    @property
    def expected_total(self) -> int:
        """Dollars that should have been charged: each distinct valid message once (see :func:`expected_total`)."""
        return expected_total(self.messages)

    def charges_per_message(self) -> pd.Series:
        """How many committed charges each published message ID caused (0 where none)."""
        ids = list(dict.fromkeys(m.label for m in self.messages))
        return self.payments["message_id"].value_counts().reindex(ids, fill_value=0).rename("charges")

    def outcomes(self) -> pd.Series:
        """For each message ID: ``charge lost``, ``charged once`` or ``charged twice``."""
        return self.charges_per_message().map(outcome_of).rename("outcome")

    def events(self, event: str) -> pd.DataFrame:
        """The trace rows of one kind of event."""
        return self.trace[self.trace["event"] == event]


def simulate(
    handler: Handler,
    messages: Iterable[Message],
    *,
    faults: FaultPlan | None = None,
    consumers: int = 1,
    visibility_timeout: float = 30.0,
    max_deliveries: int = 5,
    step_seconds: Mapping[str, float] | None = None,
    database: PaymentsDatabase | None = None,
    watch_total: bool = False,
    provider: PaymentProvider | None = None,
) -> RunResult:
    """Publish ``messages``, let ``consumers`` copies of ``handler`` work the queue until it is empty.

    ``faults`` says which steps crash and which acks are lost. Crashed consumers
    restart after a few seconds; the broker redelivers when leases run out, and
    dead-letters a message after ``max_deliveries``. The database defaults to a
    fresh in-memory DuckDB. ``watch_total`` reads the committed total from the
    database after every event, for step-throughs (it costs a query per event).
    A ``provider`` is put on the run's clock, so its keys age in simulated time.
    """
    messages = list(messages)
    faults = faults or FaultPlan()
    durations = dict(step_seconds or {})
    if consumers < 1:
        raise ValueError(f"consumers must be at least 1, got {consumers}: somebody has to work the queue")
    if provider is None and "call provider" in handler.steps:
        # A run set up without what its handler needs fails as a whole, before any
        # message is dead-lettered for a fault that is not the message's.
        raise RuntimeError(f"the {handler.name!r} handler calls a payment provider, and this run has none: "
                           "pass provider=PaymentProvider() to simulate()")
    for step, seconds in durations.items():
        if not 0 <= seconds < float("inf"):
            raise ValueError(f"step_seconds[{step!r}] must be a finite number of seconds, 0 or more, got {seconds}")
    database = database or DuckDBPayments()
    clock = VirtualClock()
    if provider is not None:
        provider.clock = clock
    trace = Trace(clock, database.total_charged if watch_total else None)
    broker = Broker(clock, trace, visibility_timeout=visibility_timeout, max_deliveries=max_deliveries)
    for message in messages:
        broker.publish(message)

    turns = itertools.count()
    workers = [_Consumer(f"consumer {chr(ord('A') + i)}", database.session(), turn=next(turns)) for i in range(consumers)]

    def wake(worker: _Consumer, at: float) -> None:
        worker.ready_at = at
        worker.turn = next(turns)  # among equals, whoever waited longest goes first

    while not broker.is_empty or any(w.job is not None for w in workers):
        worker = min(workers, key=lambda w: (w.ready_at, w.turn))
        clock.advance_to(worker.ready_at)
        if worker.job is None:
            if broker.is_empty:
                wake(worker, float("inf"))  # done: the last rival finishes its job
                continue
            if not _start(worker, handler, broker, faults, trace, provider):
                # Nothing to take now: sleep until a lease runs out or a rival moves.
                others = [w.ready_at for w in workers if w is not worker and w.job is not None]
                expiry = broker.next_lease_expiry()
                wake(worker, min([t for t in [expiry, *others] if t is not None], default=clock.now()))
                continue
        delay = _advance(worker, faults, broker, trace, database)
        wake(worker, clock.now() + (durations.get(worker.step, DEFAULT_STEP_SECONDS) if worker.step else delay))

    for worker in workers:
        worker.session.rollback()
    return RunResult(messages, trace.to_frame(), database.payments(), list(broker.dead_letters), clock.now(), provider)


def _start(
    worker: _Consumer, handler: Handler, broker: Broker, faults: FaultPlan, trace: Trace,
    provider: PaymentProvider | None = None,
) -> bool:
    delivery = broker.receive(worker.name)
    if delivery is None:
        return False

    def ack() -> None:
        if faults.loses_ack(delivery.message_id, delivery.count, delivery.position):
            trace.record(worker.name, "ack lost", delivery.message_id, delivery.count)
        else:
            broker.ack(delivery)

    def note(event: str) -> None:
        trace.record(worker.name, event, delivery.message_id, delivery.count)

    def call_provider(key: str | None, charge: Charge) -> Response:
        assert provider is not None
        response = provider.charge(key, order_id=charge.order_id, amount=charge.amount)
        trace.record(worker.name, "provider answered", delivery.message_id, delivery.count,
                     f"{response.status}{' (replayed)' if response.replayed else ''}")
        if faults.loses_response(delivery.message_id, delivery.count, delivery.position):
            raise ResponseLost(f"{delivery.message_id}: no answer from the provider (the call timed out)")
        return response

    context = Context(delivery, worker.session, ack, note, now=trace.clock.now, extend_lease=lambda: broker.extend(delivery))
    if provider is not None:
        context.call_provider = call_provider
    worker.delivery = delivery
    worker.job = handler.run(context)
    worker.step = None
    return True


def _advance(worker: _Consumer, faults: FaultPlan, broker: Broker, trace: Trace, database: PaymentsDatabase) -> float:
    """Finish the worker's pending step and pause before its next one, or end the job.

    Returns how long the worker is away when the job ended: a restart after a
    crash, nothing otherwise. While a step is pending, its own duration applies.
    """
    delivery = worker.delivery
    assert delivery is not None and worker.job is not None

    def record(event: str, detail: str = "") -> None:
        trace.record(worker.name, event, delivery.message_id, delivery.count, detail)

    try:
        next_step = next(worker.job, None)
    except Exception as error:  # noqa: BLE001 - whatever a step raises fails this delivery, not the run
        # A live consumer that cannot finish gives the message back; the broker
        # retries it and dead-letters it after max_deliveries, so it is never lost
        # and the messages behind it keep moving.
        was_open = worker.session.in_transaction
        event = next(FAILURE_EVENTS[kind] for kind in type(error).__mro__ if kind in FAILURE_EVENTS)
        reason = str(error) if event != "failed" else f"{type(error).__name__}: {error}"
        record(event, reason)
        _roll_back(worker, database)
        if was_open:
            record("rolled back")
        broker.release(delivery, reason)
        _end(worker)
        return 0.0
    if worker.step is not None and worker.step != "ack":  # an ack records its own fate
        record(STEP_EVENTS.get(worker.step, "step"), worker.step)
    if next_step is None:
        _end(worker)
        return 0.0
    if faults.crashes_before(next_step, delivery.message_id, delivery.count, delivery.position):
        # A process death: the connection drops, the engine rolls back the open
        # transaction, and no ack is sent. The lease will run out on its own.
        was_open = worker.session.in_transaction
        worker.session.rollback()
        record("crashed", f"before {next_step}")
        if was_open:
            record("rolled back")
        worker.job.close()
        _end(worker)
        worker.session = database.session()
        return RESTART_SECONDS
    worker.step = next_step
    return 0.0


def _roll_back(worker: _Consumer, database: PaymentsDatabase) -> None:
    """Roll back the worker's open transaction after a failed step.

    A session whose rollback fails too (its connection broke) is replaced by a new
    one, as a consumer reconnects; the engine drops the broken transaction.
    """
    try:
        worker.session.rollback()
    except Exception:  # noqa: BLE001 - the old connection is beyond use either way
        worker.session = database.session()


def _end(worker: _Consumer) -> None:
    worker.job = None
    worker.delivery = None
    worker.step = None
