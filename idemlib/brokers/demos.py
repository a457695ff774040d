"""Short experiments on one broker at a time, each the proof of one claim in lesson 07.

They take a channel factory, so the same experiment runs on the real RabbitMQ or
NATS JetStream, or on the model that stands in for a server that is not running.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pandas as pd

from idemlib.brokers.models import BrokerModel
from idemlib.brokers.sources import BrokerDelivery, ChannelFactory, Consumer
from idemlib.messages import Message


@cache
def _consumer() -> Consumer:
    return Consumer()


def fresh_consumer() -> Consumer:
    """The experiments' consumer, emptied: one pair of databases serves them all, one experiment at a time."""
    consumer = _consumer()
    consumer.empty()
    return consumer


def redelivery_hint(open_channel: ChannelFactory, message: Message, *, committed: bool) -> dict[str, object]:
    """Deliver ``message``, let the consumer commit or not, kill it before its ack, and read the redelivery.

    The redelivery carries the same flag and count either way: only the inbox knows
    whether the first attempt's charge is already in the database.
    """
    consumer = fresh_consumer()
    with open_channel() as channel:
        channel.publish(message, str(message.message_id))
        first = channel.receive()
        assert first is not None, f"{channel.name} did not deliver {message.label}"
        if committed:
            consumer.handle(first)
        channel.drop(first)
        again = channel.receive()
        assert again is not None, f"{channel.name} did not redeliver {message.label}"
        before = consumer.charges(inbox=True)
        consumer.handle(again)
        channel.ack(again)
        return {"broker": channel.name, "first attempt committed": committed, "redelivered flag": again.redelivered,
                "delivery count": again.count, "charges before the redelivery": before,
                "charges after it, with the inbox": consumer.charges(inbox=True)}


def crash_on_every_delivery(open_channel: ChannelFactory, message: Message) -> tuple[pd.DataFrame, list[dict]]:
    """A consumer that dies on every delivery of a poison message: the deliveries, then what was dead-lettered."""
    rows: list[dict[str, Any]] = []
    with open_channel() as channel:
        channel.publish(message, str(message.message_id))
        while (delivery := channel.receive()) is not None:
            rows.append({"delivery": len(rows) + 1, "redelivered flag": delivery.redelivered,
                         "x-delivery-count header": "not sent" if delivery.header is None else delivery.header,
                         "delivery count": delivery.count})
            channel.drop(delivery)
        dead = [details for _, details in channel.dead_letters()]
    return pd.DataFrame(rows), dead


def publish_around_the_window(open_channel: ChannelFactory, message: Message) -> tuple[pd.DataFrame, int]:
    """Publish ``message`` with one ID three times: a send, its retry at once, and a send after the window.

    Returns one row per publish (stored or dropped, and the stream sequence where the
    broker answers with one) and how many copies the consumer then receives.
    """
    rows: list[dict[str, Any]] = []
    with open_channel() as channel:
        for label, retry, wait in (("first send", False, False), ("retry at once", True, False),
                                   ("send after the window", False, True)):
            if wait:
                channel.pass_window()
            rows.append({"publish": label, "stored": channel.publish(message, str(message.message_id), retry=retry)})
        sequences = [s.sequence for s in getattr(channel, "stored", [])]
        if sequences:
            for row, sequence in zip(rows, sequences):
                row["stream sequence in the answer"] = sequence
        delivered = 0
        while (delivery := channel.receive()) is not None:
            channel.ack(delivery)
            delivered += 1
    return pd.DataFrame(rows), delivered


def lease_expiry(open_channel: ChannelFactory, message: Message) -> dict[str, object]:
    """A handler slower than its lease: the broker hands the message to another consumer, and the late ack fails or is moot."""
    consumer = fresh_consumer()
    with open_channel() as channel:
        channel.publish(message, str(message.message_id))
        slow = channel.receive()
        assert slow is not None, f"{channel.name} did not deliver {message.label}"
        consumer.handle(slow)
        channel.outlive_lease(slow)
        other = channel.receive()
        assert other is not None, f"{channel.name} did not hand the message out again"
        consumer.handle(other)
        result = {"broker": channel.name, "second delivery's redelivered flag": other.redelivered,
                  "second delivery's count": other.count, "ack of the second delivery": channel.ack(other),
                  "late ack of the first delivery": channel.ack(slow),
                  "charges without inbox": consumer.charges(inbox=False),
                  "charges with inbox": consumer.charges(inbox=True)}
        result["seconds until the lease ran out"] = getattr(channel, "last_lease_seconds", None)
        return result


def late_ack_while_redelivered(open_channel: ChannelFactory, message: Message) -> dict[str, object]:
    """A late ack from a consumer whose lease ran out, sent while a second consumer holds the redelivery.

    Consumer A commits the charge but outlives its lease; B receives the redelivery and
    starts work; A's ack arrives; then B dies before it commits or acks. Does the broker
    take A's ack for the message, and does anything bring the message back after B?
    """
    consumer = fresh_consumer()
    with open_channel() as channel:
        channel.publish(message, str(message.message_id))
        first = channel.receive()
        assert first is not None, f"{channel.name} did not deliver {message.label}"
        consumer.handle(first)  # A commits...
        channel.outlive_lease(first)  # ...but too late
        second = channel.receive()
        assert second is not None, f"{channel.name} did not hand the message to B"
        late = channel.ack(first)
        channel.drop(second)  # B dies holding delivery 2
        after = channel.receive()
        if after is not None:
            consumer.handle(after)
            channel.ack(after)
        return {"broker": channel.name, "A's late ack": "taken" if late else "refused",
                "B's delivery": second.count, "after B dies": _what(after),
                "charges with the inbox": consumer.charges(inbox=True)}


def deadline_then_ack(model: BrokerModel, message: Message) -> pd.DataFrame:
    """What a modelled broker does while a delivery's deadline runs, after it expires, to a stale ack, after an ack."""
    channel = model.open()
    channel.publish(message, str(message.message_id))
    first = channel.receive()
    assert first is not None, f"{model.name} did not deliver {message.label}"
    rows = [("first receive", f"delivery {first.count}"),
            (f"receive again while the {model.lease} runs", _what(channel.receive()))]
    channel.outlive_lease(first)
    again = channel.receive()
    assert again is not None, f"{model.name} did not redeliver {message.label} after its {model.lease}"
    rows += [(f"receive after the {model.lease} expired, no ack", _what(again)),
             ("ack delivery 1 now (its deadline has expired)", _answer(channel.ack(first))),
             (f"ack delivery {again.count} in time", _answer(channel.ack(again)))]
    channel.outlive_lease(again)
    rows.append((f"receive after that ack and another {model.lease}", _what(channel.receive())))
    return pd.DataFrame(rows, columns=["moment", "what happened"]).set_index("moment")


def _answer(taken: bool) -> str:
    return "ack succeeded" if taken else "ack failed"


def _what(delivery: BrokerDelivery | None) -> str:
    return "nothing" if delivery is None else f"delivery {delivery.count}"


def content_based_resends(message: Message) -> pd.DataFrame:
    """Three sends of one event to the content-based SQS FIFO model: the same bytes, its fields reordered, a timestamp added.

    The model hashes the body as sent (:func:`~idemlib.brokers.models.body_as_sent`), as SQS
    does: only the byte-for-byte repeat is dropped; the same event serialised again is a new key.
    """
    from idemlib.brokers.models import SQS_FIFO_CONTENT, body_as_sent

    body = dict(message.body)
    sends = {"first send": body, "the same bytes again": body,
             "the same event, its fields in another order": dict(reversed(list(body.items()))),
             "the same event with a sent_at timestamp": {**body, "sent_at": "2026-12-01T09:00:01Z"}}
    channel = SQS_FIFO_CONTENT.open()
    rows = []
    for label, sent in sends.items():
        copy = Message(message.message_id, sent)
        rows.append({"send": label, "body as sent": body_as_sent(copy).decode(),
                     "stored": channel.publish(copy, "")})
    return pd.DataFrame(rows).set_index("send")
