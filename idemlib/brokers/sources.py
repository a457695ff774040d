"""The eight ways a second copy of one payment reaches a queue or a consumer, run on any broker.

Every broker here, real or modelled, is driven through the same few verbs (the
:class:`Channel` protocol): publish, receive, ack (or lose the ack on the way), drop a
delivery without acking, hold it past its lease, give up on it (dead-letter), replay
the dead letters, and let the broker's deduplication window pass. Each duplicate
source is a short script of those verbs, written once, so a table row means the same
thing in every column.

The consumer charges order 1042 $40 for message ``m-7f3``. Without an inbox it
charges every delivery; with one it records the producer's event ID in the same
transaction as the charge (lessons 02 and 06), so a duplicate changes nothing.
A duplicate *reached the consumer* when the consumer without an inbox charged twice.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from idemlib.messages import Message, parse_charge
from idemlib.stores import DuckDBPayments, PaymentsDatabase

SOURCES = (
    "client library's own retry",
    "application resend inside the window",
    "application resend after the window",
    "relay republish with a new ID",
    "consumer crash after commit, before ack",
    "lease expires while the handler works",
    "ack lost on the way",
    "dead-letter replay",
)
"""The eight duplicate sources, in the order the lesson's table lists them."""

REACHED, REMOVED, NOT_REDELIVERED = "reached", "removed", "not redelivered: ack answered"
"""A cell's three outcomes: the copy reached the consumer; the broker removed a copy it was sent; or (a lost ack
only) no copy was ever made, because the broker answered the consumer's ack and the consumer acked again. An
answered ack prevents a redelivery; it removes no duplicate."""
ACK_LOST = "ack lost on the way"


def cell(source: str, charges_without_inbox: int) -> str:
    """What one run shows: reached, removed, not redelivered (a lost ack answered), or lost (no charge at all)."""
    if charges_without_inbox == 0:
        return "lost"
    if charges_without_inbox > 1:
        return REACHED
    return NOT_REDELIVERED if source == ACK_LOST else REMOVED


@dataclass(frozen=True)
class BrokerDelivery:
    """One hand-over of a message by a broker: the message, and what the broker says about it.

    ``count`` is the broker's delivery count where it keeps one (1 on the first
    delivery); ``redelivered`` its flag. Both are hints: neither says whether an
    earlier attempt committed. ``handle`` is the broker's own object for acking.
    """

    message: Message
    count: int
    redelivered: bool
    handle: Any = None
    header: Any = None
    """The broker's own counter header as it arrived (RabbitMQ's ``x-delivery-count``), None where it sent none."""


class Channel(AbstractContextManager["Channel"], Protocol):
    """What a duplicate source needs from a broker. Real adapters and models both provide it.

    ``key`` on publish is the broker-level deduplication key (SQS deduplication ID,
    Service Bus MessageId, ``Nats-Msg-Id``); ``retry`` says whether this publish is
    the client's own retry of the previous send (which Kafka's idempotent producer
    recognises by its sequence number) or a new send.
    """

    @property
    def name(self) -> str: ...

    @property
    def claims(self) -> tuple[str, ...]:
        """The duplicate sources the broker's own feature claims to remove (none for a plain queue)."""
        ...

    def publish(self, message: Message, key: str, *, retry: bool = False) -> bool:
        """Send ``message``; True when the broker stored it, False when it dropped it as a duplicate."""
        ...

    def receive(self) -> BrokerDelivery | None:
        """The next delivery for this consumer, or None when nothing is ready."""
        ...

    def ack(self, delivery: BrokerDelivery, *, lost: bool = False) -> bool:
        """Acknowledge; True when the broker answered that it took the ack (or, where a broker never
        answers an ack, when it went out on a live connection), False when it refused it or no answer came.

        ``lost``: the ack never arrives. A broker that answers acks says so (no answer, False),
        so the consumer can ack again; one that does not answer leaves the consumer believing
        it acked (True) while the broker takes the message back.
        """
        ...

    def drop(self, delivery: BrokerDelivery) -> None:
        """The consumer dies holding ``delivery``: no ack is ever sent, and the broker gets it back."""
        ...

    def outlive_lease(self, delivery: BrokerDelivery) -> None:
        """The handler is still working when ``delivery``'s lease runs out; the broker takes it back."""
        ...

    def give_up(self, delivery: BrokerDelivery) -> None:
        """The consumer gives up on ``delivery`` for good: it goes to the dead-letter queue."""
        ...

    def dead_letters(self) -> list[tuple[Message, dict[str, Any]]]:
        """Take every message from the dead-letter queue, with the broker's note of why it is there."""
        ...

    def replay_dead_letters(self) -> int:
        """An operator puts every dead letter back on the queue; returns how many."""
        ...

    def pass_window(self) -> None:
        """Let the broker's deduplication window pass (a no-op where there is none)."""
        ...


class Consumer:
    """The payments consumer twice over, fed the same deliveries: without an inbox and with one.

    Both work on real databases (DuckDB by default). The broker cannot tell them
    apart (both commit, then ack the same way), so one run of a duplicate source
    answers both questions: did the duplicate reach the consumer, and did the inbox
    stop it from charging twice?
    """

    def __init__(self, without: PaymentsDatabase | None = None, with_inbox: PaymentsDatabase | None = None) -> None:
        self.without, self.with_inbox = without or DuckDBPayments(), with_inbox or DuckDBPayments()
        self._plain, self._inbox = self.without.session(), self.with_inbox.session()
        self.handled = 0

    def handle(self, delivery: BrokerDelivery) -> None:
        """Do the work for one delivery and commit it, once per database. The ack is the caller's business."""
        self.handled += 1
        charge = parse_charge(delivery.message)
        message_id = str(delivery.message.message_id)
        self._plain.charge(charge.order_id, charge.amount, message_id)  # no inbox: every delivery charges
        self._inbox.begin()
        if self._inbox.record_message(message_id):
            self._inbox.charge(charge.order_id, charge.amount, message_id)
        self._inbox.commit()

    def charges(self, *, inbox: bool) -> int:
        """How many charges the database with (or without) the inbox holds."""
        return len((self.with_inbox if inbox else self.without).payments())

    def empty(self) -> None:
        """Forget every charge and processed ID, for the next run."""
        self.without.empty()
        self.with_inbox.empty()
        self.handled = 0


def _drain(channel: Channel, consumer: Consumer) -> None:
    while (delivery := channel.receive()) is not None:
        consumer.handle(delivery)
        channel.ack(delivery)


def run_source(channel: Channel, source: str, consumer: Consumer, message: Message) -> None:
    """Play one duplicate source on ``channel`` with ``message``, then let ``consumer`` drain the queue."""
    if source not in SOURCES:
        raise ValueError(f"no duplicate source {source!r}; choose one of {SOURCES}")
    event = str(message.message_id)
    if source == "client library's own retry":
        channel.publish(message, event)
        channel.publish(message, event, retry=True)  # no confirm in time; the client library sends the same bytes
    elif source == "application resend inside the window":
        channel.publish(message, event)
        channel.publish(message, event)  # the application sends the same bytes again, a moment later
    elif source == "application resend after the window":
        channel.publish(message, event)
        channel.pass_window()
        channel.publish(message, event)  # the same bytes and ID again, much later
    elif source == "relay republish with a new ID":
        channel.publish(message, f"{event}:send-1")
        channel.publish(message, f"{event}:send-2")  # the relay restarted: the same bytes, a new ID
    elif source == "dead-letter replay":
        channel.publish(message, event)
        first = _receive(channel, source)
        consumer.handle(first)  # committed, then the step after the commit failed for good
        channel.give_up(first)
        channel.pass_window()  # an operator replays the dead-letter queue later, after looking into it
        channel.replay_dead_letters()
    else:  # the consumer's side: one delivery, committed, then something goes wrong before the ack lands
        channel.publish(message, event)
        first = _receive(channel, source)
        consumer.handle(first)
        if source == "consumer crash after commit, before ack":
            channel.drop(first)
        elif source == "lease expires while the handler works":
            channel.outlive_lease(first)
            _drain(channel, consumer)  # a second consumer gets it while the first still works...
            channel.ack(first)  # ...and the first one's late ack is refused, or settles a message already done
        elif not channel.ack(first, lost=True):  # "ack lost on the way": the broker said it got no ack...
            channel.ack(first)  # ...so the consumer acks again
    _drain(channel, consumer)


def _receive(channel: Channel, source: str) -> BrokerDelivery:
    delivery = channel.receive()
    if delivery is None:
        raise RuntimeError(f"{channel.name}: the message published for {source!r} was not delivered")
    return delivery


ChannelFactory = Callable[[], Channel]


def run_broker(open_channel: ChannelFactory, message: Message, consumer: Consumer | None = None) -> pd.DataFrame:
    """Every duplicate source on one broker: one row per source, with the charges made with and without the inbox.

    ``open_channel`` gives a fresh, empty channel (queue, stream or model) for each
    run and cleans it up when its ``with`` block ends, so no run sees another's copies.
    """
    consumer = consumer or Consumer()
    rows = []
    for source in SOURCES:
        consumer.empty()
        with open_channel() as channel:
            run_source(channel, source, consumer, message)
            rows.append({"broker": channel.name, "source": source, "claimed": source in channel.claims,
                         "deliveries handled": consumer.handled,
                         "charges without inbox": consumer.charges(inbox=False),
                         "charges with inbox": consumer.charges(inbox=True)})
    return pd.DataFrame(rows)


def exactly_once_table(results: list[pd.DataFrame]) -> pd.DataFrame:
    """The lesson's table: a row per duplicate source, a column per broker, and the inbox's column last.

    A cell says whether the duplicate ``reached`` the consumer (a consumer without an
    inbox charged twice), the broker ``removed`` it, or, for a lost ack, the broker's
    answer let the consumer ack again so nothing was redelivered (see :func:`cell`).
    The last column says whether the inbox kept every broker at one charge for that source.
    """
    runs = pd.concat(results, ignore_index=True)
    cells = runs.assign(cell=[cell(source, n) for source, n in zip(runs["source"], runs["charges without inbox"])])
    table = cells.pivot(index="source", columns="broker", values="cell")
    table = table.reindex(index=list(SOURCES), columns=list(dict.fromkeys(runs["broker"])))
    caught = runs.groupby("source")["charges with inbox"].max().reindex(list(SOURCES))
    table["with the inbox (any broker)"] = caught.map(lambda n: "caught (1 charge)" if n == 1 else f"charged {n} times")
    table.columns.name = None
    return table


def scorecard(results: list[pd.DataFrame]) -> pd.DataFrame:
    """Per broker: the sources its feature claims and how many of them it removed, what else it removed, what reached.

    A feature is judged on its claims only; the sources it never claimed, and the
    inbox's work on what reached the consumer, are counted beside them.
    """
    runs = pd.concat(results, ignore_index=True)
    kept = runs["charges without inbox"] == 1
    reached = runs["charges without inbox"] > 1
    answered = kept & (runs["source"] == ACK_LOST)
    card = pd.DataFrame({
        "broker": runs["broker"],
        "sources its feature claims": runs["claimed"],
        "of those, kept from the consumer": runs["claimed"] & kept,
        "removed though not claimed": ~runs["claimed"] & kept & ~answered,
        "lost ack answered: not redelivered": answered,
        "reached the consumer": reached,
        "charged twice with the inbox": runs["charges with inbox"] > 1,
    })
    return card.groupby("broker", sort=False).sum()
