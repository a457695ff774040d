"""Where the provider call sits, lesson 04: inside the transaction, before it, or after a pending row.

The third placement is the one payment services use: commit a *pending* row that
names the call (the inbox row, and the key, order and amount it owes), call the provider
outside any transaction, then record the result in a second, short transaction. A
delivery that finds the pending row but no result calls again with the same key; one
that finds the result skips the call, however late it comes. Rows left pending by a
message that never comes back (dead-lettered, say) are settled by a reconciler that
looks the charge up first and asks again with the stored key only where that settles something.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE, fault_points, interleavings, open_transaction_seconds
from idemlib.facts import fact_number, fact_seconds
from idemlib.faults import Crash, FaultPlan, LostResponse
from idemlib.handlers import Context, Handler, ProviderError, ProviderHandler, Steps
from idemlib.messages import Charge, Message, parse_charge, payment_stream
from idemlib.provider import PaymentProvider, behaviours, key_of_call
from idemlib.sim import outcome_of, simulate
from idemlib.stores import DuckDBPayments, PaymentsDatabase, PaymentsSession
from idemlib.trace import Event

PENDING_CALLS = """CREATE TABLE IF NOT EXISTS pending_calls (
    message_id      VARCHAR PRIMARY KEY,        -- the message whose call this is: one pending call per message
    idempotency_key VARCHAR NOT NULL,           -- stored, never derived again: a deploy cannot change a pending key
    order_id        INTEGER NOT NULL,
    amount          INTEGER NOT NULL,
    since           DOUBLE PRECISION NOT NULL,  -- when the row was committed, on the run's clock
    last_status     INTEGER                     -- the provider's last answer; NULL before any (or when it was lost)
)"""
"""What a pending row keeps: the call it owes, so a retry or the reconciler sends exactly that call again."""

RECORDED_RESULTS = """CREATE TABLE IF NOT EXISTS recorded_results (
    message_id VARCHAR PRIMARY KEY,  -- a table of its own: no producer's ID can be mistaken for a result
    charge_id  VARCHAR               -- the provider's charge, recorded with the money; NULL for a card declined
)"""
"""Which pending calls have their result recorded: the row a later copy finds and skips on."""


@dataclass(frozen=True)
class PendingCall:
    """One pending row: the key, the order and the amount of the call it owes, and what it knows of the answer."""

    message_id: str
    key: str
    order_id: int
    amount: int
    since: float
    last_status: int | None


_COLUMNS = "message_id, idempotency_key, order_id, amount, since, last_status"


def _pending_call(session: PaymentsSession, message_id: str) -> PendingCall:
    row = session.execute(f"SELECT {_COLUMNS} FROM pending_calls WHERE message_id = {session.placeholder}", (message_id,),
                          rows=True)[0]
    return PendingCall(*row)


def _has_result(session: PaymentsSession, message_id: str) -> bool:
    return bool(session.execute(f"SELECT 1 FROM recorded_results WHERE message_id = {session.placeholder}",
                                (message_id,), rows=True))


def _record_result(session: PaymentsSession, call: PendingCall, charge_id: str | None) -> None:
    """In one transaction, the result and the local charge (none for a decline, ``charge_id`` None, which took no
    money); a second copy's result (the same charge) adds nothing."""
    session.begin()
    if session.execute(f"INSERT INTO recorded_results VALUES ({session.placeholder}, {session.placeholder}) "
                       "ON CONFLICT DO NOTHING RETURNING message_id", (call.message_id, charge_id),
                       rows=True) and charge_id is not None:
        session.charge(call.order_id, call.amount, call.message_id)
    session.commit()


def _note_answer(session: PaymentsSession, message_id: str, status: int) -> None:
    session.execute(f"UPDATE pending_calls SET last_status = {session.placeholder} WHERE message_id = "
                    f"{session.placeholder}", (status, message_id))


class PendingChargeHandler(Handler):
    """Pending row first, the call outside any transaction, the result recorded after it.

    The pending row is the inbox row of the message and, in the same transaction, a row
    of ``pending_calls`` with the call's key, order and amount. Every later attempt reads
    the key from that row. The result is a row of ``recorded_results`` written with the local
    charge, so it commits with the money our database records. (A second inbox row such as
    ``<ID>#result`` would share the producers' namespace: a message whose ID is ``m-7f3#result``
    would make the later ``m-7f3`` a duplicate, its charge skipped.)
    """

    name = "pending row, then call"
    steps = ("begin", "record pending", "commit", "look up result", "call provider", "record result", "ack")

    def __init__(self, key_lifetime_seconds: float | None = None) -> None:
        # How long the provider surely keeps a key (Stripe's v1: 24 hours at least). The key was first sent after
        # the pending row committed, so a row younger than this holds a key the provider still has; an older one
        # may not, and a call with a pruned key is a new charge. Such a row is the reconciler's, which looks first.
        self.key_lifetime_seconds = (fact_seconds("stripe_v1_key_min_age") if key_lifetime_seconds is None
                                     else key_lifetime_seconds)

    def key_for(self, message_id: str) -> str:
        """The key a new pending row stores: derived from the message ID, as :class:`ProviderHandler`'s."""
        return key_of_call(message_id, "charge")

    def sessions(self, database: PaymentsDatabase) -> Callable[[], Any]:
        """Every handler's sessions, once ``pending_calls`` exists on ``database``: made once a run, not per delivery."""
        session = database.session()
        session.execute(PENDING_CALLS)
        session.execute(RECORDED_RESULTS)
        return database.session

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "begin"
        ctx.db.begin()
        yield "record pending"
        ctx.db.record_message(ctx.message_id)  # new or already pending: either way the call may still be owed
        p = ctx.db.placeholder
        ctx.db.execute(f"INSERT INTO pending_calls VALUES ({p}, {p}, {p}, {p}, {p}, NULL) ON CONFLICT DO NOTHING",
                       (ctx.message_id, self.key_for(ctx.message_id), charge.order_id, charge.amount, ctx.now()))
        yield "commit"
        ctx.db.commit()
        yield "look up result"
        pending = None if _has_result(ctx.db, ctx.message_id) else _pending_call(ctx.db, ctx.message_id)
        if pending is None:
            ctx.note("duplicate skipped")
        elif ctx.now() - pending.since >= self.key_lifetime_seconds:
            ctx.note(Event.LEFT_FOR_RECONCILER)  # acked: the row, not the message, now says what is owed
        else:
            yield "call provider"
            response = ctx.call_provider(pending.key, Charge(pending.order_id, pending.amount))
            if not response.ok:
                _note_answer(ctx.db, ctx.message_id, response.status)  # what the reconciler must know of this key
            if not response.ok and response.status != fact_number("stripe_decline_status"):
                raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}")
            yield "record result"  # a charge, or a card declined: a definite answer, which no redelivery changes
            _record_result(ctx.db, pending, response.body.get("id") if response.ok else None)
        yield "ack"
        ctx.ack()


PLACEMENTS: tuple[Handler, ...] = (ProviderHandler("inside"), ProviderHandler("before"), PendingChargeHandler())
"""The three places for the call, each with the key."""


def both_reach_the_call(handler: Handler) -> str:
    """The schedule in which consumer A takes its steps up to the call, then B up to its own, then each finishes."""
    before, after = handler.steps.index("call provider") + 1, len(handler.steps) - handler.steps.index("call provider") - 1
    return "A" * before + "B" * before + "A" * after + "B" * after


def racing_consumers(databases: tuple[Callable[[], PaymentsDatabase], ...]) -> pd.DataFrame:
    """Two consumers holding one message at once, each placement on each engine, under :func:`both_reach_the_call`.

    Where an engine makes B wait on A's lock, B cannot go on until A does, which in a one-step-at-a-time
    schedule is never: B's wait ends at the database's lock timeout, its delivery is given back, and the
    copy that comes again finds A's commit. One row per (engine, placement): the calls and charges.
    """
    frames = {}
    for database in databases:
        for handler in PLACEMENTS:
            store = database()
            frames[(store.engine, handler.name)] = interleavings(
                handler, database=store, provider=PaymentProvider, schedules=[both_reach_the_call(handler)]).iloc[0]
    table = pd.DataFrame(frames).T[["provider calls", "charges at provider", "charges", "conflicts"]].astype(int)
    return table.rename_axis(["engine", "placement"])


def placement_costs(step_seconds: dict[str, float], payments: int = 100, ack_loss_rate: float = 0.2,
                    seed: int = 7) -> pd.DataFrame:
    """What each placement costs over ``payments`` payments with a share of acks lost, on simulated time.

    Per placement: the mean simulated seconds a transaction stays open, the calls made
    to the provider, and the charges the provider made, against the payments owed.
    """
    rows = {}
    for handler in PLACEMENTS:
        provider = PaymentProvider()
        run = simulate(handler, payment_stream(payments), provider=provider, step_seconds=step_seconds,
                       faults=FaultPlan(ack_loss_rate=ack_loss_rate, seed=seed))
        rows[handler.name.removesuffix(", with key")] = {
            "mean seconds a transaction stays open": round(open_transaction_seconds(run.trace).mean(), 2),
            "calls to the provider": len(run.events("provider answered")),
            "charges at the provider": len(provider.charges),
            "payments owed": payments,
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def placement_matrix(handlers: tuple[Handler, ...] = PLACEMENTS, message: Message = RUNNING_EXAMPLE) -> pd.DataFrame:
    """Every placement under the same faults: a crash before each step, a lost ack, a lost answer.

    One row per (placement, fault): what our database and the card show, and the outcome on the card.
    """
    rows = []
    amount = parse_charge(message).amount
    for handler in handlers:
        points = [*fault_points(handler), ("answer lost", FaultPlan(lost_responses=[LostResponse()]))]
        for fault, plan in points:
            provider = PaymentProvider()
            run = simulate(handler, [message], faults=plan, provider=provider)
            rows.append((handler.name, fault, run.total_charged, provider.total_charged(),
                         outcome_of(provider.total_charged() // amount)))
    return pd.DataFrame(rows, columns=["placement", "fault", "our database ($)", "card ($)", "outcome"])


def replayed_after(handler: Handler, hours: float, *, first_failed: bool = False,
                   message: Message = RUNNING_EXAMPLE) -> dict[str, Any]:
    """``message`` handled, then delivered again ``hours`` later (a replay from the dead-letter queue).

    With ``first_failed`` its first handling failed as a dead-lettered message's does: v1 answered 500 with the
    money taken, replayed that 500 to the second delivery, and the broker dead-lettered the message. The
    provider's clock moves on by ``hours`` before the replay; past its retention it has forgotten the key.
    """
    database, provider = DuckDBPayments(), PaymentProvider(behaviours()["stripe-v1"])
    if first_failed:
        provider.fail_next(charged=True)
    first = simulate(handler, [message], database=database, provider=provider, max_deliveries=2)
    provider.clock.advance(hours * 3600)
    simulate(handler, [message], database=database, provider=provider)
    return {"first handling": "dead-lettered" if first.dead_letters else "committed",
            "our database ($)": database.total_charged(), "card ($)": provider.total_charged(),
            "charges at the provider": [charge["id"] for charge in provider.charges]}


def late_replays(hours: float) -> pd.DataFrame:
    """:func:`replayed_after` for every placement, its first handling committed and failed: one row each."""
    rows = [{"placement": handler.name, **replayed_after(handler, hours, first_failed=failed)}
            for failed in (False, True) for handler in PLACEMENTS]
    return pd.DataFrame(rows).set_index(["first handling", "placement"])


def stuck_rows(database: PaymentsDatabase) -> list[PendingCall]:
    """The pending rows with no result: calls that may or may not have charged."""
    session = database.session()
    session.execute(PENDING_CALLS)
    session.execute(RECORDED_RESULTS)
    rows = session.execute(f"SELECT {_COLUMNS} FROM pending_calls WHERE message_id NOT IN "
                           "(SELECT message_id FROM recorded_results) ORDER BY message_id", rows=True)
    return [PendingCall(*row) for row in rows]


def reconcile(database: PaymentsDatabase, provider: PaymentProvider, *, look_up_first: bool = True) -> list[dict[str, Any]]:
    """Settle each stuck pending row, at the provider's clock's now; one line per row, saying what was done.

    The reconciler looks the charge up first, by the key the row stored: the provider finds the charges
    whose call carried it, as Stripe's search finds a charge by the ID sent with it as metadata. (A lookup
    by order alone takes the order's $40 charge for its $5 fee's.) One charge found, for the row's order and
    amount, is recorded, whatever its key's answer was; anything else found is left for a person. With none
    found, it asks again with the row's key only while that settles something: the key is younger than the
    provider's retention (the row is older than its key, so its age is an upper bound) and the key's last
    answer is not one the provider saved and replays (:meth:`~idemlib.provider.Behaviour.replays`: Stripe's
    v1 replays a 500, never a 429, a 401 or a 409, which saved nothing). Otherwise it calls nothing and leaves
    the row for a person. It never makes a new key: a new key is a new charge, which only a person who has
    confirmed that no charge exists may allow (:func:`charge_anew`). Run it once a failed call can no longer
    be running and a charge it made is searchable (minutes after the last delivery). ``look_up_first=False``
    is the naive reconciler that only asks again with the key, kept to show what it does.
    """
    session = database.session()
    return [_settle(session, provider, row, look_up_first) for row in stuck_rows(database)]


def _settle(session: PaymentsSession, provider: PaymentProvider, row: PendingCall, look_up_first: bool) -> dict[str, Any]:
    retention = provider.behaviour.retention_seconds
    age = provider.clock.now() - row.since
    found = provider.charges_carrying(row.key) if look_up_first else []
    charge_id = None
    if len(found) == 1 and (found[0]["order_id"], found[0]["amount"]) == (row.order_id, row.amount):
        charge_id, did = found[0]["id"], "found the charge its key made: recorded it"
    elif found:
        did = (f"found {[(c['id'], c['order_id'], c['amount']) for c in found]} under its key, not one charge of "
               f"${row.amount} for order {row.order_id}: left for a person")
    elif look_up_first and age >= retention:
        did = f"no charge found, key past the provider's {retention / 3600:g} h: left for a person"
    elif look_up_first and row.last_status is not None and provider.behaviour.replays(row.last_status):
        did = f"no charge found, the key's saved {row.last_status} would be replayed: left for a person"
    else:
        response = provider.charge(row.key, order_id=row.order_id, amount=row.amount)
        charge_id = response.body.get("id") if response.ok else None
        did = f"asked again with the row's key: {response.status}{' replayed' if response.replayed else ''}"
        if not response.ok:
            _note_answer(session, row.message_id, response.status)
            # A saved error comes back on every run, so it is a person's; one that saved nothing (a 409 while the
            # first call runs, a 429) may settle on the next run, which asks again.
            did += (", row still pending" if not look_up_first else ", left for a person"
                    if provider.behaviour.replays(response.status) else ", asked again on the next run")
    if charge_id is not None:
        _record_result(session, row, charge_id)
    return {"pending row": row.message_id, "hours since": round(age / 3600, 1), "reconciler": did,
            "charge recorded": charge_id}


def charge_anew(database: PaymentsDatabase, provider: PaymentProvider, message_id: str) -> dict[str, Any]:
    """What a person does with a row the reconciler left, having confirmed with the provider that no charge exists:
    charge it under a new key (``<message ID>:charge-anew``), stored in the row before the call as the first was.

    It looks once more first and refuses if the row's key made a charge. A second run, or the row's message
    replayed, sends the same new key, so the person's decision charges once.
    """
    rows = [row for row in stuck_rows(database) if row.message_id == message_id]
    if not rows:
        raise ValueError(f"{message_id}: no pending row without a result, so nothing is owed")
    [row] = rows
    if provider.charges_carrying(row.key):
        raise ValueError(f"{message_id}: a charge carries the key {row.key!r}; reconcile() records it, "
                         "and a new key would charge a second time")
    session = database.session()
    p = session.placeholder
    new_key = key_of_call(message_id, "charge-anew")
    session.begin()
    session.execute(f"UPDATE pending_calls SET idempotency_key = {p}, since = {p}, last_status = NULL "
                    f"WHERE message_id = {p}", (new_key, provider.clock.now(), message_id))
    session.commit()
    [again] = [row for row in stuck_rows(database) if row.message_id == message_id]
    return {"new key": new_key, **_settle(session, provider, again, look_up_first=True)}


LEFT_PENDING: dict[str, Callable[[PaymentProvider], None]] = {
    "crashed before recording the result": lambda provider: None,
    "v1 answered 500, money taken": lambda provider: provider.fail_next(charged=True),
    "v1 answered 500, no money taken": lambda provider: provider.fail_next(),
    "v1 answered 429, nothing saved": lambda provider: provider.refuse_next(2),
}
"""How lesson 04's ``m-7f3`` is left pending under Stripe's v1 rules: the failure scheduled on the provider."""


def left_pending(case: str) -> tuple[DuckDBPayments, PaymentProvider]:
    """``m-7f3`` left pending as :data:`LEFT_PENDING` ``case`` says: two deliveries, then the dead-letter queue."""
    database, provider = DuckDBPayments(), PaymentProvider(behaviours()["stripe-v1"])
    LEFT_PENDING[case](provider)
    crashes = [Crash("record result", delivery=n) for n in (1, 2)] if case.startswith("crashed") else []
    simulate(PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider,
             faults=FaultPlan(crashes=crashes), max_deliveries=2)
    return database, provider


def reconciled_after(case: str, hours: float, *, look_up_first: bool = True) -> dict[str, Any]:
    """``m-7f3`` left pending (:func:`left_pending`) and reconciled ``hours`` later on the provider's clock:
    what the reconciler did, and what each side shows."""
    database, provider = left_pending(case)
    provider.clock.advance(hours * 3600)
    [line] = reconcile(database, provider, look_up_first=look_up_first)
    return {"what it did": line["reconciler"], "card ($)": provider.total_charged(),
            "our database ($)": database.total_charged()}


def replayed_from_dead_letters(case: str, hours: float, *, key_lifetime_seconds: float | None = None) -> dict[str, Any]:
    """``m-7f3`` left pending (:func:`left_pending`), replayed from the dead-letter queue ``hours`` later to a
    :class:`PendingChargeHandler` (trusting keys for ``key_lifetime_seconds``; by default the provider's 24 hours),
    and reconciled a minute after that: what each side shows after the replay and after the reconciler."""
    database, provider = left_pending(case)
    provider.clock.advance(hours * 3600)
    simulate(PendingChargeHandler(key_lifetime_seconds), [RUNNING_EXAMPLE], database=database, provider=provider)
    replay = {"after the replay: card ($)": provider.total_charged(),
              "after the replay: our database ($)": database.total_charged()}
    provider.clock.advance(60)
    lines = reconcile(database, provider)
    return {**replay, "reconciler": lines[0]["reconciler"] if lines else "(nothing left pending)",
            "card ($)": provider.total_charged(), "our database ($)": database.total_charged()}


FEE = Message.charge("m-7f3-fee", order_id=1042, amount=5)
"""A $5 handling fee for order 1042, the running example's order: a second call for the same order."""


def fee_reconciled() -> dict[str, Any]:
    """Order 1042's $40 charged by ``m-7f3``, then its fee :data:`FEE` left pending before its call (both
    deliveries crash there, then the dead-letter queue), and reconciled an hour later."""
    database, provider = DuckDBPayments(), PaymentProvider()
    simulate(PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider)
    simulate(PendingChargeHandler(), [FEE], database=database, provider=provider, max_deliveries=2,
             faults=FaultPlan(crashes=[Crash("call provider", delivery=n) for n in (1, 2)]))
    by_order = [(charge["id"], charge["amount"]) for charge in provider.charges_for(FEE.body["order_id"])]
    provider.clock.advance(3600)
    [line] = reconcile(database, provider)
    return {"charges a lookup by order 1042 finds": by_order, "reconciler": line["reconciler"],
            "charge recorded": line["charge recorded"], "card ($)": provider.total_charged(),
            "our database ($)": database.total_charged()}
