"""A thin adapter for a real RabbitMQ (AMQP 0-9-1 through pika): a quorum queue and its dead-letter queue.

Each :class:`RabbitChannel` declares its own quorum queue, named uniquely for this
process and run, with a ``x-delivery-limit`` and a dead-letter queue behind the
default exchange, and deletes both when its ``with`` block ends. A consumer is a
connection: dropping a delivery closes that connection, as a crashed process would,
and RabbitMQ puts the message back with the ``redelivered`` flag set.

The queue dead-letters *at least once* (``x-dead-letter-strategy``, RabbitMQ 3.10+,
which needs ``x-overflow: reject-publish``): with the default, at most once, a dead
letter the dead-letter queue cannot take at that moment is dropped.
:func:`dead_letter_hop` shows both on the server.

RabbitMQ has no deduplication on the way in: every publish is stored. AMQP 0-9-1
never answers an ack, so a client cannot know whether one arrived.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from idemlib.brokers.sources import BrokerDelivery
from idemlib.messages import Message
from idemlib.servers import RABBITMQ, require_servers

_runs = itertools.count(1)
LEASE_WAIT_SECONDS = 5.0
"""How long :meth:`RabbitChannel.outlive_lease` waits for the consumer timeout before it gives up."""


class LeaseNotExpired(RuntimeError):
    """The server's consumer timeout did not fire within the wait: it is longer than this lesson can wait for."""


@dataclass(frozen=True)
class Seen:
    """One event at the real broker, as the lesson prints it."""

    event: str
    message_id: str
    redelivered: bool | None = None
    delivery_count: int | None = None
    detail: str = ""


def _connect() -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(RABBITMQ.url()))


def server_version() -> str:
    """The server's product and version, as it announces them to every client that connects (e.g. RabbitMQ 3.10.8)."""
    connection = _connect()
    try:
        # pika keeps the broker's connection.start properties on the connection's implementation only.
        properties = connection._impl.server_properties
    finally:
        connection.close()
    return f"{properties.get('product', 'RabbitMQ')} {properties.get('version', '(version not announced)')}"


STRATEGIES = ("at-most-once", "at-least-once")
"""RabbitMQ's two dead-letter strategies for a quorum queue; at-most-once is its default."""


def _queue_name() -> str:
    return f"idemlib-l07-{os.getpid()}-{next(_runs)}"


def _quorum_queue(dead_letter_queue: str, strategy: str, **arguments: Any) -> dict[str, Any]:
    """The arguments of a quorum queue that dead-letters to ``dead_letter_queue`` with ``strategy``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"a dead-letter strategy is one of {STRATEGIES}, not {strategy!r}")
    # At-least-once needs reject-publish (drop-head would silently fall back to at-most-once);
    # both strategies get it so the experiment below varies the strategy alone.
    return {"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letter_queue,
            "x-dead-letter-strategy": strategy, "x-overflow": "reject-publish", **arguments}


class RabbitChannel:
    """A quorum queue on the real server, driven through the course's channel verbs."""

    name = "RabbitMQ (real)"
    claims: tuple[str, ...] = ()
    """RabbitMQ sells no exactly-once feature, so it claims to remove no duplicate source."""

    def __init__(self, *, delivery_limit: int = 5, dead_letter_strategy: str = "at-least-once") -> None:
        self.queue = _queue_name()
        self.dead_letter_queue = f"{self.queue}-dlq"
        self.log: list[Seen] = []
        self.last_lease_seconds: float | None = None  # how long the last outlive_lease waited for the timeout
        self._admin = _connect()
        self._channel = self._admin.channel()
        self._channel.queue_declare(self.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"})
        self._channel.queue_declare(self.queue, durable=True, arguments=_quorum_queue(
            self.dead_letter_queue, dead_letter_strategy, **{"x-delivery-limit": delivery_limit}))
        self._channel.confirm_delivery()  # a publish returns once the queue has the message
        self._consumer: pika.BlockingConnection | None = None
        self._consumer_channel: BlockingChannel | None = None

    def __enter__(self) -> RabbitChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete both queues and close every connection this channel opened."""
        self._drop_consumer()
        if self._admin.is_open:
            # A failed operation closes the channel, not the connection: delete the queues on a fresh one.
            channel = self._channel if self._channel.is_open else self._admin.channel()
            channel.queue_delete(self.queue)
            channel.queue_delete(self.dead_letter_queue)
            self._admin.close()

    def _consumer_ch(self) -> BlockingChannel:
        if self._consumer_channel is None or self._consumer_channel.is_closed:
            self._drop_consumer()
            self._consumer = _connect()
            self._consumer_channel = self._consumer.channel()
        return self._consumer_channel

    def _drop_consumer(self) -> None:
        if self._consumer is not None and self._consumer.is_open:
            self._consumer.close()
        self._consumer, self._consumer_channel = None, None

    def publish(self, message: Message, key: str, *, retry: bool = False) -> bool:
        """Publish with ``message_id`` = ``key`` and the event ID in a header; RabbitMQ stores every copy."""
        self._publish(self.queue, message, key)
        self.log.append(Seen("published", key, detail="a retry" if retry else ""))
        return True

    def _publish(self, queue: str, message: Message, key: str) -> None:
        properties = pika.BasicProperties(message_id=key, delivery_mode=2, content_type="application/json",
                                          headers={"event-id": message.message_id})
        self._channel.basic_publish("", queue, json.dumps(message.body).encode(), properties)

    def receive(self) -> BrokerDelivery | None:
        """Take the next message with a manual ack (``basic.get``), or None when the queue has none ready."""
        channel = self._consumer_ch()
        method, properties, body = channel.basic_get(self.queue)
        if method is None:
            return None
        headers = properties.headers or {}
        count = int(headers.get("x-delivery-count", 0))
        message = Message(headers.get("event-id"), json.loads(body))
        self.log.append(Seen("delivered", properties.message_id, method.redelivered, count))
        return BrokerDelivery(message, count + 1, method.redelivered, (channel, method.delivery_tag),
                              headers.get("x-delivery-count"))

    def ack(self, delivery: BrokerDelivery, *, lost: bool = False) -> bool:
        """Ack on the channel the delivery came from; False when that channel is already closed.

        True means the ack went out on an open channel: RabbitMQ never answers an ack, so
        that is all a client learns. ``lost``: the ack dies with the consumer's connection
        before it reaches the server, and the client, with no answer to miss, still says True.
        """
        channel, tag = delivery.handle
        if lost:
            self._drop_consumer()
            self.log.append(Seen("ack lost with its connection", str(delivery.message.message_id)))
            self._settle()
            return True
        try:
            channel.basic_ack(tag)
        except (pika.exceptions.ChannelClosed, pika.exceptions.ChannelWrongStateError,
                pika.exceptions.ConnectionClosed) as error:
            self.log.append(Seen("ack refused", str(delivery.message.message_id), detail=type(error).__name__))
            return False
        self.log.append(Seen("acked", str(delivery.message.message_id)))
        return True

    def drop(self, delivery: BrokerDelivery) -> None:
        """The consumer process dies: its connection closes and RabbitMQ requeues what it held."""
        self._drop_consumer()
        self.log.append(Seen("connection dropped", str(delivery.message.message_id)))
        self._settle()

    def outlive_lease(self, delivery: BrokerDelivery) -> None:
        """Hold the delivery unacked until RabbitMQ's consumer timeout closes the channel.

        A server whose timeout is longer than :data:`LEASE_WAIT_SECONDS` (the default
        is 30 minutes, checked about once a minute) is an error where servers are
        required (CI). Elsewhere the adapter says so and closes the channel itself,
        which is what the timeout would have done, so a lesson still runs.
        """
        channel, _ = delivery.handle
        started = time.monotonic()
        while channel.is_open and time.monotonic() - started < LEASE_WAIT_SECONDS:
            channel.connection.process_data_events(time_limit=0.05)
        if channel.is_open:
            reason = (f"RabbitMQ at {RABBITMQ.url()} did not time the consumer out within {LEASE_WAIT_SECONDS:g} s: its "
                      "consumer_timeout is longer (30 minutes by default, checked once a minute). The course's "
                      ".ci/start-rabbitmq sets it to 1 s, checked every 0.25 s.")
            if require_servers("rabbitmq"):
                raise LeaseNotExpired(reason)
            print(f"{reason} Closing the channel here instead, as the timeout would.")
            channel.close()
        else:
            self.last_lease_seconds = time.monotonic() - started
        self.log.append(Seen("channel closed by the consumer timeout", str(delivery.message.message_id)))
        self._settle()

    def give_up(self, delivery: BrokerDelivery) -> None:
        """Reject without requeueing: the queue dead-letters the message to its dead-letter queue."""
        channel, tag = delivery.handle
        channel.basic_reject(tag, requeue=False)
        self.log.append(Seen("rejected, not requeued", str(delivery.message.message_id)))
        self._settle()

    def _ready(self, queue: str) -> int:
        return self._channel.queue_declare(queue, passive=True).method.message_count

    def _settle(self, timeout: float = 3.0) -> None:
        # The broker requeues or dead-letters a returned message on its own time; wait until it has
        # landed in one of the two queues, so the next receive cannot race it.
        started = time.monotonic()
        while self._ready(self.queue) + self._ready(self.dead_letter_queue) == 0:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"RabbitMQ did not return the message to {self.queue} within {timeout:g} s")
            time.sleep(0.01)

    def dead_letters(self) -> list[tuple[Message, dict[str, Any]]]:
        """Take every message waiting in the dead-letter queue, with its headers (x-death says why)."""
        letters: list[tuple[Message, dict[str, Any]]] = []
        while True:
            method, properties, body = self._channel.basic_get(self.dead_letter_queue, auto_ack=True)
            if method is None:
                return letters
            headers = properties.headers or {}
            letters.append((Message(headers.get("event-id"), json.loads(body)), headers))

    def replay_dead_letters(self) -> int:
        """Move every dead letter back onto the queue as a new publish, as an operator's shovel would."""
        letters = self.dead_letters()
        for message, _ in letters:
            self._publish(self.queue, message, f"{message.message_id}:replayed")
            self.log.append(Seen("replayed from the dead-letter queue", str(message.message_id)))
        return len(letters)

    def pass_window(self) -> None:
        """RabbitMQ has no deduplication window; nothing to wait for."""


def dead_letter_hop(message: Message, *, strategy: str, room: int = 2) -> dict[str, object]:
    """Dead-letter ``message`` while its dead-letter queue does not exist yet, then create that queue and look.

    The source queue holds at most ``room`` messages (``x-max-length``, overflow
    reject-publish). After the dead-lettering, new publishes are sent until the queue
    refuses one: a dead letter the queue still keeps for its next try counts against
    that length. Then the dead-letter queue is declared and counted. Both queues are
    deleted afterwards.
    """
    source = _queue_name()
    target = f"{source}-dlq"
    connection = _connect()
    channel = connection.channel()
    channel.confirm_delivery()  # each publish returns once the queue has applied it, in order after the reject
    try:
        channel.queue_declare(source, durable=True, arguments=_quorum_queue(target, strategy, **{"x-max-length": room}))
        channel.basic_publish("", source, json.dumps(message.body).encode(), pika.BasicProperties(delivery_mode=2))
        method, _, _ = channel.basic_get(source)
        channel.basic_reject(method.delivery_tag, requeue=False)  # dead-letter it: the target does not exist
        accepted = 0
        while accepted <= room + 1:  # a quorum queue refuses a publish only once it is over its length
            try:
                channel.basic_publish("", source, b"{}", pika.BasicProperties(delivery_mode=2))
            except pika.exceptions.NackError:
                break
            accepted += 1
        channel.queue_declare(target, durable=True, arguments={"x-queue-type": "quorum"})
        in_target = channel.queue_declare(target, passive=True).method.message_count
        return {"dead-letter strategy": strategy, "in the dead-letter queue once it exists": in_target,
                f"new publishes the source queue took (x-max-length {room})": accepted}
    finally:
        if channel.is_open:
            channel.queue_delete(source)
            channel.queue_delete(target)
        connection.close()
