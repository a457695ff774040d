"""An at-least-once message broker on a virtual clock.

It behaves like the queues the course talks about (Amazon SQS, RabbitMQ, Azure
Service Bus) in the one way that matters here: it removes a message only when a
consumer acknowledges it. Every delivery comes with a lease (SQS calls it the
visibility timeout, Service Bus the lock, Pub/Sub the acknowledgement deadline);
when the lease runs out without an ack, the message is delivered again. A message
that has been delivered ``max_deliveries`` times without an ack goes to the
dead-letter queue instead of being delivered once more.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from idemlib.clock import VirtualClock
from idemlib.messages import Message
from idemlib.trace import Trace


@dataclass(frozen=True)
class Delivery:
    """One hand-over of a message to a consumer, valid until its lease expires.

    ``count`` is the broker's delivery count (1 for the first delivery). Like
    RabbitMQ's redelivered flag it is a hint only: it says the message was handed out
    before, not whether the earlier attempt committed.
    """

    message: Message
    position: int
    receipt: int
    count: int
    consumer: str
    lease_expires_at: float

    @property
    def message_id(self) -> str:
        """The message's ID as the trace shows it."""
        return self.message.label

    @property
    def redelivered(self) -> bool:
        """True when the broker has handed this message out before."""
        return self.count > 1


@dataclass(frozen=True)
class DeadLetter:
    """A message the broker gave up on, kept with the reason for whoever replays it."""

    message: Message
    deliveries: int
    reason: str


@dataclass
class _Stored:
    message: Message
    deliveries: int = 0
    receipt: int = 0
    leased: bool = False
    last_failure: str = "no ack before the lease expired"


class Broker:
    """A queue that delivers at least once: it would rather repeat a message than lose one."""

    def __init__(
        self,
        clock: VirtualClock,
        trace: Trace,
        *,
        visibility_timeout: float = 30.0,
        max_deliveries: int = 5,
    ) -> None:
        if visibility_timeout <= 0:
            raise ValueError("visibility_timeout must be positive: a lease of zero seconds expires as it starts")
        if max_deliveries < 1:
            raise ValueError("max_deliveries must be at least 1")
        self.clock = clock
        self.trace = trace
        self.visibility_timeout = visibility_timeout
        self.max_deliveries = max_deliveries
        self.dead_letters: list[DeadLetter] = []
        self._stored: dict[int, _Stored] = {}
        self._ready: deque[int] = deque()
        self._leases: list[tuple[float, int, int]] = []  # (expires_at, position, receipt)
        self._published = 0

    def publish(self, message: Message) -> int:
        """Put ``message`` on the queue and return its position, the broker's own handle for it.

        Publishing the same message twice stores two copies: the broker does not
        deduplicate, just as a plain queue does not.
        """
        position = self._published
        self._published += 1
        self._stored[position] = _Stored(message)
        self._ready.append(position)
        self.trace.record("broker", "published", message.label)
        return position

    def receive(self, consumer: str) -> Delivery | None:
        """Lease the next available message to ``consumer``, or return None when none is available."""
        self._expire_leases()
        while self._ready:
            position = self._ready.popleft()
            stored = self._stored.get(position)
            if stored is None:
                continue  # acked by a slow consumer after its lease ran out and the message was queued again
            if stored.deliveries >= self.max_deliveries:
                self._dead_letter(position, stored)
                continue
            stored.deliveries += 1
            stored.receipt += 1
            stored.leased = True
            expires = self.clock.now() + self.visibility_timeout
            heapq.heappush(self._leases, (expires, position, stored.receipt))
            self.trace.record(
                consumer, "delivered", stored.message.label, stored.deliveries,
                "redelivered" if stored.deliveries > 1 else "",
            )
            return Delivery(stored.message, position, stored.receipt, stored.deliveries, consumer, expires)
        return None

    def ack(self, delivery: Delivery) -> bool:
        """Remove the delivered message for good. Returns False if it was already removed.

        An ack arriving after the lease expired still removes the message, as an SQS
        delete does, even if another consumer now holds it.
        """
        stored = self._stored.pop(delivery.position, None)
        self.trace.record(delivery.consumer, "acked", delivery.message_id, delivery.count)
        return stored is not None

    def release(self, delivery: Delivery, reason: str) -> None:
        """Give the message back at once, as a negative acknowledgement (nack) does.

        A live consumer that cannot handle a message releases it so it is retried
        without waiting out the lease; ``reason`` is kept for the dead-letter queue.
        """
        stored = self._stored.get(delivery.position)
        if stored is None or stored.receipt != delivery.receipt or not stored.leased:
            return  # the lease already moved on; the message is not this consumer's to release
        stored.leased = False
        stored.last_failure = reason
        self._ready.append(delivery.position)

    def next_lease_expiry(self) -> float | None:
        """When the earliest outstanding lease runs out, or None if no message is leased."""
        while self._leases:
            expires, position, receipt = self._leases[0]
            stored = self._stored.get(position)
            if stored is not None and stored.leased and stored.receipt == receipt:
                return expires
            heapq.heappop(self._leases)  # acked or released since; nothing to expire
        return None

    @property
    def is_empty(self) -> bool:
        """True when every message has been acknowledged or dead-lettered."""
        return not self._stored

    @property
    def waiting(self) -> int:
        """How many messages are on the queue, leased or not."""
        return len(self._stored)

    def _expire_leases(self) -> None:
        now = self.clock.now()
        while (expires := self.next_lease_expiry()) is not None and expires <= now:
            _, position, _ = heapq.heappop(self._leases)
            stored = self._stored[position]
            stored.leased = False
            self.trace.record("broker", "lease expired", stored.message.label, stored.deliveries, at=expires)
            self._ready.append(position)

    def _dead_letter(self, position: int, stored: _Stored) -> None:
        del self._stored[position]
        self.dead_letters.append(DeadLetter(stored.message, stored.deliveries, stored.last_failure))
        self.trace.record("broker", "dead-lettered", stored.message.label, stored.deliveries, stored.last_failure)
