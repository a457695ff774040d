"""Walks every crash point of a handler and reports what each one does to the money.

Also what the broker sees of a run (:func:`broker_view`) and what its retry settings
change (:func:`retry_settings`): lesson 01's two tempting fixes, measured. The broker
decides everything from what reaches it, so "retrying more carefully" trades
duplicates for lost messages and never removes duplicates altogether.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import (
    HANDLERS,
    BusinessRowHandler,
    CacheGuardHandler,
    Handler,
    IdFirstHandler,
    InboxHandler,
)
from idemlib.messages import Message
from idemlib.provider import PaymentProvider, behaviours
from idemlib.sim import DEFAULT_STEP_SECONDS, EarliestDue, Engine, RunResult, Worker, outcome_of, simulate
from idemlib.stores import DuckDBPayments, PaymentsDatabase
from idemlib.stores.cache import Cache
from idemlib.stores.keyvalue import KeyValuePayments
from idemlib.trace import Event

_cache_runs = itertools.count(1)

RUNNING_EXAMPLE = Message.charge("m-7f3", order_id=1042, amount=40)
"""The course's running example: message m-7f3 asks to charge order 1042 $40."""


def fault_points(handler: Handler) -> list[tuple[str, FaultPlan]]:
    """Every single fault that can strike one delivery of ``handler``: a crash before each step, or a lost ack.

    For a batch consumer, a crash is drawn for each batch's first message and takes the
    whole batch down with it, and the lost ack is every message's first.
    """
    points = [("no fault", FaultPlan())]
    points += [(f"crash before {step}", FaultPlan(crashes=[Crash(step)])) for step in handler.steps]
    points.append(("every ack lost once" if handler.batch_size else "ack lost", FaultPlan(lost_acks=[LostAck()])))
    return points


Setup = Callable[[], tuple[Handler, PaymentsDatabase] | tuple[Handler, PaymentsDatabase, PaymentProvider]]
"""A fresh run's parts: the consumer, its database and, for a consumer that calls one, its payment provider."""
Measure = Callable[[Handler, PaymentsDatabase, RunResult], Mapping[str, object]]
"""A crash matrix's columns for one run: what the run did, from the consumer, its database and the run's result."""


def charges(handler: Handler, database: PaymentsDatabase, result: RunResult) -> dict[str, object]:
    """One message's columns: the dollars charged, how many charges that is, and the outcome (lost, once, twice)."""
    amount = handler.read(result.messages[0]).amount  # a message the handler cannot read is refused, saying why
    total = result.total_charged
    return {"total charged": total, "charges": total // amount, "outcome": outcome_of(total // amount)}


def outcome_counts(handler: Handler, database: PaymentsDatabase, result: RunResult) -> dict[str, object]:
    """Many messages' columns: how many ended charged once, lost or twice, and the dollars charged against owed."""
    outcomes = result.outcomes().value_counts()
    counts = {name: int(outcomes.get(name, 0)) for name in ("charged once", "charge lost", "charged twice")}
    return {**counts, "total charged ($)": result.total_charged, "owed ($)": result.expected_total}


def crash_matrix(setups: Iterable[Handler] | Mapping[str, Setup] = HANDLERS,
                 messages: Message | Sequence[Message] = RUNNING_EXAMPLE, *, measure: Measure = charges,
                 label: str | None = "handler") -> pd.DataFrame:
    """Run ``messages`` through each setup once per fault point (:func:`fault_points`), redelivering until acked.

    ``setups`` are handlers (each run on a fresh DuckDB, named by the handler) or a
    mapping of a name to a :data:`Setup`, for parts that must be fresh every run (a
    store, a cache, a payment provider). One row per (setup, fault): the setup's name
    under ``label`` (None: no such column, for one setup), the fault, and ``measure``'s
    columns: by default one message's :func:`charges`; :func:`outcome_counts` for many.
    """
    if not isinstance(setups, Mapping):
        setups = {handler.name: functools.partial(_with_duckdb, handler) for handler in setups}
    messages = [messages] if isinstance(messages, Message) else list(messages)
    rows = []
    for name, setup in setups.items():
        first = setup()  # its handler lists the fault points, and it serves the first run
        for number, (fault, plan) in enumerate(fault_points(first[0])):
            handler, database, *provider = first if number == 0 else setup()
            result = simulate(handler, messages, faults=plan, database=database, provider=next(iter(provider), None))
            rows.append({**({label: name} if label is not None else {}), "fault": fault,
                         **measure(handler, database, result)})
    return pd.DataFrame(rows)


def _with_duckdb(handler: Handler) -> tuple[Handler, PaymentsDatabase]:
    return handler, DuckDBPayments()


def cost_per_message(setups: dict[str, Callable[[], tuple[Handler, PaymentsDatabase]]], messages: list[Message],
                     repeats: int = 3) -> pd.Series:
    """Wall-clock milliseconds per message for each setup, best of ``repeats`` runs with no faults.

    A measurement of this machine, not a property of the setup: it varies from run to run.
    The setups take turns within each repeat, so a busy spell of the machine (or its disk)
    falls on all of them rather than on whichever happened to run then.
    """
    timings: dict[str, list[float]] = {label: [] for label in setups}
    for _ in range(repeats):
        for label, setup in setups.items():
            handler, database = setup()
            started = time.perf_counter()
            simulate(handler, messages, database=database)
            timings[label].append(time.perf_counter() - started)
    costs = {label: round(min(runs) / len(messages) * 1000, 2) for label, runs in timings.items()}
    return pd.Series(costs, name="ms per message")


def fault_sweep(
    handlers: Iterable[Handler],
    messages: list[Message],
    rates: Iterable[float],
    *,
    fault: str = "ack_loss_rate",
    seed: int = 7,
    provider: str | None = None,
    step_seconds: dict[str, float] | None = None,
    database: Callable[[], PaymentsDatabase] = DuckDBPayments,
) -> pd.DataFrame:
    """What each handler charges as one kind of fault grows more frequent.

    ``fault`` names a rate of :class:`FaultPlan` (``ack_loss_rate``, ``crash_rate``,
    ``response_loss_rate``). Every handler meets the same faults at a given rate (the
    draws depend only on the seed, the message and the delivery), so totals compare
    like for like. With ``provider`` (a behaviour name), each run also gets a fresh
    payment provider and the table counts what it really charged. Each run gets a new ``database()``.
    """
    rows = []
    for rate in rates:
        rate_of: dict[str, Any] = {fault: rate}
        plan = FaultPlan(seed=seed, **rate_of)
        for handler in handlers:
            payments = PaymentProvider(behaviours()[provider]) if provider else None
            result = simulate(handler, messages, faults=plan, provider=payments, step_seconds=step_seconds,
                              max_deliveries=20, database=database())
            rows.append((handler.name, rate, result.total_charged,
                         payments.total_charged() if payments else None, result.expected_total))
    return pd.DataFrame(rows, columns=["handler", "rate", "total charged", "charged at provider", "expected total"])


def open_transaction_seconds(trace: pd.DataFrame) -> pd.Series:
    """For each delivery that opened a transaction, how long (simulated seconds) it held it open.

    Measured from the end of its ``begin`` step to its commit, conflict, failure or crash.
    """
    events = trace.set_index(["actor", "message_id", "delivery"]).sort_index()
    began = events[(events["event"] == "step") & (events["detail"] == "begin")]["time"]
    ended = events[events["event"].isin(["committed", "crashed", "conflict", "provider failed", "response lost"])]
    ended = ended.groupby(level=[0, 1, 2])["time"].min()
    return (ended.reindex(began.index) - began).dropna().rename("seconds open")


Tally = Callable[[Engine, Sequence[Message], PaymentsDatabase, PaymentProvider | None], Mapping[str, object]]
"""What one interleaving's row counts, from its run, the messages, the database and the provider (if any)."""


def charges_and_conflicts(effect: str = "charges", amount: int = 1) -> Tally:
    """One message's row: how many times ``effect`` happened (dollars charged over ``amount``), the write
    conflicts, the outcome, and, with a provider, the calls it received and the charges it made."""
    def tally(engine: Engine, messages: Sequence[Message], database: PaymentsDatabase,
              provider: PaymentProvider | None) -> dict[str, object]:
        times = database.total_charged() // amount
        row: dict[str, object] = {effect: times, "conflicts": engine.trace.count(Event.CONFLICT), "outcome": outcome_of(times)}
        if provider is not None:
            row |= {"provider calls": provider.calls, "charges at provider": len(provider.charges)}
        return row
    return tally


def interleavings(
    handler: Handler | Callable[[], Handler],
    messages: Message | Sequence[Message] = RUNNING_EXAMPLE,
    database: PaymentsDatabase | None = None,
    provider: Callable[[], PaymentProvider] | None = None,
    schedules: Iterable[str] | None = None,
    effect: str = "charges",
    *,
    tally: Tally | None = None,
    max_deliveries: int = 5,
    faults: FaultPlan | None = None,
) -> pd.DataFrame:
    """Run every order in which two consumers holding the same messages can take their steps.

    Consumer A gets the message (a batch, for a batch consumer), its lease runs out, and
    consumer B gets it too. Each schedule says who moves next; the steps run on a fresh
    database, the loser of a write conflict gives the message back, and any delivery still
    unacked at the end is redelivered until one is. One row per distinct interleaving.
    The database (DuckDB by default) is emptied before every schedule. With ``provider``
    (a factory), each schedule gets a fresh payment provider and the default row also counts
    the calls it received and the charges it made. ``schedules`` plays only the given orders,
    each a string such as ``"AABB..."`` with one letter per step (both consumers take every
    step), instead of all of them. ``tally`` says what a row counts: by default one message's
    :func:`charges_and_conflicts` under the name ``effect`` (charges; accounts, for the loan
    service); the batched inbox counts its messages' outcomes instead. ``handler`` may be a
    factory instead: each schedule then gets a new handler, for a handler with a memory that
    ``database.empty()`` does not reach (a cache's claims). ``faults`` crash a consumer at a step (A's is delivery 1).
    """
    fresh = (lambda: handler) if isinstance(handler, Handler) else handler
    database = database or DuckDBPayments()
    batch = [messages] if isinstance(messages, Message) else list(messages)
    if tally is None:  # a message the handler cannot read is refused here, saying why
        tally = charges_and_conflicts(effect, fresh().read(batch[0]).amount)
    steps = len(fresh().steps)
    seen: dict[tuple[str, ...], Mapping[str, object]] = {}
    for schedule in every_schedule(steps) if schedules is None else schedules:
        if len(schedule) != 2 * steps or schedule.count("A") != steps or set(schedule) - {"A", "B"}:
            raise ValueError(f"a schedule is {2 * steps} letters, {steps} A and {steps} B; got {''.join(schedule)!r}")
        database.empty()
        payments = provider() if provider else None
        played = fresh()
        engine, taken = play_schedule(played, played.sessions(database), batch, schedule, provider=payments,
                                      max_deliveries=max_deliveries, faults=faults)
        seen.setdefault(taken, tally(engine, batch, database, payments))
    return pd.DataFrame([{"interleaving": " → ".join(taken), **row} for taken, row in seen.items()])


class Script:
    """An explicit schedule, for exploring interleavings.

    ``starts`` names who takes a delivery first, in order (one letter each: the last
    letter of a consumer's name); then each letter of ``moves`` names who takes its
    next step (if that one has finished, another busy one moves; when none is busy the
    script is over). After it, busy consumers finish, and only ``then`` takes new deliveries.
    ``taken`` lists the moves made, as ``"A:charge"``.
    """

    def __init__(self, starts: str, moves: str, then: str = "A") -> None:
        self._starts, self._moves, self.then = deque(starts), deque(moves), then
        self.taken: list[str] = []

    def choose(self, workers: Sequence[Worker]) -> Worker:
        named = {w.name[-1]: w for w in workers}
        if self._starts:
            return named[self._starts.popleft()]
        while self._moves:
            mover = named[self._moves.popleft()]
            if not mover.busy:  # finished already: another one moves
                mover = next((w for w in workers if w.busy), mover)
            if not mover.busy:
                self._moves.clear()
                break
            self.taken.append(f"{mover.name[-1]}:{mover.step}")
            return mover
        return EarliestDue().choose([w for w in workers if w.busy] or [named[self.then]])


def every_schedule(steps: int) -> Iterator[str]:
    """Every order in which two consumers can each take ``steps`` steps: strings of ``A`` and ``B``."""
    for a_turns in itertools.combinations(range(2 * steps), steps):
        yield "".join("A" if turn in a_turns else "B" for turn in range(2 * steps))


def play_schedule(handler: Handler, sessions: Callable[[], Any], messages: Sequence[Message], schedule: str, *,
                  provider: PaymentProvider | None = None, max_deliveries: int = 5,
                  faults: FaultPlan | None = None) -> tuple[Engine, tuple[str, ...]]:
    """Two consumers holding the same messages at once, moving as ``schedule`` says: the one interleaving explorer.

    Consumer A takes a delivery (a batch, for a batch consumer); its lease runs out
    and consumer B takes one too. Then each letter of ``schedule`` moves A or B by
    one step (taking no time); after it, A alone takes whatever is still unacked,
    until the queue is empty. Returns the run and the moves made (``"A:charge"``).
    """
    script = Script("AB", schedule)
    engine = Engine(handler, sessions, provider=provider, policy=script, max_deliveries=max_deliveries,
                    step_seconds=lambda step, now: 0.0, faults=faults)
    engine.add_consumers(2, ready_at=(0.0, engine.broker.visibility_timeout))
    engine.publish(messages)
    engine.run()
    return engine, tuple(script.taken)


def in_every_order(fresh: Callable[[], Handler], database: PaymentsDatabase,
                   message: Message = RUNNING_EXAMPLE) -> pd.DataFrame:
    """Two consumers holding ``message`` at once, in every order in which their steps can interleave, each
    order played by :func:`interleavings` on a new handler from ``fresh``: one row per distinct order, its
    moves and its outcome (schedules that play out as the same moves, a consumer that finds a claim and
    stops early, are one order)."""
    return interleavings(fresh, message, database)[["interleaving", "outcome"]]


def places_to_remember(cache: Cache) -> dict[str, Callable[[], tuple[Handler, PaymentsDatabase]]]:
    """Lesson 06's setups: the same payments consumer with its IDs kept in each kind of store.

    ``cache`` is a real Redis client or a :class:`~idemlib.stores.cache.MemoryCache`;
    each run gets a fresh key prefix so runs never see each other's claims.
    """
    def guarded(order: str) -> Callable[[], tuple[Handler, PaymentsDatabase]]:
        return lambda: (CacheGuardHandler(cache, order, prefix=f"run-{next(_cache_runs)}-{id(cache)}"), DuckDBPayments())

    return {
        "same-database table": lambda: (InboxHandler(), DuckDBPayments()),
        "business row": lambda: (BusinessRowHandler(), DuckDBPayments()),
        "key-value, put then write": lambda: (IdFirstHandler(), KeyValuePayments()),
        "key-value, TransactWriteItems": lambda: (InboxHandler(), KeyValuePayments()),
        "cache, claim first": guarded("claim first"),
        "cache, work first": guarded("work first"),
    }

def two_consumers_at_once(setups: dict[str, Callable[[], tuple[Handler, PaymentsDatabase]]],
                          message: Message = RUNNING_EXAMPLE, faults: FaultPlan | None = None) -> pd.DataFrame:
    """Each setup with two consumers holding ``message`` at once: each takes its first step (a check or a claim)
    before either goes on, then A finishes (unless ``faults`` crash it), then B. One row per setup: the
    interleaving and its outcome."""
    rows = []
    for label, setup in setups.items():
        handler, database = setup()
        later = len(handler.steps) - 1
        played = interleavings(handler, message, database=database, schedules=["AB" + "A" * later + "B" * later],
                               faults=faults)
        rows.append((label, *played.iloc[0][["interleaving", "outcome"]]))
    return pd.DataFrame(rows, columns=["setup", "interleaving", "two consumers at once"])


BROKER_EVENTS = ("published", "delivered", "lease expired", "acked", "dead-lettered")
"""What the broker does or receives. A lost ack, a crash or a commit never reaches it."""


def broker_view(trace: pd.DataFrame) -> pd.DataFrame:
    """The trace as the broker knows it: publishes, deliveries (and redeliveries), lease expiries, acks, dead letters.

    ``consumer`` is the one a delivery went to or an ack came from; a ``delivery``
    above 1 is a redelivery.
    """
    rows = trace[trace["event"].isin(BROKER_EVENTS)]
    view = pd.DataFrame({
        "time (s)": rows["time"],
        "the broker": rows["event"].replace({"acked": "ack received"}),
        "message": rows["message_id"],
        "delivery": rows["delivery"].where(rows["event"] != "published", 0).astype(int),
        "consumer": rows["actor"].where(rows["actor"] != "broker", ""),
    })
    return view.reset_index(drop=True)


def retry_settings(
    handler: Handler,
    messages: list[Message],
    faults: FaultPlan,
    *,
    leases: Iterable[float],
    max_deliveries: Iterable[int],
    step_seconds: Mapping[str, float] | None = None,
    consumers: int = 2,
) -> pd.DataFrame:
    """Run ``messages`` under every (lease, delivery limit) pair and count what went wrong.

    One row per setting: extra charges (duplicates that got through), payments never
    made (the message was dead-lettered before any delivery committed), messages in the
    dead-letter queue, and how many of those had been charged already (a replay of the
    dead-letter queue charges them again). The faults are the same in every run.
    """
    rows = []
    for lease in leases:
        for limit in max_deliveries:
            result = simulate(handler, messages, faults=faults, consumers=consumers, visibility_timeout=lease,
                              max_deliveries=limit, step_seconds=step_seconds)
            charges = result.charges_per_message()
            dead = {letter.message.message_id for letter in result.dead_letters}
            rows.append({"lease (s)": lease, "max deliveries": limit,
                         "extra charges": int((charges - 1).clip(lower=0).sum()),
                         "payments never made": int((charges == 0).sum()),
                         "dead-lettered": len(dead),
                         "dead-lettered, already charged": sum(charges.get(name, 0) > 0 for name in dead)})
    return pd.DataFrame(rows)


def handler_seconds(handler: Handler, step_seconds: Mapping[str, float] | None = None) -> dict[str, float]:
    """Simulated seconds each of ``handler``'s steps takes in one delivery: ``step_seconds``, else the default."""
    durations = dict(step_seconds or {})
    return {step: durations.get(step, DEFAULT_STEP_SECONDS) for step in handler.steps}
