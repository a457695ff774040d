"""A bank of consumers written the way teams write them, some broken (each in one class of mistake), some right, on
sqlite3, psycopg, SQLAlchemy sessions and asyncpg: ``tests/test_deliver_twice_bank.py`` plays each with deliver-twice
and counts what it catches and what it flags wrongly. Module-level functions, so a restart empties their memory."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

MESSAGES = [{"message_id": "m-1", "order_id": 1, "amount": 10, "status": "created", "version": 1},
            {"message_id": "m-2", "order_id": 2, "amount": 20, "status": "created", "version": 1},
            {"message_id": "m-3", "order_id": 1, "amount": 5, "status": "paid", "version": 2}]

TABLES = ["CREATE TABLE payments (order_id integer NOT NULL, amount integer NOT NULL, message_id text NOT NULL)",
          "CREATE TABLE inbox (message_id text PRIMARY KEY)",
          "CREATE TABLE keyed_payments (message_id text PRIMARY KEY, order_id integer NOT NULL, amount integer NOT NULL)",
          "CREATE TABLE orders (order_id integer PRIMARY KEY, status text NOT NULL, version integer NOT NULL)",
          "CREATE TABLE audit (message_id text NOT NULL)"]
DROP = "DROP TABLE IF EXISTS payments, inbox, keyed_payments, orders, audit"


@dataclass
class Case:
    """One consumer of the bank: on which database, whether it is broken (and how), how deliver-twice calls it."""

    handle: Callable[..., Any]
    database: str  # "sqlite", "postgres", "sqlalchemy", "asyncpg"
    broken: str | None  # the class of mistake; None: a right consumer
    options: dict[str, Any] = field(default_factory=dict)


BANK: list[Case] = []


def case(database: str, broken: str | None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(handle: Callable[..., Any]) -> Callable[..., Any]:
        BANK.append(Case(handle, database, broken, options))
        return handle
    return register


def sqlite_reset(connection: sqlite3.Connection) -> None:
    connection.executescript(";".join(f"DROP TABLE IF EXISTS {name}" for name in
                                      ("payments", "inbox", "keyed_payments", "orders", "audit")) + ";"
                             + ";".join(TABLES) + ";")


def pg_reset(connection: Any) -> None:
    connection.execute(DROP)
    for statement in TABLES:
        connection.execute(statement)


def pay(connection: Any, message: dict[str, Any], mark: str = "?") -> None:
    connection.execute(f"INSERT INTO payments VALUES ({mark}, {mark}, {mark})",
                       (message["order_id"], message["amount"], message["message_id"]))


# --- sqlite3 ----------------------------------------------------------------------------------------------------

@case("sqlite", "duplicate charged")
def sqlite_naive(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    pay(connection, message)
    connection.commit()


@case("sqlite", None)
def sqlite_inbox(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (message["message_id"],)).rowcount:
        pay(connection, message)
    connection.commit()


@case("sqlite", "check then act, no unique key (race)")
def sqlite_check_then_insert(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    if connection.execute("SELECT 1 FROM payments WHERE message_id = ?", (message["message_id"],)).fetchone():
        return
    pay(connection, message)
    connection.commit()


@case("sqlite", None)
def sqlite_check_then_insert_keyed(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Check first, and a primary key settles a race: the loser's insert fails and its redelivery finds the row."""
    if connection.execute("SELECT 1 FROM keyed_payments WHERE message_id = ?", (message["message_id"],)).fetchone():
        return
    connection.execute("INSERT INTO keyed_payments VALUES (?, ?, ?)",
                       (message["message_id"], message["order_id"], message["amount"]))
    connection.commit()


@case("sqlite", None)
def sqlite_insert_or_ignore(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.execute("INSERT OR IGNORE INTO keyed_payments VALUES (?, ?, ?)",
                       (message["message_id"], message["order_id"], message["amount"]))
    connection.commit()


@case("sqlite", "two transactions (crash between)")
def sqlite_commit_then_record(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    if connection.execute("SELECT 1 FROM inbox WHERE message_id = ?", (message["message_id"],)).fetchone():
        return
    pay(connection, message)
    connection.commit()
    connection.execute("INSERT INTO inbox VALUES (?)", (message["message_id"],))
    connection.commit()


seen: set[str] = set()


@case("sqlite", "memory of the process (restart, race)")
def sqlite_in_memory(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    if message["message_id"] in seen:
        return
    pay(connection, message)
    connection.commit()
    seen.add(message["message_id"])


@case("sqlite", "overwrites newer state (late copy)")
def sqlite_set_status(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.execute("INSERT OR REPLACE INTO orders VALUES (?, ?, ?)",
                       (message["order_id"], message["status"], message["version"]))
    connection.commit()


@case("sqlite", None)
def sqlite_set_status_versioned(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.execute("INSERT INTO orders VALUES (?, ?, ?) ON CONFLICT (order_id) DO UPDATE SET status = "
                       "excluded.status, version = excluded.version WHERE excluded.version > orders.version",
                       (message["order_id"], message["status"], message["version"]))
    connection.commit()


@case("sqlite", "swallows a failure and acks (lost connection)")
def sqlite_swallows(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    try:
        sqlite_inbox(connection, message)
    except Exception:  # noqa: BLE001 - the mistake under test: logged and acked
        connection.rollback()


@case("sqlite", "acks before the commit", ack=True)
def sqlite_ack_first(connection: sqlite3.Connection, message: dict[str, Any], ack: Callable[[], None]) -> None:
    ack()
    sqlite_inbox(connection, message)


@case("sqlite", None, ack=True)
def sqlite_ack_after(connection: sqlite3.Connection, message: dict[str, Any], ack: Callable[[], None]) -> None:
    sqlite_inbox(connection, message)
    ack()


@case("sqlite", "duplicate found by the delivery tag",
      redelivered=lambda message: {**message, "delivery_tag": message.get("delivery_tag", 0) + 1})
def sqlite_by_delivery_tag(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    key = f"{message['message_id']}#{message.get('delivery_tag', 0)}"
    if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (key,)).rowcount:
        pay(connection, message)
    connection.commit()


@case("sqlite", "side effect in another table (audit row per delivery)")
def sqlite_audited(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.execute("INSERT INTO audit VALUES (?)", (message["message_id"],))
    sqlite_inbox(connection, message)


@case("sqlite", None)
def sqlite_with_block(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    with connection:
        if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING",
                              (message["message_id"],)).rowcount:
            pay(connection, message)


@case("sqlite", None)
def sqlite_upsert(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.execute("INSERT INTO keyed_payments VALUES (?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET "
                       "amount = excluded.amount", (message["message_id"], message["order_id"], message["amount"]))
    connection.commit()


@case("sqlite", "inbox row autocommitted before the effect (crash between)")
def sqlite_autocommit_inbox(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    connection.isolation_level = None  # autocommit: each statement its own transaction
    if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (message["message_id"],)).rowcount:
        pay(connection, message)


# --- psycopg ----------------------------------------------------------------------------------------------------

@case("postgres", "duplicate charged")
def pg_naive(connection: Any, message: dict[str, Any]) -> None:
    pay(connection, message, "%s")
    connection.commit()


@case("postgres", None)
def pg_inbox(connection: Any, message: dict[str, Any]) -> None:
    if connection.execute("INSERT INTO inbox VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                          (message["message_id"],)).fetchone():
        pay(connection, message, "%s")
    connection.commit()


@case("postgres", "check then act, no unique key (race)")
def pg_check_then_insert(connection: Any, message: dict[str, Any]) -> None:
    if connection.execute("SELECT 1 FROM payments WHERE message_id = %s", (message["message_id"],)).fetchone():
        return
    pay(connection, message, "%s")
    connection.commit()


@case("postgres", None)
def pg_advisory_lock(connection: Any, message: dict[str, Any]) -> None:
    """Check then act, serialised per message ID by a transaction-level advisory lock."""
    connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (message["message_id"],))
    if not connection.execute("SELECT 1 FROM payments WHERE message_id = %s", (message["message_id"],)).fetchone():
        pay(connection, message, "%s")
    connection.commit()


@case("postgres", "inbox row autocommitted before the effect (crash between)")
def pg_autocommit(connection: Any, message: dict[str, Any]) -> None:
    connection.autocommit = True
    if connection.execute("INSERT INTO inbox VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                          (message["message_id"],)).fetchone():
        pay(connection, message, "%s")


@case("postgres", "memory of the process (restart, race)")
def pg_in_memory(connection: Any, message: dict[str, Any]) -> None:
    if message["message_id"] in seen:
        return
    pay(connection, message, "%s")
    connection.commit()
    seen.add(message["message_id"])


@case("postgres", None)
def pg_transaction_block(connection: Any, message: dict[str, Any]) -> None:
    with connection.transaction():
        if connection.execute("INSERT INTO inbox VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                              (message["message_id"],)).fetchone():
            pay(connection, message, "%s")


@case("postgres", "overwrites newer state (late copy)")
def pg_set_status(connection: Any, message: dict[str, Any]) -> None:
    connection.execute("INSERT INTO orders VALUES (%s, %s, %s) ON CONFLICT (order_id) DO UPDATE SET "
                       "status = excluded.status, version = excluded.version",
                       (message["order_id"], message["status"], message["version"]))
    connection.commit()


# --- SQLAlchemy sessions (on a SQLite file) -----------------------------------------------------------------------

def orm_reset(session: Any) -> None:
    for statement in [f"DROP TABLE IF EXISTS {name}" for name in ("payments", "inbox", "keyed_payments", "orders",
                                                                   "audit")] + TABLES:
        session.execute(text(statement))


def orm_pay(session: Any, message: dict[str, Any]) -> None:
    session.execute(text("INSERT INTO payments VALUES (:order_id, :amount, :message_id)"), message)


@case("sqlalchemy", "duplicate charged")
def orm_naive(session: Any, message: dict[str, Any]) -> None:
    orm_pay(session, message)
    session.commit()


@case("sqlalchemy", None)
def orm_inbox(session: Any, message: dict[str, Any]) -> None:
    if session.execute(text("INSERT INTO inbox VALUES (:message_id) ON CONFLICT DO NOTHING"), message).rowcount:
        orm_pay(session, message)
    session.commit()


@case("sqlalchemy", "two transactions (crash between)")
def orm_commit_then_record(session: Any, message: dict[str, Any]) -> None:
    if session.execute(text("SELECT 1 FROM inbox WHERE message_id = :message_id"), message).first():
        return
    orm_pay(session, message)
    session.commit()
    session.execute(text("INSERT INTO inbox VALUES (:message_id)"), message)
    session.commit()


@case("sqlalchemy", "check then act, no unique key (race)")
def orm_check_then_insert(session: Any, message: dict[str, Any]) -> None:
    if session.execute(text("SELECT 1 FROM payments WHERE message_id = :message_id"), message).first():
        return
    orm_pay(session, message)
    session.commit()


# --- asyncpg ------------------------------------------------------------------------------------------------------

async def asyncpg_reset(connection: Any) -> None:
    await connection.execute(DROP)
    for statement in TABLES:
        await connection.execute(statement)


async def asyncpg_pay(connection: Any, message: dict[str, Any]) -> None:
    await connection.execute("INSERT INTO payments VALUES ($1, $2, $3)", message["order_id"], message["amount"],
                             message["message_id"])


@case("asyncpg", "duplicate charged")
async def asyncpg_naive(connection: Any, message: dict[str, Any]) -> None:
    await asyncpg_pay(connection, message)


@case("asyncpg", None)
async def asyncpg_inbox(connection: Any, message: dict[str, Any]) -> None:
    async with connection.transaction():
        if await connection.fetchval("INSERT INTO inbox VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1",
                                     message["message_id"]):
            await asyncpg_pay(connection, message)


@case("asyncpg", "two transactions (crash between)")
async def asyncpg_commit_then_record(connection: Any, message: dict[str, Any]) -> None:
    if await connection.fetchval("SELECT 1 FROM inbox WHERE message_id = $1", message["message_id"]):
        return
    await asyncpg_pay(connection, message)
    await connection.execute("INSERT INTO inbox VALUES ($1)", message["message_id"])


@case("asyncpg", "check then act, no unique key (race)")
async def asyncpg_check_then_insert(connection: Any, message: dict[str, Any]) -> None:
    async with connection.transaction():
        if await connection.fetchval("SELECT 1 FROM payments WHERE message_id = $1", message["message_id"]):
            return
        await asyncpg_pay(connection, message)
