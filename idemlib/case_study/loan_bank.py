"""The account service's database in lesson 12: loan accounts, approved applications, its inbox and payout intents.

:class:`LoanBank` is a DuckDB database the simulator can run the account service
on. The simulator counts effects as rows of a ``payments`` table; the bank gives it
the opened loan accounts instead, so "charged twice" reads here as "two accounts
for one application".
"""

from __future__ import annotations

import pandas as pd

from idemlib.stores.duckdb_store import DuckDBPayments
from idemlib.stores.sql import PaymentsSession

LOAN_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS loan_accounts (
           application_id INTEGER NOT NULL,
           amount         INTEGER NOT NULL,
           message_id     VARCHAR
       )""",
    """CREATE TABLE IF NOT EXISTS applications (
           application_id INTEGER PRIMARY KEY,
           status         VARCHAR NOT NULL,
           version        INTEGER NOT NULL
       )""",
    # When each inbox ID was saved, so the service can prune IDs older than it keeps them.
    """CREATE TABLE IF NOT EXISTS inbox_saved_at (
           message_id VARCHAR PRIMARY KEY,
           saved_at   DOUBLE NOT NULL
       )""",
    # A reconciling service's record of a payout it means to make, written with the account before the call:
    # 'intended' until the payout's answer is recorded, then 'paid'. Never pruned with the inbox.
    """CREATE TABLE IF NOT EXISTS payout_intents (
           application_id INTEGER PRIMARY KEY,
           amount         INTEGER NOT NULL,
           status         VARCHAR NOT NULL
       )""",
)


class LoanSession(PaymentsSession):
    """The account service's connection: the payments session's transactions and inbox, plus loan accounts."""

    def charge(self, order_id: int, amount: int, message_id: str) -> None:
        """Open a loan account (the effect this service exists for); the simulator calls every effect a charge."""
        self.open_account(order_id, amount, message_id)

    def open_account(self, application_id: int, amount: int, message_id: str) -> None:
        """Insert the loan account row."""
        p = self._p
        self._run(f"INSERT INTO loan_accounts VALUES ({p}, {p}, {p})", (application_id, amount, message_id))

    def open_account_once(self, application_id: int, amount: int, message_id: str) -> bool:
        """Open the account unless the application has one: False means "already done".

        Relies on the unique index on ``application_id`` that :class:`LoanBank` creates
        when ``unique_per_application`` is set.
        """
        p = self._p
        return bool(self._run(f"INSERT INTO loan_accounts VALUES ({p}, {p}, {p}) ON CONFLICT DO NOTHING "
                              "RETURNING application_id", (application_id, amount, message_id), rows=True))

    def save_id_at(self, message_id: str, moment: float) -> bool:
        """Record ``message_id`` in the inbox, noting when: False if it is there already (a twin committed it)."""
        p = self._p
        if not self.record_message(message_id):
            return False
        self._run(f"INSERT INTO inbox_saved_at VALUES ({p}, {p}) ON CONFLICT DO NOTHING", (message_id, moment))
        return True

    def prune_inbox(self, before: float) -> None:
        """Delete the inbox IDs saved before ``before`` (lesson 10's pruning): the service forgets them."""
        p = self._p
        self._run(f"DELETE FROM processed_messages WHERE message_id IN "
                  f"(SELECT message_id FROM inbox_saved_at WHERE saved_at < {p})", (before,))
        self._run(f"DELETE FROM inbox_saved_at WHERE saved_at < {p}", (before,))

    def record_intent(self, application_id: int, amount: int) -> bool:
        """Write "payout of ``amount`` intended for ``application_id``"; False if an earlier delivery wrote it."""
        p = self._p
        return bool(self._run(f"INSERT INTO payout_intents VALUES ({p}, {p}, 'intended') ON CONFLICT DO NOTHING "
                              "RETURNING application_id", (application_id, amount), rows=True))

    def intent_status(self, application_id: int) -> str | None:
        """``'intended'``, ``'paid'``, or None when no payout was ever intended for ``application_id``."""
        rows = self._run(f"SELECT status FROM payout_intents WHERE application_id = {self._p}", (application_id,),
                         rows=True)
        return rows[0][0] if rows else None

    def record_payout(self, application_id: int) -> None:
        """Mark the intended payout made: later deliveries neither look it up nor send it."""
        self._run(f"UPDATE payout_intents SET status = 'paid' WHERE application_id = {self._p}", (application_id,))

    def advance_application(self, application_id: int, expected_version: int) -> bool:
        """Move the application on from ``expected_version``; False if it has moved already (optimistic concurrency)."""
        p = self._p
        return bool(self._run(
            f"UPDATE applications SET status = 'account opened', version = version + 1 "
            f"WHERE application_id = {p} AND version = {p} RETURNING application_id",
            (application_id, expected_version), rows=True))


class LoanBank(DuckDBPayments):
    """The account service's DuckDB database: loan accounts, approved applications and the inbox.

    ``unique_per_application`` adds the business constraint "one account per
    application". ``payments()`` returns the opened accounts, which is what the
    simulator counts as the effect.
    """

    engine = "DuckDB"

    def __init__(self, *, unique_per_application: bool = False, approved: tuple[int, ...] = (42,)) -> None:
        super().__init__()
        for statement in LOAN_SCHEMA:
            self._reader.execute(statement)
        if unique_per_application:
            self._reader.execute("CREATE UNIQUE INDEX one_account_per_application ON loan_accounts (application_id)")
        self._approved = approved
        self._approve()

    def _approve(self) -> None:
        for application_id in self._approved:
            self._reader.execute("INSERT INTO applications VALUES (?, 'approved', 1)", (application_id,))

    def session(self) -> LoanSession:
        return LoanSession(self.connect(), self)

    def empty(self) -> None:
        super().empty()
        for table in ("loan_accounts", "applications", "inbox_saved_at", "payout_intents"):
            self._reader.execute(f"DELETE FROM {table}")
        self._approve()

    def payments(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows("SELECT application_id, amount, message_id FROM loan_accounts"),
                            columns=["order_id", "amount", "message_id"])

    def total_charged(self) -> int:
        return int(self._rows("SELECT coalesce(sum(amount), 0) FROM loan_accounts")[0][0])

    def accounts(self) -> pd.DataFrame:
        """The opened loan accounts, as the bank sees them."""
        return self.payments().rename(columns={"order_id": "application_id"})

    def intents(self) -> pd.DataFrame:
        """The payout intents a reconciling service recorded, with their status."""
        return pd.DataFrame(self._rows("SELECT application_id, amount, status FROM payout_intents ORDER BY 1"),
                            columns=["application_id", "amount", "status"])
