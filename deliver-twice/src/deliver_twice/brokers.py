"""A broker's callback under test, unchanged: pika's ``on_message(channel, method, properties, body)`` and aio-pika's
``async on_message(message)``, each acking the way it does in production, through the ``ack`` deliver-twice gives.

A pika callback acknowledges with ``channel.basic_ack(delivery_tag=method.delivery_tag)``;
:func:`pika_consumer` turns it into a consumer ``handle(connection, message, ack)`` (play it with
``ack=True``) whose channel's ``basic_ack`` is that ``ack``: acking before the commit then fails the
crash scenarios, and acking another delivery's tag fails as RabbitMQ fails it (the channel closes
with ``PRECONDITION_FAILED - unknown delivery tag``). ``basic_nack`` and ``basic_reject`` leave the
message unacknowledged, so it comes back (as with ``requeue=True``). Every delivery gets a new
delivery tag, and every delivery after a message's first has ``redelivered`` set, as RabbitMQ's do.

The callback needs the database connection deliver-twice opens: it is passed as the keyword
``connection``, so in production bind yours the same way,
``functools.partial(on_message, connection=db)``. A test message is a dict with ``message_id``
and ``body`` (bytes), and optionally ``headers``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deliver_twice.steps import Handle


class UnknownDeliveryTag(Exception):
    """The consumer acked a tag this channel never delivered: RabbitMQ closes the channel (406 PRECONDITION_FAILED)."""


@dataclass
class Method:
    """pika's ``Basic.Deliver`` as a callback reads it."""

    delivery_tag: int
    redelivered: bool
    routing_key: str = ""
    exchange: str = ""
    consumer_tag: str = "deliver-twice"


@dataclass
class Properties:
    """pika's ``BasicProperties`` as a callback reads it."""

    message_id: str | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    content_type: str | None = None


class Channel:
    """The channel a callback acks on: ``basic_ack`` of this delivery's tag is the delivery's ``ack``."""

    def __init__(self, tag: int, ack: Callable[[], None]) -> None:
        self._tag, self._ack = tag, ack
        self.nacked = False

    def basic_ack(self, delivery_tag: int = 0, multiple: bool = False) -> None:
        if delivery_tag != self._tag and not (multiple and delivery_tag in (0, self._tag)):
            raise UnknownDeliveryTag(f"PRECONDITION_FAILED - unknown delivery tag {delivery_tag} (this delivery's "
                                     f"is {self._tag}): ack method.delivery_tag")
        self._ack()

    def basic_nack(self, delivery_tag: int = 0, multiple: bool = False, requeue: bool = True) -> None:
        self.nacked = True  # no ack: the broker delivers the message again

    def basic_reject(self, delivery_tag: int = 0, requeue: bool = True) -> None:
        self.nacked = True


class _Deliveries:
    """The broker's side: a new tag per delivery, and the redelivered flag after a message's first."""

    def __init__(self) -> None:
        self._tags = itertools.count(1)
        self._seen: set[Any] = set()

    def next(self, message: dict[str, Any]) -> tuple[int, bool]:
        key = message["message_id"]
        redelivered = key in self._seen
        self._seen.add(key)
        return next(self._tags), redelivered


def pika_consumer(on_message: Callable[..., Any]) -> Handle:
    """``on_message(channel, method, properties, body, connection=...)``, pika's callback, as a deliver-twice
    consumer to play with ``ack=True``."""
    deliveries = _Deliveries()

    def handle(connection: Any, message: dict[str, Any], ack: Callable[[], None]) -> Any:
        tag, redelivered = deliveries.next(message)
        properties = Properties(message_id=message["message_id"], headers=dict(message.get("headers", {})))
        return on_message(Channel(tag, ack), Method(tag, redelivered), properties, message["body"],
                          connection=connection)

    handle.__name__ = getattr(on_message, "__name__", "on_message")
    return handle


class IncomingMessage:
    """aio-pika's ``AbstractIncomingMessage`` as a callback reads and acks it: ``await message.ack()`` is the ack."""

    def __init__(self, message: dict[str, Any], tag: int, redelivered: bool, ack: Callable[[], None]) -> None:
        self.body: bytes = message["body"]
        self.message_id: str = message["message_id"]
        self.headers: dict[str, Any] = dict(message.get("headers", {}))
        self.delivery_tag, self.redelivered = tag, redelivered
        self._ack = ack
        self.processed = False

    async def ack(self, multiple: bool = False) -> None:
        if self.processed:
            raise RuntimeError(f"Message already processed: {self.message_id}")  # aio-pika's MessageProcessError
        self.processed = True
        self._ack()

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        self.processed = True

    async def reject(self, requeue: bool = False) -> None:
        self.processed = True


def aio_pika_consumer(on_message: Callable[..., Any]) -> Handle:
    """``async on_message(message, connection=...)``, aio-pika's callback, as a deliver-twice consumer to play with
    ``ack=True``; it is awaited."""
    deliveries = _Deliveries()

    def handle(connection: Any, message: dict[str, Any], ack: Callable[[], None]) -> Any:
        tag, redelivered = deliveries.next(message)
        return on_message(IncomingMessage(message, tag, redelivered, ack), connection=connection)

    handle.__name__ = getattr(on_message, "__name__", "on_message")
    return handle
