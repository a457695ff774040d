"""How long a real RabbitMQ queue keeps a message nobody consumes: until it is consumed, unless a TTL says otherwise.

Lesson 10's horizon on RabbitMQ. A queue has no retention period of its own; a message TTL
(``x-message-ttl``) gives it one, and an expired message goes to the dead-letter queue, if the
queue has one, with the reason ``expired``, from where a replay is one more late copy. The
server guarantees that an expired message is never delivered, so the read after the TTL
below is decided by the server's rule, not by how fast this machine is.
"""

from __future__ import annotations

import itertools
import os
import time

import pandas as pd
import pika
from pika.adapters.blocking_connection import BlockingChannel

from idemlib.servers import RABBITMQ

_runs = itertools.count(1)


def kept_or_expired(*, ttl_ms: int = 200, wait_s: float = 0.5) -> pd.DataFrame:
    """Publish one message to a queue without a TTL and to one with ``ttl_ms``, wait ``wait_s``, then read both.

    Each queue dead-letters to a queue of its own; both are deleted afterwards.
    """
    if wait_s * 1000 <= ttl_ms:
        raise ValueError("wait longer than the TTL, or the read cannot tell kept from expired")
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ.url()))
    channel = connection.channel()
    channel.confirm_delivery()
    base = f"idemlib-l10-{os.getpid()}-{next(_runs)}"
    setups = {"no TTL (the default)": {}, f"x-message-ttl {ttl_ms} ms": {"x-message-ttl": ttl_ms}}
    queues = {label: (f"{base}-{n}", f"{base}-{n}-dlq") for n, label in enumerate(setups)}
    try:
        for label, (queue, dead_letters) in queues.items():
            # Exclusive classic queues: this connection's own, gone with it, and quick to make (a quorum
            # queue starts a Raft cluster); the TTL rule is the same for both kinds.
            channel.queue_declare(dead_letters, exclusive=True)
            channel.queue_declare(queue, exclusive=True, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letters, **setups[label]})
            channel.basic_publish("", queue, b'{"message_id": "m-7f3"}')
        time.sleep(wait_s)  # longer than the TTL: from then on the server must not hand the message out
        rows = {}
        for label, (queue, dead_letters) in queues.items():
            method, _, _ = channel.basic_get(queue, auto_ack=True)
            parked = _dead_lettered(channel, dead_letters, tries=60 if setups[label] else 1)
            rows[label] = {f"read after {wait_s:g} s": "the message" if method is not None else "nothing",
                           "in its dead-letter queue": parked[0], "x-death reason": parked[1]}
        return pd.DataFrame(rows).T
    finally:
        if channel.is_open:
            for queue, dead_letters in queues.values():
                channel.queue_delete(queue)
                channel.queue_delete(dead_letters)
        connection.close()


def _dead_lettered(channel: BlockingChannel, queue: str, *, tries: int) -> tuple[int, str]:
    """How many messages ``queue`` holds and the first one's reason.

    It asks ``tries`` times, 50 ms apart: the dead letter may still be on its way on a busy machine.
    """
    for _ in range(tries):
        method, properties, _ = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            deaths = (properties.headers or {}).get("x-death") or [{}]
            reason = deaths[0].get("reason", "")
            return 1 + method.message_count, reason.decode() if isinstance(reason, bytes) else str(reason)
        time.sleep(0.05)
    return 0, "-"
