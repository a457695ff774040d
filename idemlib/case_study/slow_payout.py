"""The slow payout (lesson 12): the payment system answers after the broker's lease has run out.

The broker cannot tell a consumer waiting for the payment system from one that
died: when the lease runs out, it hands ``m-42`` to a second consumer while the
first payout is still running. Lesson 09's in-progress record is run here on the
account service, unchanged: :class:`PayoutInProgress` is lesson 09's
:class:`~idemlib.long_work.inprogress.InProgressHandler` reading the open-account
message, on a database that holds both the idempotency records and the loan
accounts. The loan account is opened in the transaction that marks the record
completed, as lesson 09 writes its local row.

The model's assumption: the payment system does the payout at the moment it
answers, ``PAYOUT_SECONDS`` after the call was made. Every second here is a
second of the simulator's clock.
"""

from __future__ import annotations

import math

import pandas as pd

from idemlib.case_study.design_review import Design
from idemlib.case_study.loan_bank import LoanBank, LoanSession
from idemlib.case_study.mortgage import APPLICATION_42, parse_open_account
from idemlib.long_work.inprogress import (
    BACKED_OFF,
    LEASE_SECONDS,
    TAKEN_OVER,
    InProgressHandler,
    RecordsDuckDB,
    RecordSession,
    run_long,
)
from idemlib.messages import Charge, Message
from idemlib.sim import DEFAULT_STEP_SECONDS, RunResult, simulate

PAYOUT_SECONDS = 45.0
"""How long the payment system takes to answer a payout: one and a half leases of 30 s."""


class LoanRecordSession(RecordSession, LoanSession):
    """The account service's session with lesson 09's records: its local row (``charge``) opens the loan account."""


class LoanRecordsBank(RecordsDuckDB, LoanBank):
    """The account service's DuckDB database with lesson 09's ``idempotency_records`` table beside the accounts."""

    def session(self) -> LoanRecordSession:
        return LoanRecordSession(self.connect(), self)


class PayoutInProgress(InProgressHandler):
    """Lesson 09's in-progress handler on the account service: claim ``m-42``, pay the loan out, open the account
    with the completion, ack. Its provider key is lesson 09's derived ``<message ID>:charge``."""

    def read(self, message: Message) -> Charge:
        order = parse_open_account(message)
        return Charge(order.application_id, order.amount)


def _later_deliveries(result: RunResult) -> str:
    """What the deliveries after the first did, in the trace's words."""
    later = result.trace[result.trace["delivery"] >= 2]
    if later.empty:
        return "none came"
    events = set(later["event"])
    if BACKED_OFF in events:
        return "found the claim in progress and backed off: no call"
    if TAKEN_OVER in events:
        return "found the claim past its deadline, took it over and called again"
    if "conflict" in events:
        # DuckDB checks the twin's inbox row against the committed one at commit: a unique violation, not a lock wait.
        failures = " ".join(later.loc[later["event"] == "conflict", "detail"].astype(str))
        why = "on the ID's unique key" if "UNIQUE" in failures.upper() else "(a write conflict)"
        return f"found no ID yet, called the payment system too, then failed at its commit {why}"
    return ", ".join(sorted(events))


def _row(label: str, result: RunResult, payouts: int, accounts: int) -> dict[str, object]:
    return {"design": label, "deliveries": len(result.events("delivered")),
            "the deliveries after the first": _later_deliveries(result),
            "payout calls": len(result.events("provider answered")), "payouts": payouts, "accounts": accounts,
            "dead-lettered": len(result.dead_letters)}


def slow_payout(payout_seconds: float = PAYOUT_SECONDS, *, lease: float = LEASE_SECONDS,
                deadline_seconds: float = 2 * LEASE_SECONDS) -> pd.DataFrame:
    """``m-42`` with two consumers, no fault, and a payout that takes ``payout_seconds`` to answer.

    Five ways: the lesson's inbox (its payout called inside the open transaction), with its
    derived key and with none; lesson 09's in-progress record with a claim deadline of half
    the payout; with ``deadline_seconds`` (two leases, as lesson 09 sets it: longer than the
    payout, over well before the broker stops redelivering); and the same with a lease sized
    to outlast the payout. One row each: deliveries, what the deliveries after the first did,
    payout calls, loans paid out, accounts opened, messages dead-lettered.
    """
    rows = []
    for inbox in (Design("inbox"), Design("inbox, no key", payout_key="none")):
        payments, bank = inbox.payment_system(), inbox.bank()
        result = simulate(inbox.service(payments), (APPLICATION_42,), database=bank, provider=payments,
                          consumers=2, visibility_timeout=lease, step_seconds={"pay out": payout_seconds})
        key = "no key" if inbox.payout_key == "none" else "derived key"
        rows.append(_row(f"inbox, payout inside its transaction, {key}; lease {lease:g} s", result,
                         payments.payouts, len(bank.accounts())))
    # A lease that outlasts the payout and the few one-second steps around it, in whole leases.
    sized = math.ceil((payout_seconds + 5 * DEFAULT_STEP_SECONDS) / lease) * lease
    short = payout_seconds / 2
    database = LoanRecordsBank()
    for label, deadline, seconds in (
            (f"in-progress record, deadline {short:g} s (shorter than the payout); lease {lease:g} s", short, lease),
            (f"in-progress record, deadline {deadline_seconds:g} s; lease {lease:g} s", deadline_seconds, lease),
            (f"in-progress record, deadline {deadline_seconds:g} s; lease {sized:g} s, sized to outlast the payout",
             deadline_seconds, sized)):
        run = run_long(PayoutInProgress(deadline), (APPLICATION_42,), consumers=2, lease=seconds,
                       call_seconds=payout_seconds, database=database)
        rows.append(_row(label, run.result, run.card_charges, run.local_rows))
    return pd.DataFrame(rows).set_index("design")
