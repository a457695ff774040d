"""deliver-twice on async consumers: ``async def handle`` on asyncpg and on psycopg's AsyncConnection, awaited, each
statement a step, a death before any of them a crash the redelivery must survive."""

from __future__ import annotations

from typing import Any

import asyncpg
import psycopg
import pytest

from deliver_twice import NotIdempotent, assert_idempotent, idempotency_report

pytest_plugins = ["idemlib.operating.pytest_plugin"]

MESSAGES = [{"message_id": f"m-{n}", "order_id": 100 + n % 4, "amount": 5 + n} for n in range(20)]
SCHEMA = ("DROP TABLE IF EXISTS payments, processed_messages; "
          "CREATE TABLE payments (order_id integer NOT NULL, amount integer NOT NULL); "
          "CREATE TABLE processed_messages (message_id text PRIMARY KEY)")


async def asyncpg_inbox(connection: Any, message: dict[str, Any]) -> None:
    async with connection.transaction():
        new = await connection.fetchval("INSERT INTO processed_messages VALUES ($1) ON CONFLICT DO NOTHING "
                                        "RETURNING message_id", message["message_id"])
        if new is not None:
            await connection.execute("INSERT INTO payments VALUES ($1, $2)", message["order_id"], message["amount"])


async def asyncpg_naive(connection: Any, message: dict[str, Any]) -> None:
    await connection.execute("INSERT INTO payments VALUES ($1, $2)", message["order_id"], message["amount"])


async def asyncpg_commit_then_record(connection: Any, message: dict[str, Any]) -> None:
    """Two transactions: the payment commits before the ID is recorded, so a death between them charges twice."""
    if await connection.fetchval("SELECT 1 FROM processed_messages WHERE message_id = $1", message["message_id"]):
        return
    await connection.execute("INSERT INTO payments VALUES ($1, $2)", message["order_id"], message["amount"])
    await connection.execute("INSERT INTO processed_messages VALUES ($1)", message["message_id"])


async def asyncpg_reset(connection: Any) -> None:
    await connection.execute(SCHEMA)


async def psycopg_inbox(connection: Any, message: dict[str, Any]) -> None:
    cursor = await connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING",
                                      (message["message_id"],))
    if cursor.rowcount:
        await connection.execute("INSERT INTO payments VALUES (%s, %s)", (message["order_id"], message["amount"]))
    await connection.commit()


async def psycopg_naive(connection: Any, message: dict[str, Any]) -> None:
    async with connection.transaction():
        await connection.execute("INSERT INTO payments VALUES (%s, %s)", (message["order_id"], message["amount"]))


def test_an_asyncpg_inbox_passes_over_20_messages_and_the_naive_one_fails(postgres_schema):
    def connect() -> Any:
        return asyncpg.connect(postgres_schema.url, server_settings={"search_path": postgres_schema.name})

    report = assert_idempotent(asyncpg_inbox, MESSAGES, connect=connect, reset=asyncpg_reset)
    assert [row.scenario for row in report if row.scenario.startswith("crash")] == [
        "crash before step 1 of 3: INSERT INTO processed_messages", "crash before step 2 of 3: INSERT INTO payments",
        "crash before step 3 of 3: COMMIT"], "every awaited statement and the block's commit are steps"
    assert report.not_played[0].startswith("two deliveries at once: not played for an async connection")
    with pytest.raises(NotIdempotent, match="'asyncpg_naive' is not idempotent"):
        assert_idempotent(asyncpg_naive, MESSAGES[:3], connect=connect, reset=asyncpg_reset)
    split = idempotency_report(asyncpg_commit_then_record, MESSAGES[:3], connect=connect, reset=asyncpg_reset)
    assert [row.scenario for row in split.failed()] == [
        "crash before step 3 of 3: INSERT INTO processed_messages",
        "connection lost before step 3 of 3: INSERT INTO processed_messages (an error the consumer can catch)"]


def test_psycopg_async_consumers_are_awaited_and_judged(postgres_schema):
    def connect() -> Any:
        return psycopg.AsyncConnection.connect(postgres_schema.url, options=f"-c search_path={postgres_schema.name}")

    def reset(connection: Any) -> Any:
        return connection.execute(SCHEMA)  # a coroutine: reset may be async too

    assert assert_idempotent(psycopg_inbox, MESSAGES, connect=connect, reset=reset).passed
    failed = idempotency_report(psycopg_naive, MESSAGES[:2], connect=connect, reset=reset).failed()
    assert failed[0].scenario == "every message twice in a row (the ack lost)"
    assert ".payments: extra [(100, 5), (101, 6)]" in failed[0].differs
