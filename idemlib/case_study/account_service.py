"""The account service on a real PostgreSQL, written with psycopg: where the duplicate check is not enough.

Moving the check "is there an account for application 42?" inside the transaction
feels like the fix for mistake 1. At PostgreSQL's default isolation, READ
COMMITTED, it is not: two deliveries at once both read before either commits, both
find nothing, both insert. What settles the race is a unique key: the second
insert waits for the first transaction, then fails, and its redelivery finds the
account. :func:`two_deliveries_at_once` plays that interleaving on the server, statement by statement, with
the race of lesson 11's tool (``deliver_twice.two_at_once``), which races plain driver functions like these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import psycopg

from idemlib.case_study.mortgage import APPLICATION_42, open_account_message
from idemlib.operating.steps import Connection, Watch, deliver, two_at_once
from idemlib.operating.testing import idempotency_report
from idemlib.stores.sql import inbox_table, single_value


def tables(*, unique_application: bool) -> Callable[[Connection], None]:
    """A ``reset`` that creates an empty ``loan_accounts`` table, with or without one account per application."""
    key = ", UNIQUE (application_id)" if unique_application else ""

    def reset(connection: Connection) -> None:
        connection.execute("DROP TABLE IF EXISTS loan_accounts")
        connection.execute(f"CREATE TABLE loan_accounts (application_id integer NOT NULL, amount integer NOT NULL, "
                           f"message_id text NOT NULL{key})")
    return reset


def accounts(connection: Connection) -> list[tuple[int, int]]:
    """The business state: every loan account as (application, dollars)."""
    return connection.execute("SELECT application_id, amount FROM loan_accounts ORDER BY 1, 2").fetchall()


def check_inside(connection: Connection, message: Any) -> None:
    """Open the account unless the application has one: the check and the insert in one transaction."""
    body = message.body
    with connection.transaction():
        found = connection.execute("SELECT 1 FROM loan_accounts WHERE application_id = %s",
                                   (body["application_id"],)).fetchone()
        if found is None:
            connection.execute("INSERT INTO loan_accounts VALUES (%s, %s, %s)",
                               (body["application_id"], body["amount"], message.message_id))


def _outcome(error: BaseException | None) -> str:
    return "acknowledged" if error is None else f"failed: {type(error).__name__}, rolled back, given back to the broker"


def two_deliveries_at_once(connect: Callable[[], Connection], message: Any, *, unique_application: bool,
                           handle: Callable[[Connection, Any], Any] = check_inside) -> pd.DataFrame:
    """Two deliveries of ``message`` at once on PostgreSQL: A checks and pauses, B runs, A goes on; then any
    delivery that failed is redelivered. One row per stretch of work, and the accounts opened."""
    setup = connect()
    try:
        tables(unique_application=unique_application)(setup)
        setup.commit()
        isolation = single_value(setup.execute("SHOW transaction_isolation"))
    finally:
        setup.close()
    played = two_at_once(handle, connect, message, pause_before=2)
    rows = [("A", played.first_steps[:1], "found no account; paused"),
            ("B", played.second_steps,
             "waits for A's insert to commit" if played.second_waited else _outcome(played.second)),
            ("A", played.first_steps[1:], _outcome(played.first))]
    if played.second_waited:
        rows.append(("B", [], "the wait ends: " + _outcome(played.second)))
    for name, error in (("A", played.first), ("B", played.second)):
        if error is not None:
            watch = Watch()
            again = deliver(handle, connect, message, watch)
            rows.append((f"{name}, redelivered", watch.steps, "found the account; " + _outcome(again)))
    check = connect()
    try:
        opened = len(accounts(check))
    finally:
        check.close()
    table = pd.DataFrame([(who, "; ".join(steps) or "(no new statement)", what) for who, steps, what in rows],
                         columns=["delivery", "statements", "what happened"])
    table.attrs.update(isolation=isolation, accounts=opened)
    return table


def at_isolation(connect: Callable[[], Connection], level: str) -> Callable[[], Connection]:
    """``connect``, with every transaction of the connections it opens run at ``level`` ("repeatable read",
    "serializable"): psycopg sends the level with each BEGIN, so the handler's statements stay the same."""
    isolation = psycopg.IsolationLevel[level.upper().replace(" ", "_")]

    def connect_at_level() -> Connection:
        connection = connect()
        connection.isolation_level = isolation
        return connection
    return connect_at_level


def stricter_levels(connect: Callable[[], Connection], message: Any) -> pd.DataFrame:
    """:func:`two_deliveries_at_once` without the unique key at PostgreSQL's two stricter isolation levels: one row each, with the
    level the server reports, what became of A after B had committed, and the accounts opened."""
    rows = []
    for level in ("repeatable read", "serializable"):
        played = two_deliveries_at_once(at_isolation(connect, level), message, unique_application=False)
        rows.append((played.attrs["isolation"], played.iloc[2]["what happened"], played.attrs["accounts"]))
    return pd.DataFrame(rows, columns=["isolation (no unique key)", "A, after B committed", "accounts"]
                        ).set_index("isolation (no unique key)")


def deliver_twice(connect: Callable[[], Connection], *, unique_application: bool) -> pd.DataFrame:
    """Lesson 11's deliver-twice report for :func:`check_inside`, with or without the unique key.

    Two approvals (application 42, and 7 with an ID of another length), so a consumer that
    only ever meets one message cannot pass by accident.
    """
    messages = [APPLICATION_42, open_account_message("m-7-approved", 7, 120_000)]
    return idempotency_report(check_inside, messages, connect=connect,
                              reset=tables(unique_application=unique_application), state=accounts)


INBOX_SCHEMA = (
    "DROP TABLE IF EXISTS loan_accounts, processed_messages",
    "CREATE TABLE loan_accounts (application_id integer NOT NULL, amount integer NOT NULL, message_id text NOT NULL)",
    inbox_table("text"),
)


def _inbox_tables(connection: Connection) -> None:
    for statement in INBOX_SCHEMA:
        connection.execute(statement)


def open_account_once(connection: Connection, message: Any) -> bool:
    """Inside the caller's transaction: record the message ID and, if it is new, open the account."""
    body = message.body
    new = connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                             (message.message_id,)).fetchone()
    if new:
        connection.execute("INSERT INTO loan_accounts VALUES (%s, %s, %s)",
                           (body["application_id"], body["amount"], message.message_id))
    return bool(new)


def pay_inside(connection: Connection, message: Any) -> Iterator[str]:
    """The inbox, with the payout called while the transaction is open (it yields the call's step)."""
    with connection.transaction():
        if open_account_once(connection, message):
            yield "pay out (key m-42:payout)"


def pay_first(connection: Connection, message: Any) -> Iterator[str]:
    """The payout called first, with its derived key, and the transaction opened afterwards."""
    yield "pay out (key m-42:payout)"
    with connection.transaction():
        open_account_once(connection, message)


def payout_placement(connect: Callable[[], Connection]) -> pd.DataFrame:
    """Two deliveries of ``m-42`` at once, the first held at its payout call (a slow payment system), with the call
    inside the open transaction and before it: what the first session is doing meanwhile, whether the second
    waits for it, how many calls go out, and the accounts opened."""
    rows = []
    for name, handle in (("call inside the open transaction", pay_inside), ("call first, then the transaction", pay_first)):
        setup = connect()
        try:
            _inbox_tables(setup)
            setup.commit()
        finally:
            setup.close()
        step = 3 if handle is pay_inside else 1  # the payout: after the two inserts, or first of all
        played = two_at_once(handle, connect, APPLICATION_42, pause_before=step)
        calls = sum(any("pay out" in step for step in steps) for steps in (played.first_steps, played.second_steps))
        check = connect()
        try:
            opened = len(accounts(check))
        finally:
            check.close()
        rows.append((name, played.first_state, "waits for the first" if played.second_waited else "does not wait",
                     calls, opened))
    return pd.DataFrame(rows, columns=["payout", "first session during its call", "second delivery",
                                       "payout calls (one key)", "accounts"]).set_index("payout")
