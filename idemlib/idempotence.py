"""What "idempotent" means, shown on a real database and a lift button.

An operation is idempotent when performing it several times leaves the system in the
same state as performing it once. What counts is the state, not the answer: a repeat
may reply differently or write a log line, as long as the data ends up the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pandas as pd

from idemlib.stores.sql import single_value

SETUP = (
    "CREATE TABLE accounts (account_id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
    "INSERT INTO accounts VALUES (7, 0)",
    "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, status VARCHAR NOT NULL)",
    "INSERT INTO orders VALUES (1042, 'NEW')",
    "CREATE TABLE payments (order_id INTEGER NOT NULL, amount INTEGER NOT NULL, message_id VARCHAR UNIQUE)",
    "CREATE TABLE carts (cart_id INTEGER PRIMARY KEY)",
    "INSERT INTO carts VALUES (9), (10)",
    "CREATE SEQUENCE payment_numbers START 1",
)
"""A scratch database: account 7 with a zero balance, order 1042 not yet paid, no payments, two carts,
and a sequence that numbers payments.

``payments.message_id`` is unique, as an inbox's key is.
"""

TABLES = ("accounts", "orders", "payments", "carts")

STATEMENTS = {
    "set the status": "UPDATE orders SET status = 'PAID' WHERE order_id = 1042",
    "take 40 off the balance": "UPDATE accounts SET balance = balance - 40 WHERE account_id = 7",
    "record the payment under the next number": "INSERT INTO payments (message_id, order_id, amount) VALUES "
                                                "('pay-' || CAST(nextval('payment_numbers') AS VARCHAR), 1042, 40)",
    "upsert the status": "INSERT INTO orders (order_id, status) VALUES (1042, 'PAID') "
                         "ON CONFLICT (order_id) DO UPDATE SET status = excluded.status",
    "delete a cart": "DELETE FROM carts WHERE cart_id = 9",
    "add cart 11 unless it exists": "INSERT INTO carts SELECT 11 WHERE NOT EXISTS (SELECT 1 FROM carts WHERE cart_id = 11)",
}
"""Lesson 00's second exercise: statements a handler might run, some safe to repeat and some not.

The payment carries an ID under the unique key, as exercise 1's inserts do, but a new one each run."""

INSERTS = {
    "ignore a repeat": "INSERT INTO payments (message_id, order_id, amount) VALUES ('m-7f3', 1042, 40) "
                       "ON CONFLICT (message_id) DO NOTHING",
    "fail on a repeat": "INSERT INTO payments (message_id, order_id, amount) VALUES ('m-7f3', 1042, 40)",
    "add on a repeat": "INSERT INTO payments (message_id, order_id, amount) VALUES ('m-7f3', 1042, 40) "
                       "ON CONFLICT (message_id) DO UPDATE SET amount = payments.amount + excluded.amount",
}
"""Lesson 00's first exercise: three ways to insert m-7f3's payment under its message ID.

Their repeats answer differently (no row written, a duplicate-key error, one row changed); whether
each is idempotent depends only on the rows they leave.
"""


def scratch() -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB database holding :data:`SETUP`."""
    db = duckdb.connect(":memory:")
    for statement in SETUP:
        db.execute(statement)
    return db


def state(db: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, sorted: what "the same state" is compared on."""
    return {table: sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr) for table in TABLES}


def balances_after(statement: str, runs: int = 3) -> pd.Series:
    """Account 7's balance after each of ``runs`` runs of ``statement`` (it starts at 0)."""
    db = scratch()
    balances = []
    for _ in range(runs):
        db.execute(statement)
        balances.append(single_value(db.execute("SELECT balance FROM accounts WHERE account_id = 7")))
    return pd.Series(balances, index=pd.RangeIndex(1, runs + 1, name="after run"), name="balance (CZK)")


def balance_after_each(statements: dict[str, str]) -> pd.Series:
    """Account 7's balance after each of ``statements``, run in order on one scratch database (it starts at 0)."""
    db = scratch()
    balances = {}
    for label, statement in statements.items():
        db.execute(statement)
        balances[label] = single_value(db.execute("SELECT balance FROM accounts WHERE account_id = 7"))
    return pd.Series(balances, name="balance (CZK)").rename_axis("after")


def repeat_answers(statement: str, runs: int = 3) -> list[str]:
    """What each of ``runs`` runs of ``statement`` on one scratch database answered: rows written, or the error."""
    db = scratch()
    said = []
    for _ in range(runs):
        try:
            written = single_value(db.execute(statement))
            said.append(f"{written} row{'' if written == 1 else 's'} written")
        except duckdb.Error as error:
            said.append(f"error: {type(error).__name__}")
    return said


def is_idempotent(statement: str, runs: int = 3) -> bool:
    """Whether ``runs`` runs of ``statement`` leave the scratch database as one run does.

    A repeat that fails with an error has answered differently, not changed the data: in
    autocommit a failed statement leaves every row as it was, so only the rows are compared.
    """
    once, many = scratch(), scratch()
    once.execute(statement)
    for _ in range(runs):
        try:
            many.execute(statement)
        except duckdb.Error:
            pass  # an error is an answer; the rows it leaves are what the definition compares
    return state(once) == state(many)


@dataclass
class Lift:
    """A lift's call button: pressing it again answers differently and is logged, but calls no second lift."""

    trips: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def press(self, floor: int) -> str:
        """Call the lift to ``floor``; the answer says whether this press changed anything."""
        if floor in self.trips:
            self.log.append(f"button on floor {floor} pressed again")
            return f"already on its way to floor {floor}"
        self.trips.append(floor)
        self.log.append(f"lift called to floor {floor}")
        return f"on its way to floor {floor}"
