"""A pika callback and an aio-pika callback under deliver-twice, unchanged, their acks the ``ack`` it gives."""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any

import pika
import pytest

from deliver_twice import NotIdempotent, assert_idempotent, idempotency_report
from deliver_twice.brokers import aio_pika_consumer, pika_consumer

MESSAGES = [{"message_id": f"m-{n}", "body": json.dumps({"order_id": 100 + n, "amount": 5 + n}).encode()}
            for n in range(20)]


def reset(connection: sqlite3.Connection) -> None:
    connection.executescript("DROP TABLE IF EXISTS payments; DROP TABLE IF EXISTS inbox; "
                             "CREATE TABLE payments (order_id, amount); CREATE TABLE inbox (message_id PRIMARY KEY);")


def pay_once(connection: sqlite3.Connection, message_id: str, body: bytes) -> None:
    order = json.loads(body)
    if connection.execute("INSERT INTO inbox VALUES (?) ON CONFLICT DO NOTHING", (message_id,)).rowcount:
        connection.execute("INSERT INTO payments VALUES (?, ?)", (order["order_id"], order["amount"]))
    connection.commit()


def on_message(channel: Any, method: Any, properties: Any, body: bytes, connection: Any) -> None:
    """pika's callback as written for ``channel.basic_consume(queue, functools.partial(on_message, connection=db))``."""
    pay_once(connection, properties.message_id, body)
    channel.basic_ack(delivery_tag=method.delivery_tag)


def on_message_acking_first(channel: Any, method: Any, properties: Any, body: bytes, connection: Any) -> None:
    channel.basic_ack(delivery_tag=method.delivery_tag)  # acked before the work: a death now loses the payment
    pay_once(connection, properties.message_id, body)


def on_message_acking_tag_one(channel: Any, method: Any, properties: Any, body: bytes, connection: Any) -> None:
    pay_once(connection, properties.message_id, body)
    channel.basic_ack(delivery_tag=1)  # a tag typed by hand: right for the first delivery only


def test_the_pika_signature_is_the_one_pika_calls():
    import inspect
    # pika documents on_message_callback as (channel, method, properties, body); ours binds connection by keyword.
    assert list(inspect.signature(functools.partial(on_message, connection=None)).parameters)[:4] == [
        "channel", "method", "properties", "body"]
    assert pika.__version__


def test_a_pika_callback_acking_after_its_commit_passes_over_20_messages(tmp_path):
    connect = functools.partial(sqlite3.connect, tmp_path / "shop.db")
    report = assert_idempotent(pika_consumer(on_message), MESSAGES, connect=connect, reset=reset, ack=True)
    assert any(row.scenario.endswith(": ack") for row in report), "basic_ack is a crash point of its own"


def test_a_pika_callback_acking_before_its_work_fails_naming_the_message(tmp_path):
    connect = functools.partial(sqlite3.connect, tmp_path / "shop.db")
    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(pika_consumer(on_message_acking_first), MESSAGES[:3], connect=connect, reset=reset,
                          ack=True)
    assert "m-0 was acknowledged before INSERT INTO inbox and the consumer died there" in str(caught.value)


def test_acking_a_tag_typed_by_hand_fails_as_rabbitmq_fails_it(tmp_path):
    connect = functools.partial(sqlite3.connect, tmp_path / "shop.db")
    with pytest.raises(ValueError, match="one clean delivery of m-1 failed: UnknownDeliveryTag: PRECONDITION_FAILED"):
        idempotency_report(pika_consumer(on_message_acking_tag_one), MESSAGES[:3], connect=connect, reset=reset,
                           ack=True)


async def on_incoming(message: Any, connection: Any) -> None:
    """aio-pika's callback: ``await message.ack()`` once the work is committed."""
    pay_once(connection, message.message_id, message.body)
    await message.ack()


async def on_incoming_without_ack(message: Any, connection: Any) -> None:
    pay_once(connection, message.message_id, message.body)  # forgot the ack: the broker redelivers for ever


def test_an_aio_pika_callback_is_awaited_and_its_ack_is_the_ack(tmp_path):
    connect = functools.partial(sqlite3.connect, tmp_path / "shop.db")
    assert assert_idempotent(aio_pika_consumer(on_incoming), MESSAGES, connect=connect, reset=reset, ack=True).passed
    with pytest.raises(ValueError, match="m-0 failed: NotAcknowledged"):
        idempotency_report(aio_pika_consumer(on_incoming_without_ack), MESSAGES[:2], connect=connect, reset=reset,
                           ack=True)
