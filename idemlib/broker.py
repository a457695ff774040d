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
from typing import Protocol

from idemlib.clock import VirtualClock
from idemlib.messages import Message
from idemlib.trace import Event, Trace


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


class Source(Protocol):
    """Where the run engine's consumers take their deliveries from: the :class:`Broker`'s queue, or a log.

    A source hands out deliveries, hears acks and give-backs, and says when it has
    nothing left: every message acked (or dead-lettered), none out with a consumer.
    """

    @property
    def is_empty(self) -> bool: ...
    def receive(self, consumer: str) -> Delivery | None: ...
    def ack(self, delivery: Delivery) -> bool: ...
    def release(self, delivery: Delivery, reason: str) -> None: ...
    def extend(self, delivery: Delivery) -> bool: ...
    def next_lease_expiry(self) -> float | None: ...
    def crashed(self, consumer: str) -> None: ...


READY, LEASED, ACKED, DEAD = "ready", "leased", "acked", "dead-lettered"
PLACES = (READY, LEASED, ACKED, DEAD)
"""Where a published message can be: exactly one of these at any moment."""

MOVES = {
    READY: {LEASED, ACKED, DEAD},  # delivered; acked late, after its lease ran out; given up on
    LEASED: {READY, ACKED},        # lease expired or released; acked
    ACKED: set(),                  # gone for good: never delivered again
    DEAD: set(),                   # in the dead-letter queue, for an operator to replay
}
"""The broker's state machine: from each place, the places a message may move to."""


@dataclass
class _Stored:
    message: Message
    place: str = READY
    deliveries: int = 0
    receipt: int = 0
    last_failure: str = "no ack before the lease expired"
    lease_until: float = 0.0


class Broker:
    """A queue that delivers at least once: it would rather repeat a message than lose one.

    Each published message is in exactly one place (:data:`PLACES`) and moves only as
    :data:`MOVES` allows, whatever order receives, acks, releases and lease expiries
    come in: a late ack from a consumer whose lease ran out, an ack for a message
    already acked, a release from a consumer that no longer holds the lease.
    """

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
        trace.lease_seconds = visibility_timeout
        self.dead_letters: list[DeadLetter] = []
        self._stored: list[_Stored] = []  # by position; acked and dead-lettered messages stay, marked
        self._ready: deque[int] = deque()
        self._leased: set[int] = set()
        self._leases: list[tuple[float, int, int]] = []  # (expires_at, position, receipt)

    def publish(self, message: Message) -> int:
        """Put ``message`` on the queue and return its position, the broker's own handle for it.

        Publishing the same message twice stores two copies: the broker does not
        deduplicate, just as a plain queue does not.
        """
        position = len(self._stored)
        self._stored.append(_Stored(message))
        self._ready.append(position)
        self.trace.record("broker", Event.PUBLISHED, message.label)
        return position

    def receive(self, consumer: str) -> Delivery | None:
        """Lease the next available message to ``consumer``, or return None when none is available."""
        self._expire_leases()
        while self._ready:
            position = self._ready[0]
            stored = self._stored[position]
            if stored.deliveries >= self.max_deliveries:
                self._dead_letter(position, stored)
                continue
            self._move(position, LEASED)
            stored.deliveries += 1
            stored.receipt += 1
            expires = self.clock.now() + self.visibility_timeout
            stored.lease_until = expires
            heapq.heappush(self._leases, (expires, position, stored.receipt))
            self.trace.record(
                consumer, Event.DELIVERED, stored.message.label, stored.deliveries,
                "redelivered" if stored.deliveries > 1 else "",
            )
            return Delivery(stored.message, position, stored.receipt, stored.deliveries, consumer, expires)
        return None

    def ack(self, delivery: Delivery) -> bool:
        """Remove the delivered message for good. Returns False if it was already acked or dead-lettered.

        An ack arriving after the lease expired still removes the message, as an SQS
        delete does, whether it is waiting on the queue again or another consumer
        now holds it.
        """
        self.trace.record(delivery.consumer, Event.ACKED, delivery.message_id, delivery.count)
        if self._stored[delivery.position].place in (ACKED, DEAD):
            return False
        self._move(delivery.position, ACKED)
        return True

    def release(self, delivery: Delivery, reason: str) -> None:
        """Give the message back at once, as a negative acknowledgement (nack) does.

        A live consumer that cannot handle a message releases it so it is retried
        without waiting out the lease; ``reason`` is kept for the dead-letter queue.
        """
        stored = self._stored[delivery.position]
        if stored.place != LEASED or stored.receipt != delivery.receipt:
            return  # the lease already moved on; the message is not this consumer's to release
        stored.last_failure = reason
        self._move(delivery.position, READY)

    def extend(self, delivery: Delivery) -> bool:
        """Give the delivery a fresh lease, one visibility timeout from now; False if the lease has moved on.

        What SQS's ChangeMessageVisibility, JetStream's in-progress ack and Pub/Sub's
        modifyAckDeadline do for a consumer still at work. A lease that already ran
        out (or was acked or released) is not this consumer's to extend.
        """
        self._expire_leases()
        stored = self._stored[delivery.position]
        if stored.place != LEASED or stored.receipt != delivery.receipt:
            return False
        stored.lease_until = self.clock.now() + self.visibility_timeout
        heapq.heappush(self._leases, (stored.lease_until, delivery.position, delivery.receipt))
        self.trace.record(delivery.consumer, Event.LEASE_EXTENDED, delivery.message_id, delivery.count,
                          f"until {stored.lease_until:g}")
        return True

    def next_lease_expiry(self) -> float | None:
        """When the earliest outstanding lease runs out, or None if no message is leased."""
        while self._leases:
            expires, position, receipt = self._leases[0]
            stored = self._stored[position]
            if stored.place == LEASED and stored.receipt == receipt and stored.lease_until == expires:
                return expires
            heapq.heappop(self._leases)  # acked, released or extended since; nothing to expire at this moment
        return None

    def crashed(self, consumer: str) -> None:
        """A consumer process died. The broker cannot tell a dead consumer from a slow one: its leases run out."""

    def place_of(self, position: int) -> str:
        """Where the message published at ``position`` is now: one of :data:`PLACES`."""
        return self._stored[position].place

    @property
    def is_empty(self) -> bool:
        """True when every message has been acknowledged or dead-lettered."""
        return not self._ready and not self._leased

    @property
    def waiting(self) -> int:
        """How many messages are on the queue, leased or not."""
        return len(self._ready) + len(self._leased)

    def _move(self, position: int, to: str) -> None:
        """Move one message to another place, keeping the ready queue and the leased set in step."""
        stored = self._stored[position]
        if to not in MOVES[stored.place]:
            raise RuntimeError(f"broker bug: {stored.message.label} cannot move from {stored.place} to {to}")
        if stored.place == READY:
            self._ready.remove(position)  # the front of the queue, except for a late ack
        elif stored.place == LEASED:
            self._leased.discard(position)
        if to == READY:
            self._ready.append(position)
        elif to == LEASED:
            self._leased.add(position)
        stored.place = to

    def _expire_leases(self) -> None:
        now = self.clock.now()
        while (expires := self.next_lease_expiry()) is not None and expires <= now:
            _, position, _ = heapq.heappop(self._leases)
            stored = self._stored[position]
            self._move(position, READY)
            self.trace.record("broker", Event.LEASE_EXPIRED, stored.message.label, stored.deliveries, at=expires)

    def _dead_letter(self, position: int, stored: _Stored) -> None:
        self._move(position, DEAD)
        self.dead_letters.append(DeadLetter(stored.message, stored.deliveries, stored.last_failure))
        self.trace.record("broker", Event.DEAD_LETTERED, stored.message.label, stored.deliveries, stored.last_failure)
