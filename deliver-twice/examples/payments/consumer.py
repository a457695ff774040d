"""A payments consumer as a team writes it: one message, one connection, commit, return (the ack)."""

from __future__ import annotations

import sqlite3
from typing import Any

SCHEMA = """
DROP TABLE IF EXISTS payments; DROP TABLE IF EXISTS processed_messages;
CREATE TABLE payments (order_id INTEGER NOT NULL, amount INTEGER NOT NULL);
CREATE TABLE processed_messages (message_id TEXT PRIMARY KEY);
"""


def create_tables(connection: sqlite3.Connection) -> None:
    connection.executescript(SCHEMA)


def charge(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Charges every delivery: a duplicate charges twice."""
    connection.execute("INSERT INTO payments VALUES (?, ?)", (message["order_id"], message["amount"]))
    connection.commit()


def charge_once(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Records the message ID in the same transaction as the charge; a duplicate finds it and charges nothing."""
    new = connection.execute("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING",
                             (message["message_id"],)).rowcount
    if new:
        connection.execute("INSERT INTO payments VALUES (?, ?)", (message["order_id"], message["amount"]))
    connection.commit()
