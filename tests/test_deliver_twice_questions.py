"""Lesson 12's questions 2 and 5 for one's own consumer, with deliver-twice: a fake payment client records the key of
every call while every duplicate scenario plays; a consumer whose key stays the same on retry passes, one that
makes a key up per call is caught."""

from __future__ import annotations

import functools
import sqlite3
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from deliver_twice import assert_idempotent

MESSAGES = [{"message_id": f"m-{n}", "application": 40 + n, "amount": 1000 * n} for n in range(1, 6)]


class RecordingPayments:
    """A payment system that deduplicates by key, as Stripe's does, and records every call's key."""

    def __init__(self) -> None:
        self.keys: dict[int, set[str | None]] = defaultdict(set)
        self.paid: dict[str, int] = {}

    def payout(self, application: int, amount: int, key: str | None) -> None:
        self.keys[application].add(key)
        self.paid.setdefault(key or str(uuid.uuid4()), amount)


def reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS accounts; DROP TABLE IF EXISTS inbox; "
                             "CREATE TABLE accounts (application, amount); CREATE TABLE inbox (message_id PRIMARY KEY);")


def consumer(payments: RecordingPayments, key: Callable[[dict[str, Any]], str | None]) -> Callable[..., Iterator[str]]:
    def open_account(connection: sqlite3.Connection, message: dict[str, Any]) -> Iterator[str]:
        if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (message["message_id"],)).rowcount:
            connection.execute("INSERT INTO accounts VALUES (?, ?)", (message["application"], message["amount"]))
            yield "call payments"  # a crash point the database does not see
            payments.payout(message["application"], message["amount"], key(message))
        connection.commit()
    return open_account


def test_a_key_made_from_the_message_stays_the_same_on_every_retry_and_is_passed_on(tmp_path):
    payments = RecordingPayments()
    connect = functools.partial(sqlite3.connect, tmp_path / "bank.db")
    report = assert_idempotent(consumer(payments, lambda message: f"{message['message_id']}:payout"), MESSAGES,
                               connect=connect, reset=reset)
    assert any("call payments" in row.scenario for row in report)
    assert all(len(keys) == 1 and None not in keys for keys in payments.keys.values())  # questions 2 and 5: yes
    assert len(payments.paid) == len(MESSAGES)


def test_a_key_made_up_per_call_or_none_at_all_is_caught_by_the_recorded_keys(tmp_path):
    connect = functools.partial(sqlite3.connect, tmp_path / "bank.db")
    for key in (lambda message: str(uuid.uuid4()), lambda message: None):
        payments = RecordingPayments()
        assert_idempotent(consumer(payments, key), MESSAGES, connect=connect, reset=reset)  # the database is right
        assert any(len(keys) > 1 or None in keys for keys in payments.keys.values())  # the key is not
        assert len(payments.paid) > len(MESSAGES), "and the money: a crash after the call paid again"
