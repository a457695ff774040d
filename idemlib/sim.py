"""The run engine: producers, the broker and consumers on a virtual clock, and the trace of what they did.

Every step of a handler takes a few simulated seconds (``step_seconds``). The
scheduler always moves the consumer whose next action is due soonest, so with one
consumer a run is a plain loop, and with several their steps interleave the way
real processes' would, inside the real database engine.

:class:`Engine` is that loop, and the only one: :func:`simulate`, a day in
production, the explorers' interleavings (a scripted policy, in :mod:`idemlib.explore`),
a batched consumer, a real process killed between steps, the Powertools library
in child processes and the offset consumer reading a log are each a few lines of set-up on it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from idemlib.broker import Broker, DeadLetter, Delivery, Source
from idemlib.clock import VirtualClock
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, ProviderError, ResponseLost, Steps
from idemlib.messages import BadMessage, Charge, Message, expected_total
from idemlib.provider import PaymentProvider, Response
from idemlib.stores import DuckDBPayments, PaymentsDatabase, WriteConflict
from idemlib.trace import Event, Trace

DEFAULT_STEP_SECONDS = 1.0
RESTART_SECONDS = Handler.restart_seconds
STEP_EVENTS = {"commit": Event.COMMITTED, "charge": Event.CHARGED}
"""Steps whose completion the trace names by its effect; every other step is a plain ``step``."""

OUTCOMES = ("charge lost", "charged once", "charged twice")
FAILURE_EVENTS = {BadMessage: Event.REJECTED, WriteConflict: Event.CONFLICT, ProviderError: Event.PROVIDER_FAILED,
                  ResponseLost: Event.RESPONSE_LOST, Exception: Event.FAILED}
"""The trace event for a step that raised, by the most specific kind of error; any other error is ``failed``."""


def outcome_of(charges: int) -> str:
    """Name the effect of one message: lost (0 charges), once (1) or twice (2 or more)."""
    return OUTCOMES[min(charges, 2)]


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


Durations = Mapping[str, float] | Callable[[str, float], float]
"""How long a step takes: seconds per step name (any other step takes :data:`DEFAULT_STEP_SECONDS`), or a
function of the step and the moment it starts (a consumer that slows down in the afternoon)."""
ACK_STEPS = {"ack", "ack all"}
"""Steps that send acks: each ack records its own fate (acked, or lost), so the step itself is not recorded."""


class StepFailed(Exception):
    """A step failed somewhere the engine cannot see (a child process), and its message says how, in full."""


class RunAborted(RuntimeError):
    """The run cannot go on (a server a consumer needs stopped answering): raised out of the run, not retried."""


class NoSession:
    """The session of a consumer that keeps its own connection elsewhere (a child process): nothing to roll back."""

    in_transaction = False

    def rollback(self) -> None:
        """Nothing is open on this side."""


@dataclass
class Worker:
    """One consumer process on the engine: its session, when it moves next, and the job it is in the middle of."""

    name: str
    session: Any
    ready_at: float = 0.0
    turn: int = 0
    context: Context | None = None
    job: Steps | None = None
    step: str | None = None
    """The step the job is paused before, which the worker's next move does."""

    @property
    def busy(self) -> bool:
        """True while the worker holds a delivery it has not finished with."""
        return self.job is not None


class Policy(Protocol):
    """Who moves next: the engine asks before every move."""

    def choose(self, workers: Sequence[Worker]) -> Worker: ...


class EarliestDue:
    """The default schedule: the consumer whose next move is due soonest; among equals, whoever waited longest."""

    def choose(self, workers: Sequence[Worker]) -> Worker:
        return min(workers, key=lambda w: (w.ready_at, w.turn))


class Engine:
    """The one run loop: producers publish, the broker leases, consumers step, the fault plan strikes, all on one clock.

    Everything that varies between runs plugs in: the ``consumer`` (anything with a
    handler's ``run(ctx)``: a course handler, a batch, a real process), where its
    ``sessions`` come from, arrivals over time (:meth:`arrive`) or all at once
    (:meth:`publish`), step durations (a mapping or a function of time), the
    scheduling ``policy``, and the ``faults``, consulted here and nowhere else, always
    with the copy's position on the queue, so every fault kind reaches every consumer.
    The consumers take their deliveries from the engine's broker, to which messages
    are published, unless a ``source`` is plugged in: a function of the run's clock and
    trace that returns another :class:`~idemlib.broker.Source` (a log read through a
    subscription, whose records are already written).
    """

    def __init__(
        self, consumer: Handler, sessions: Callable[[], Any], *, faults: FaultPlan | None = None,
        step_seconds: Durations | None = None, provider: PaymentProvider | None = None,
        visibility_timeout: float = 30.0, max_deliveries: int = 5, total_charged: Callable[[], int] | None = None,
        policy: Policy | None = None, source: Callable[[VirtualClock, Trace], Source] | None = None,
    ) -> None:
        self.consumer, self.sessions = consumer, sessions
        self.faults = faults or FaultPlan()
        self.durations: Durations = step_seconds if step_seconds is not None else {}
        self.provider, self.policy = provider, policy or EarliestDue()
        # A run with a provider goes on from the provider's time, so a second run (a replay from the dead-letter
        # queue, a day later) finds the keys, and the rows it wrote, as old as they are.
        self.clock = VirtualClock(provider.clock.now() if provider is not None else 0.0)
        self._started = self.clock.now()
        if provider is not None:
            provider.clock = self.clock
        self.trace = Trace(self.clock, total_charged)
        self.broker = Broker(self.clock, self.trace, visibility_timeout=visibility_timeout,
                             max_deliveries=max_deliveries)
        self.source: Source = source(self.clock, self.trace) if source is not None else self.broker
        self.workers: list[Worker] = []
        self._arrivals: deque[tuple[float, Message]] = deque()
        self._turns = itertools.count()

    def add_consumers(self, count: int, *, ready_at: Sequence[float] = ()) -> None:
        """Start ``count`` consumer processes, named consumer A, B, …; ``ready_at`` delays the first moves."""
        for i in range(count):
            worker = Worker(f"consumer {chr(ord('A') + len(self.workers))}", self.sessions(), turn=next(self._turns))
            worker.ready_at = ready_at[i] if i < len(ready_at) else 0.0
            self.workers.append(worker)

    def publish(self, messages: Iterable[Message]) -> None:
        """Put ``messages`` on the queue now."""
        for message in messages:
            self.broker.publish(message)

    def arrive(self, arrivals: Iterable[tuple[float, Message]]) -> None:
        """Publish each message when the clock reaches its moment: (seconds, message) pairs in time order."""
        self._arrivals.extend(arrivals)

    def step_seconds(self, step: str) -> float:
        """How long ``step`` takes, started now."""
        if callable(self.durations):
            return self.durations(step, self.clock.now())
        return self.durations.get(step, DEFAULT_STEP_SECONDS)

    def run(self) -> None:
        """Move consumers until every message is acked or dead-lettered and no consumer holds one."""
        clock, broker, source, arrivals = self.clock, self.broker, self.source, self._arrivals
        while arrivals or not source.is_empty or any(w.busy for w in self.workers):
            worker = self.policy.choose(self.workers)
            while arrivals and arrivals[0][0] <= worker.ready_at:
                moment, message = arrivals.popleft()
                clock.advance_to(moment)
                broker.publish(message)
            clock.advance_to(worker.ready_at)
            if not worker.busy:
                if source.is_empty and not arrivals:
                    self._wake(worker, float("inf"))  # done: the last rival finishes its job
                    continue
                if not self.start(worker):
                    # Nothing to take now: sleep until a lease runs out, a message arrives or a rival moves.
                    # A rival due now has waited longer, so it moves before this worker looks again.
                    wakes = [w.ready_at for w in self.workers if w is not worker and w.busy]
                    wakes += [t for t in (source.next_lease_expiry(), arrivals[0][0] if arrivals else None)
                              if t is not None]
                    self._wake(worker, min(wakes, default=float("inf")))
                    continue
                if not worker.busy:  # a batch none of which it could read: each message was given back
                    self._wake(worker, clock.now())
                    continue
            away = self.advance(worker)
            self._wake(worker, clock.now() + (self.step_seconds(worker.step) if worker.step else away))
        for worker in self.workers:
            worker.session.rollback()

    def result(self, messages: list[Message], payments: pd.DataFrame) -> RunResult:
        """The run as a :class:`RunResult`, with the ``payments`` read back from wherever the consumers wrote them."""
        return RunResult(messages, self.trace.to_frame(), payments, list(self.broker.dead_letters),
                         self.clock.now() - self._started, self.provider)

    def _wake(self, worker: Worker, at: float) -> None:
        worker.ready_at = at
        worker.turn = next(self._turns)  # among equals, whoever waited longest goes first

    def start(self, worker: Worker) -> bool:
        """Give ``worker`` a delivery (a batch, for a batch consumer) and begin its job; False if none is available."""
        size = self.consumer.batch_size
        taken: list[Delivery] = []
        while len(taken) < (size or 1) and (delivery := self.source.receive(worker.name)) is not None:
            taken.append(delivery)
        if not taken:
            return False
        if size is not None:
            taken = [delivery for delivery in taken if self._readable(worker, delivery)]
            if not taken:
                return True
        worker.context = self._context(worker, tuple(taken))
        worker.job = self.consumer.run(worker.context)
        worker.step = None
        return True

    def _readable(self, worker: Worker, delivery: Delivery) -> bool:
        try:
            self.consumer.read(delivery.message)
        except BadMessage as error:
            self.trace.record(worker.name, Event.REJECTED, delivery.message_id, delivery.count, str(error))
            self.source.release(delivery, str(error))
            return False
        return True

    def _context(self, worker: Worker, deliveries: tuple[Delivery, ...]) -> Context:
        faults, trace, source, first = self.faults, self.trace, self.source, deliveries[0]

        def record(delivery: Delivery, event: str, detail: str = "") -> None:
            trace.record(worker.name, event, delivery.message_id, delivery.count, detail)

        def ack() -> None:
            for delivery in deliveries:
                if faults.loses_ack(delivery.message_id, delivery.count, delivery.position):
                    record(delivery, Event.ACK_LOST)
                else:
                    source.ack(delivery)

        def call_provider(key: str | None, charge: Charge) -> Response:
            assert self.provider is not None
            response = self.provider.charge(key, order_id=charge.order_id, amount=charge.amount)
            record(first, Event.PROVIDER_ANSWERED, f"{response.status}{' (replayed)' if response.replayed else ''}")
            if faults.loses_response(first.message_id, first.count, first.position):
                raise ResponseLost(f"{first.message_id}: no answer from the provider (the call timed out)")
            return response

        context = Context(first, worker.session, ack, lambda event: record(first, event), now=self.clock.now,
                          extend_lease=lambda: source.extend(first), deliveries=deliveries, record=record)
        if self.provider is not None:
            context.call_provider = call_provider
        return context

    def advance(self, worker: Worker) -> float:
        """Do the worker's pending step and pause before its next one, or end the job.

        Returns how long the worker is away when the job ended: a restart after a
        crash, nothing otherwise. While a step is pending, its own duration applies.
        """
        context, job = worker.context, worker.job
        assert context is not None and job is not None
        first = context.delivery
        try:
            next_step = next(job, None)
        except RunAborted:
            raise
        except Exception as error:  # noqa: BLE001 - whatever a step raises fails this delivery, not the run
            # A live consumer that cannot finish gives the message back; the broker
            # retries it and dead-letters it after max_deliveries, so it is never lost
            # and the messages behind it keep moving.
            was_open = worker.session.in_transaction
            event = next(FAILURE_EVENTS[kind] for kind in type(error).__mro__ if kind in FAILURE_EVENTS)
            plain = event != Event.FAILED or isinstance(error, StepFailed)
            reason = str(error) if plain else f"{type(error).__name__}: {error}"
            for delivery in context.deliveries:
                context.record(delivery, event, reason)
            self._roll_back(worker)
            if was_open:
                context.record(first, Event.ROLLED_BACK, "")
            for delivery in context.deliveries:
                self.source.release(delivery, reason)
            self._end(worker)
            return 0.0
        if worker.step is not None and worker.step not in ACK_STEPS:
            context.record(first, STEP_EVENTS.get(worker.step, Event.STEP), worker.step)
        if next_step is None:
            self._end(worker)
            return 0.0
        if self.faults.crashes_before(next_step, first.message_id, first.count, first.position):
            # A process death: the connection drops, the engine rolls back the open
            # transaction, and no ack is sent. The lease will run out on its own.
            was_open = worker.session.in_transaction
            worker.session.rollback()
            context.record(first, Event.CRASHED, self.consumer.crash_detail(next_step, context))
            if was_open:
                context.record(first, Event.ROLLED_BACK, "")
            job.close()
            self._end(worker)
            self.source.crashed(worker.name)
            worker.session = self.sessions()
            return self.consumer.restart_seconds
        worker.step = next_step
        return 0.0

    def _roll_back(self, worker: Worker) -> None:
        """Roll back the worker's open transaction after a failed step.

        A session whose rollback fails too (its connection broke) is replaced by a new
        one, as a consumer reconnects; the engine drops the broken transaction.
        """
        try:
            worker.session.rollback()
        except Exception:  # noqa: BLE001 - the old connection is beyond use either way
            worker.session = self.sessions()

    @staticmethod
    def _end(worker: Worker) -> None:
        worker.job, worker.context, worker.step = None, None, None


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
    if consumers < 1:
        raise ValueError(f"consumers must be at least 1, got {consumers}: somebody has to work the queue")
    if provider is None and "call provider" in handler.steps:
        # A run set up without what its handler needs fails as a whole, before any
        # message is dead-lettered for a fault that is not the message's.
        raise RuntimeError(f"the {handler.name!r} handler calls a payment provider, and this run has none: "
                           "pass provider=PaymentProvider() to simulate()")
    for step, seconds in (step_seconds or {}).items():
        if not 0 <= seconds < float("inf"):
            raise ValueError(f"step_seconds[{step!r}] must be a finite number of seconds, 0 or more, got {seconds}")
    database = database or DuckDBPayments()
    engine = Engine(handler, handler.sessions(database), faults=faults, step_seconds=step_seconds, provider=provider,
                    visibility_timeout=visibility_timeout, max_deliveries=max_deliveries,
                    total_charged=database.total_charged if watch_total else None)
    engine.add_consumers(consumers)
    engine.publish(messages)
    engine.run()
    return engine.result(messages, database.payments())
