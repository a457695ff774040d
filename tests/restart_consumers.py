"""Consumers that remember in Python, defined at module level so deliver-twice can restart them (run this module
again, its memory empty): used by tests/test_deliver_twice_sqlite.py."""

from __future__ import annotations

import sqlite3
from typing import Any

seen: set[str] = set()


def remembers_after_commit(connection: sqlite3.Connection, message: dict[str, Any]) -> None:
    """Skips a message whose ID this process has seen; remembers it once the payment is committed."""
    if message["message_id"] in seen:
        return
    connection.execute("INSERT INTO payments VALUES (?, ?)", (message["message_id"], message["amount"]))
    connection.commit()
    seen.add(message["message_id"])


class Remembering:
    """The same mistake as an object's method: ``consumer.handle`` is found again in the restarted module."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def handle(self, connection: sqlite3.Connection, message: dict[str, Any]) -> None:
        if message["message_id"] in self.seen:
            return
        self.seen.add(message["message_id"])  # before the work: one process skips its own redelivery
        connection.execute("INSERT INTO payments VALUES (?, ?)", (message["message_id"], message["amount"]))
        connection.commit()


consumer = Remembering()
