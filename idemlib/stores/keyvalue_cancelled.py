"""What a cancelled ``TransactWriteItems`` tells the consumer, read three ways (lesson 06).

DynamoDB cancels a transaction for a failed condition, for want of capacity, for a
concurrent transaction on one of its items, for an item too large, and more; only the
first, on the message marker's own action, says the message was handled before. The
same consumer meets each cause once per reading: every cancellation read as *done*;
*done* only on ``ConditionalCheckFailed`` on the marker, the message given back
otherwise; and the three-way rule of :attr:`TransactionCanceled.verdict`, which sends a
message that fails the same way on every attempt to the dead-letter queue.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pandas as pd

from idemlib.handlers import Context, InboxHandler, Steps
from idemlib.messages import Message, parse_charge
from idemlib.sim import RunResult, simulate
from idemlib.stores.keyvalue import (
    DEAD_LETTER,
    DONE,
    REPLY_LOST,
    RETRY,
    KeyValuePayments,
    KeyValueSession,
    KeyValueTable,
    TransactionCanceled,
)
from idemlib.stores.sql import PaymentsSession

CAUSES = {"its first attempt committed, the reply was lost": REPLY_LOST,
          "too little capacity, provisioned table": "ProvisionedThroughputExceeded",
          "too little capacity, on-demand table scaling": "ThrottlingError",
          "a rival consumer's transaction on the marker (in the model, it then fails)": "TransactionConflict",
          "the payment item is too large": "ValidationError"}
"""Causes of a cancelled commit, each by the table fault that makes it (AWS's code for it)."""
EVERY_DONE, MARKER_OR_RETRY, THREE_WAY = ("every cancellation read as done",
                                          "done on the marker's ConditionalCheckFailed, else retry",
                                          "done / retry / dead-letter, by the codes")
READINGS = (EVERY_DONE, MARKER_OR_RETRY, THREE_WAY)
"""Three ways to read a cancellation."""


def action_for(cancelled: TransactionCanceled, reading: str) -> str:
    """What ``reading`` does with ``cancelled``: :data:`DONE`, :data:`RETRY` or :data:`DEAD_LETTER`."""
    if reading == EVERY_DONE:
        return DONE
    if reading == MARKER_OR_RETRY:
        return DONE if cancelled.marker_already_there else RETRY
    return cancelled.verdict


class CancellationReader:
    """A key-value session whose commit reads a cancellation one way: *done* returns (the handler acks), *retry*
    raises (the broker redelivers), *dead-letter* puts the message's ID on ``dead_lettered`` and returns, as a
    consumer does that publishes to a dead-letter queue and then acks."""

    def __init__(self, session: KeyValueSession, reading: str, message_id: str, dead_lettered: list[str]) -> None:
        self._session, self._reading = session, reading
        self._message_id, self._dead_lettered = message_id, dead_lettered

    def commit(self) -> None:
        try:
            self._session.commit()
        except TransactionCanceled as cancelled:
            action = action_for(cancelled, self._reading)
            if action == RETRY:
                raise
            if action == DEAD_LETTER:
                self._dead_lettered.append(self._message_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class CancellationReadingHandler(InboxHandler):
    """The inbox's transaction on the key-value store, with its commit's cancellation read one of :data:`READINGS`."""

    def __init__(self, reading: str) -> None:
        super().__init__()
        self.name = reading
        self.dead_lettered: list[str] = []

    def run(self, ctx: Context) -> Steps:
        reader = CancellationReader(cast(KeyValueSession, ctx.db), self.name, ctx.delivery.message_id,
                                    self.dead_lettered)
        return super().run(replace(ctx, db=cast(PaymentsSession, reader)))


def outcome(run: RunResult, handler: CancellationReadingHandler) -> str:
    """The message's outcome, and who dead-lettered it after how many deliveries, if anyone did."""
    deliveries = len(run.events("delivered"))
    if handler.dead_lettered:
        return f"dead-lettered by the consumer, delivery {deliveries}"
    if run.dead_letters:
        return f"dead-lettered by the broker after {deliveries} deliveries"
    return str(run.outcomes().iloc[0])


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
    :data:`READINGS` (a cancellation given back is redelivered and tried again, up to the broker's limit)."""
    rows = {}
    for cause, fault in CAUSES.items():
        row = {"CancellationReasons (marker, payment)": reasons_for(fault, message)}
        for reading in READINGS:
            handler = CancellationReadingHandler(reading)
            database = KeyValuePayments(table=KeyValueTable(faults=[fault]))
            row[reading] = outcome(simulate(handler, [message], database=database), handler)
        rows[cause] = row
    return pd.DataFrame(rows).T.rename_axis("the commit was cancelled because")
