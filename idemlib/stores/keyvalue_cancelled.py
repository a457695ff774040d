"""What a cancelled ``TransactWriteItems`` tells the consumer, read two ways (lesson 06).

DynamoDB cancels a transaction for a failed condition, for want of capacity, for a
concurrent transaction on one of its items, and more; only the first, on the
message marker's own action, says the message was handled before. The same
consumer runs against each cause twice: once reading every cancellation as
*done*, once reading it so only when ``CancellationReasons`` gives
``ConditionalCheckFailed`` on the marker, and giving the message back otherwise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pandas as pd

from idemlib.handlers import Context, InboxHandler, Steps
from idemlib.messages import Message, parse_charge
from idemlib.sim import simulate
from idemlib.stores.keyvalue import REPLY_LOST, KeyValuePayments, KeyValueSession, KeyValueTable, TransactionCanceled
from idemlib.stores.sql import PaymentsSession

CAUSES = {"its first attempt committed, the reply was lost": REPLY_LOST,
          "throttled": "ThrottlingError",
          "another transaction holds the marker": "TransactionConflict"}
"""Three causes of a cancelled commit, each by the table fault that makes it."""
READINGS = {"every cancellation read as done": True,
            "done only on ConditionalCheckFailed on the marker": False}
"""Two ways to read a cancellation: whether every one counts as done."""


class CancellationReader:
    """A key-value session whose commit reads a cancellation as done (returns, so the handler acks) or gives
    the message back (raises, so the broker redelivers it)."""

    def __init__(self, session: KeyValueSession, every_cancellation_done: bool) -> None:
        self._session = session
        self._every_cancellation_done = every_cancellation_done

    def commit(self) -> None:
        try:
            self._session.commit()
        except TransactionCanceled as cancelled:
            if not (self._every_cancellation_done or cancelled.marker_already_there):
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class CancellationReadingHandler(InboxHandler):
    """The inbox's transaction on the key-value store, with its commit's cancellation read one of two ways."""

    def __init__(self, *, every_cancellation_done: bool) -> None:
        super().__init__()
        self.every_cancellation_done = every_cancellation_done
        self.name = next(reading for reading, every in READINGS.items() if every == every_cancellation_done)

    def run(self, ctx: Context) -> Steps:
        reader = CancellationReader(cast(KeyValueSession, ctx.db), self.every_cancellation_done)
        return super().run(replace(ctx, db=cast(PaymentsSession, reader)))


def reasons_for(fault: str, message: Message) -> str:
    """The ``CancellationReasons`` codes, in action order (marker, payment), of ``message``'s transaction
    meeting ``fault``."""
    table = KeyValueTable(faults=[fault])
    session = KeyValuePayments(table=table).session()
    session.begin()
    charge = parse_charge(message)
    session.record_message(message.label)
    session.charge(charge.order_id, charge.amount, message.label)
    try:
        session.commit()
    except TransactionCanceled as cancelled:
        return ", ".join(cancelled.reasons.values())
    raise AssertionError(f"{fault!r} did not cancel the transaction")


def cancelled_transactions(message: Message) -> pd.DataFrame:
    """For each of :data:`CAUSES`: the cancellation's reasons, and ``message``'s outcome under each of
    :data:`READINGS` (a cancellation given back is redelivered and tried again)."""
    rows = {}
    for cause, fault in CAUSES.items():
        row = {"CancellationReasons (marker, payment)": reasons_for(fault, message)}
        for reading, every in READINGS.items():
            database = KeyValuePayments(table=KeyValueTable(faults=[fault]))
            run = simulate(CancellationReadingHandler(every_cancellation_done=every), [message], database=database)
            row[reading] = run.outcomes().iloc[0]
        rows[cause] = row
    return pd.DataFrame(rows).T.rename_axis("the commit was cancelled because")
