"""Two plain payments consumers on PostgreSQL, written with psycopg and nothing of the course's.

The kind of consumer a reader already has: a function that takes a connection and
one message, charges the order, and commits. One is naive; the other keeps an
inbox, the ``processed_messages`` table, in the same transaction; a third is the
inbox that also e-mails a receipt, which no database records. Lesson 11 runs
:func:`~idemlib.operating.testing.assert_idempotent` on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from idemlib.stores.sql import inbox_table

SCHEMA = f"""
    DROP TABLE IF EXISTS payments, processed_messages;
    CREATE TABLE payments (order_id integer NOT NULL, amount integer NOT NULL, message_id text NOT NULL);
    {inbox_table("text")}
"""


def reset(connection: Any) -> None:
    """Empty tables, as before any message."""
    connection.execute(SCHEMA)


def payments(connection: Any) -> list[tuple[int, int]]:
    """The business state: every payment as (order, dollars), in a stable order."""
    return connection.execute("SELECT order_id, amount FROM payments ORDER BY order_id, amount").fetchall()


def naive_consumer(connection: Any, message: Any) -> None:
    """Charge the order and commit: every delivery charges."""
    body = message.body
    connection.execute("INSERT INTO payments VALUES (%s, %s, %s)", (body["order_id"], body["amount"], message.message_id))
    connection.commit()


def inbox_consumer(connection: Any, message: Any) -> None:
    """Record the message ID, and charge only if it was new, in one transaction."""
    body = message.body
    with connection.transaction():
        new = connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                                 (message.message_id,)).fetchone()
        if new:
            connection.execute("INSERT INTO payments VALUES (%s, %s, %s)",
                               (body["order_id"], body["amount"], message.message_id))


def receipt_consumer(sent: list[str]) -> Callable[[Any, Any], Iterator[str]]:
    """The inbox consumer, plus a receipt e-mailed before the commit: appended to ``sent``, seen by no database.

    A generator: it names the step ``"e-mail the receipt"`` the database cannot see, so a
    test can crash the consumer there too.
    """
    def inbox_consumer_with_receipt(connection: Any, message: Any) -> Iterator[str]:
        body = message.body
        with connection.transaction():
            new = connection.execute("INSERT INTO processed_messages VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                                     (message.message_id,)).fetchone()
            if new:
                connection.execute("INSERT INTO payments VALUES (%s, %s, %s)",
                                   (body["order_id"], body["amount"], message.message_id))
                yield "e-mail the receipt"
                sent.append(message.message_id)
    return inbox_consumer_with_receipt
