"""Where the provider call sits, lesson 04: inside the transaction, before it, or after a pending row.

The third placement is the one payment services use: commit a *pending* row that
names the call (the inbox row, whose ID the key is derived from), call the provider
outside any transaction, then record the result in a second, short transaction. A
delivery that finds the pending row but no result calls again with the same key; one
that finds the result skips the call, however late it comes. Rows left pending by a
message that never comes back (dead-lettered, say) are settled by a reconciler that
asks the provider with the same key while the provider still keeps it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE, fault_points
from idemlib.faults import FaultPlan, LostResponse
from idemlib.handlers import Context, Handler, ProviderError, ProviderHandler, Steps
from idemlib.messages import Message, parse_charge
from idemlib.provider import PaymentProvider
from idemlib.sim import outcome_of, simulate
from idemlib.stores import DuckDBPayments, PaymentsDatabase

RESULT = "#result"
"""Suffix of the inbox row that says the provider's result was recorded (the pending row is the bare ID)."""


class PendingChargeHandler(Handler):
    """Pending row first, the call outside any transaction, the result recorded after it.

    The pending row is the inbox row of the message; its result row is a second inbox
    row (``<ID>#result``) written with the local charge, so the result commits with
    the money our database records.
    """

    name = "pending row, then call"
    steps = ("begin", "record pending", "commit", "look up result", "call provider", "record result", "ack")

    def key_for(self, message_id: str) -> str:
        """The provider key: derived from the message ID, as :class:`ProviderHandler`'s."""
        return f"{message_id}:charge"

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "begin"
        ctx.db.begin()
        yield "record pending"
        ctx.db.record_message(ctx.message_id)  # new or already pending: either way the call may still be owed
        yield "commit"
        ctx.db.commit()
        yield "look up result"
        if ctx.db.has_processed(ctx.message_id + RESULT):
            ctx.note("duplicate skipped")
        else:
            yield "call provider"
            response = ctx.call_provider(self.key_for(ctx.message_id), charge)
            if not response.ok:
                raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}")
            yield "record result"
            ctx.db.begin()
            if ctx.db.record_message(ctx.message_id + RESULT):
                ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
            ctx.db.commit()
        yield "ack"
        ctx.ack()


PLACEMENTS: tuple[Handler, ...] = (ProviderHandler("inside"), ProviderHandler("before"), PendingChargeHandler())
"""The three places for the call, each with the key."""


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


def stuck_rows(database: PaymentsDatabase) -> list[str]:
    """Message IDs whose pending row has no result: a call that may or may not have charged."""
    seen = set(database.processed_ids())
    return sorted(m for m in seen if not m.endswith(RESULT) and m + RESULT not in seen)


def reconcile(database: PaymentsDatabase, provider: PaymentProvider, messages: dict[str, Message],
              handler: PendingChargeHandler) -> list[dict[str, Any]]:
    """Settle each stuck pending row: ask the provider again with the row's key and record the answer.

    ``messages`` gives the stored message of each ID (a pending row keeps what it asked for). Within the
    provider's retention the same key is answered with the first call's result, so asking charges nothing
    new; past it, the reconciler would look the charge up first (``provider.charges_for``).
    """
    settled = []
    session = database.session()
    for message_id in stuck_rows(database):
        charge = parse_charge(messages[message_id])
        response = provider.charge(handler.key_for(message_id), order_id=charge.order_id, amount=charge.amount)
        if response.ok:
            session.begin()
            if session.record_message(message_id + RESULT):
                session.charge(charge.order_id, charge.amount, message_id)
            session.commit()
        settled.append({"pending row": message_id, "provider answered": response.status,
                        "replayed": response.replayed, "charge": response.body.get("id")})
    return settled
