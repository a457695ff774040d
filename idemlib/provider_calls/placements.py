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

from idemlib.explore import RUNNING_EXAMPLE, fault_points, open_transaction_seconds
from idemlib.faults import Crash, FaultPlan, LostResponse
from idemlib.handlers import Context, Handler, ProviderError, ProviderHandler, Steps
from idemlib.messages import Charge, Message, parse_charge, payment_stream
from idemlib.provider import PaymentProvider, behaviours
from idemlib.sim import outcome_of, simulate
from idemlib.stores import DuckDBPayments, PaymentsDatabase, PaymentsSession

RESULT = "#result"
"""Suffix of the inbox row that says the provider's result was recorded (the pending row is the bare ID)."""

PENDING_CALLS = """CREATE TABLE IF NOT EXISTS pending_calls (
    message_id      VARCHAR PRIMARY KEY,        -- the message whose call this is: one pending call per message
    idempotency_key VARCHAR NOT NULL,           -- stored, never derived again: a deploy cannot change a pending key
    order_id        INTEGER NOT NULL,
    amount          INTEGER NOT NULL,
    since           DOUBLE PRECISION NOT NULL,  -- when the row was committed, on the run's clock
    last_status     INTEGER                     -- the provider's last answer; NULL before any (or when it was lost)
)"""
"""What a pending row keeps: the call it owes, so a retry or the reconciler sends exactly that call again."""


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


def _note_answer(session: PaymentsSession, message_id: str, status: int) -> None:
    session.execute(f"UPDATE pending_calls SET last_status = {session.placeholder} WHERE message_id = "
                    f"{session.placeholder}", (status, message_id))


class PendingChargeHandler(Handler):
    """Pending row first, the call outside any transaction, the result recorded after it.

    The pending row is the inbox row of the message and, in the same transaction, a row
    of ``pending_calls`` with the call's key, order and amount. Every later attempt reads
    the key from that row. The result row is a second inbox row (``<ID>#result``) written
    with the local charge, so the result commits with the money our database records.
    """

    name = "pending row, then call"
    steps = ("begin", "record pending", "commit", "look up result", "call provider", "record result", "ack")

    def key_for(self, message_id: str) -> str:
        """The key a new pending row stores: derived from the message ID, as :class:`ProviderHandler`'s."""
        return f"{message_id}:charge"

    def sessions(self, database: PaymentsDatabase) -> Callable[[], Any]:
        """Every handler's sessions, once ``pending_calls`` exists on ``database``: made once a run, not per delivery."""
        database.session().execute(PENDING_CALLS)
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
        if ctx.db.has_processed(ctx.message_id + RESULT):
            ctx.note("duplicate skipped")
        else:
            pending = _pending_call(ctx.db, ctx.message_id)
            yield "call provider"
            response = ctx.call_provider(pending.key, Charge(pending.order_id, pending.amount))
            if not response.ok:
                _note_answer(ctx.db, ctx.message_id, response.status)  # what the reconciler must know of this key
                raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}")
            yield "record result"
            ctx.db.begin()
            if ctx.db.record_message(ctx.message_id + RESULT):
                ctx.db.charge(pending.order_id, pending.amount, ctx.message_id)
            ctx.db.commit()
        yield "ack"
        ctx.ack()


PLACEMENTS: tuple[Handler, ...] = (ProviderHandler("inside"), ProviderHandler("before"), PendingChargeHandler())
"""The three places for the call, each with the key."""


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


def replayed_after(handler: Handler, hours: float, message: Message = RUNNING_EXAMPLE) -> dict[str, Any]:
    """``message`` handled once, then delivered again ``hours`` later (a replay from the dead-letter queue).

    The provider's keys age by ``hours`` in between; past its retention it has forgotten the key.
    """
    database, provider = DuckDBPayments(), PaymentProvider()
    simulate(handler, [message], database=database, provider=provider)
    provider.age_keys(hours * 3600)
    simulate(handler, [message], database=database, provider=provider)
    return {"our database ($)": database.total_charged(), "card ($)": provider.total_charged(),
            "charges at the provider": [charge["id"] for charge in provider.charges]}


def stuck_rows(database: PaymentsDatabase) -> list[PendingCall]:
    """The pending rows with no result: calls that may or may not have charged."""
    session = database.session()
    session.execute(PENDING_CALLS)
    rows = session.execute(f"SELECT {_COLUMNS} FROM pending_calls WHERE message_id || '{RESULT}' NOT IN "
                           "(SELECT message_id FROM processed_messages) ORDER BY message_id", rows=True)
    return [PendingCall(*row) for row in rows]


def reconcile(database: PaymentsDatabase, provider: PaymentProvider, *, look_up_first: bool = True) -> list[dict[str, Any]]:
    """Settle each stuck pending row, at the provider's clock's now; one line per row, saying what was done.

    The reconciler looks the charge up first, by the order the row names (the metadata a charge carries;
    Stripe's search finds a charge by it). A charge found is recorded, whatever its key's answer was. With
    none found, it asks again with the row's key only while that settles something: the key is younger than
    the provider's retention (the row is older than its key, so its age is an upper bound) and the key's
    last answer is not an error the provider replays (Stripe's v1 answers a 500 with the same 500). Otherwise
    it calls nothing and leaves the row for a person: past the retention the key would be a new charge, a day
    late, and charging anew is the business's decision. Run it once a failed call can no longer be running
    and a charge it made is searchable (minutes after the last delivery). ``look_up_first=False`` is the
    naive reconciler that only asks again with the key, kept to show what it does.
    """
    retention = provider.behaviour.retention_seconds
    settled = []
    session = database.session()
    for row in stuck_rows(database):
        age = provider.clock.now() - row.since
        found = provider.charges_for(row.order_id) if look_up_first else []
        stored_error = (row.last_status is not None and row.last_status >= 400 and provider.behaviour.replays_errors)
        if found:
            charge_id, did = found[0]["id"], "found the charge by its order: recorded it"
        elif look_up_first and (age >= retention or stored_error):
            charge_id = None
            did = (f"no charge found, key past the provider's {retention / 3600:g} h: left for a person" if age >= retention
                   else f"no charge found, the key's {row.last_status} would be replayed: left for a person")
        else:
            response = provider.charge(row.key, order_id=row.order_id, amount=row.amount)
            charge_id = response.body.get("id") if response.ok else None
            did = f"asked again with the row's key: {response.status}{' replayed' if response.replayed else ''}"
            if not response.ok:
                _note_answer(session, row.message_id, response.status)
                did += ", left for a person" if look_up_first else ", row still pending"
        if charge_id is not None:
            session.begin()
            if session.record_message(row.message_id + RESULT):
                session.charge(row.order_id, row.amount, row.message_id)
            session.commit()
        settled.append({"pending row": row.message_id, "hours since": round(age / 3600, 1), "reconciler": did,
                        "charge recorded": charge_id})
    return settled


LEFT_PENDING: dict[str, tuple[str, Callable[[PaymentProvider], None]]] = {
    "crashed before recording the result": ("stripe-v1", lambda provider: None),
    "v1 answered 500, money taken": ("stripe-v1", lambda provider: provider.fail_next(charged=True)),
    "v1 answered 500, no money taken": ("stripe-v1", lambda provider: provider.fail_next()),
}
"""How lesson 04's ``m-7f3`` is left pending: the provider's rules, and the failure scheduled on it."""


def reconciled_after(case: str, hours: float, *, look_up_first: bool = True) -> dict[str, Any]:
    """``m-7f3`` left pending as :data:`LEFT_PENDING` ``case`` says (two deliveries, then dead-lettered), and
    reconciled ``hours`` later on the provider's clock: what the reconciler did, and what each side shows."""
    name, schedule = LEFT_PENDING[case]
    database, provider = DuckDBPayments(), PaymentProvider(behaviours()[name])
    schedule(provider)
    crashes = [Crash("record result", delivery=n) for n in (1, 2)] if case.startswith("crashed") else []
    simulate(PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider,
             faults=FaultPlan(crashes=crashes), max_deliveries=2)
    provider.clock.advance(hours * 3600)
    [line] = reconcile(database, provider, look_up_first=look_up_first)
    return {"what it did": line["reconciler"], "card ($)": provider.total_charged(),
            "our database ($)": database.total_charged()}
