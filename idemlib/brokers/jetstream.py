"""A thin adapter for a real NATS JetStream (through nats-py): a stream with a short duplicate window.

nats-py is asyncio; the notebook's cells are not. :func:`run` hands each coroutine to
one event loop that lives in a background thread for the whole session, so a cell
calls the adapter like any other function and gets the result back.

Each :class:`JetStreamChannel` creates its own stream and durable pull consumer,
named uniquely for this process and run, and deletes the stream (and with it the
consumer) when its ``with`` block ends. The stream deduplicates publishes that carry
the same ``Nats-Msg-Id`` inside its ``duplicate_window``; the consumer redelivers a
message that is not acked within ``ack_wait``, with the count in its metadata.

Two things here are the adapter's, not the server's: JetStream has no redelivered
flag (the adapter derives one from ``num_delivered``) and no dead-letter queue (the
adapter reads terminated messages back from the stream). Every ack is a double ack
(``ack_sync``), and :meth:`JetStreamChannel.ack` reports what the server answered.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import pandas as pd
from nats.js.api import ConsumerConfig, StreamConfig

from idemlib.brokers.sources import BrokerDelivery
from idemlib.messages import Message
from idemlib.servers import NATS

T = TypeVar("T")
_runs = itertools.count(1)
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()

DUPLICATE_WINDOW = 0.5
"""The streams' duplicate window in seconds: short, so the lesson can wait it out (NATS's default is 2 minutes),
long enough that a resend a moment later is still inside it on a busy machine."""
ACK_WAIT = 0.2
"""The consumer's ack wait in seconds: its lease on a delivery (NATS's default is 30 seconds)."""
MAX_DELIVER = 5
"""How many times the lesson's consumers hand a message out before they stop (JetStream's default: no limit)."""
MARGIN = 0.1
"""Extra wait past a window or an ack wait, so the server's timers have certainly fired."""
ACK_ANSWER_WAIT = 2.0
"""How long a double ack waits for the server's answer before it counts as unanswered."""


def run(coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coroutine`` on the adapter's background event loop and wait for its result."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="idemlib-nats", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _loop).result(timeout)


def server_version() -> str:
    """The NATS server's version, as it announces it to every client that connects (e.g. NATS 2.9.10)."""
    async def ask() -> str:
        connection = await nats.connect(NATS.url(), connect_timeout=2, max_reconnect_attempts=0)
        version = connection.connected_server_version
        await connection.close()
        return f"NATS {version.major}.{version.minor}.{version.patch}"
    return run(ask())


@dataclass(frozen=True)
class Stored:
    """What JetStream answered to one publish: the stream sequence, and whether it was a duplicate."""

    key: str
    sequence: int
    duplicate: bool


def server_defaults() -> dict[str, object]:
    """What the server fills in for a stream and a durable consumer that set nothing: read back from a fresh pair."""
    async def ask() -> dict[str, object]:
        connection = await nats.connect(NATS.url(), connect_timeout=2, max_reconnect_attempts=0)
        js = connection.jetstream()
        run_id = f"{os.getpid()}_{next(_runs)}"
        stream = f"IDEMLIB_L07_DEFAULTS_{run_id}"
        try:
            info = await js.add_stream(StreamConfig(name=stream, subjects=[f"idemlib.l07.defaults.{run_id}"]))
            consumer = await js.add_consumer(stream, ConsumerConfig(durable_name="payments"))
            return {"duplicate window (s)": info.config.duplicate_window, "ack wait (s)": consumer.config.ack_wait,
                    "max deliver": consumer.config.max_deliver}
        finally:
            await js.delete_stream(stream)
            await connection.close()
    return run(ask())


class JetStreamChannel:
    """A JetStream stream and a durable pull consumer on the real server, driven through the channel verbs."""

    name = "NATS JetStream (real)"
    claims = ("client library's own retry", "application resend inside the window", "ack lost on the way")
    """What JetStream's "exactly once" claims: Nats-Msg-Id deduplication inside the window, and double acks."""

    def __init__(self, *, duplicate_window: float = DUPLICATE_WINDOW, ack_wait: float = ACK_WAIT,
                 max_deliver: int = MAX_DELIVER) -> None:
        run_id = f"{os.getpid()}_{next(_runs)}"
        self.stream, self.subject = f"IDEMLIB_L07_{run_id}", f"idemlib.l07.{run_id}"
        self.duplicate_window, self.ack_wait = duplicate_window, ack_wait
        self.stored: list[Stored] = []
        self.deliveries: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []  # each ack: which delivery, and what the server answered
        self._terminated: list[int] = []
        run(self._open(max_deliver))

    async def _open(self, max_deliver: int) -> None:
        self._nc = await nats.connect(NATS.url(), connect_timeout=2, max_reconnect_attempts=0)
        self._js = self._nc.jetstream()
        await self._js.add_stream(StreamConfig(name=self.stream, subjects=[self.subject],
                                               duplicate_window=self.duplicate_window))
        try:
            self._sub = await self._js.pull_subscribe(
                self.subject, durable="payments", stream=self.stream,
                config=ConsumerConfig(ack_wait=self.ack_wait, max_deliver=max_deliver))
        except BaseException:
            # No channel comes back to close, so the stream it just created must not outlive the error.
            await self._js.delete_stream(self.stream)
            await self._nc.close()
            raise

    def __enter__(self) -> JetStreamChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the stream (its consumer goes with it) and close the connection."""
        async def shut() -> None:
            if self._nc.is_connected:
                await self._js.delete_stream(self.stream)
                await self._nc.close()
        run(shut())

    def publish(self, message: Message, key: str, *, retry: bool = False) -> bool:
        """Publish with ``Nats-Msg-Id`` = ``key``; False when the stream answered that it is a duplicate."""
        headers = {"Nats-Msg-Id": key, "Event-Id": str(message.message_id)}
        ack = run(self._js.publish(self.subject, json.dumps(message.body).encode(), headers=headers))
        self.stored.append(Stored(key, ack.seq, bool(ack.duplicate)))
        return not ack.duplicate

    def receive(self, timeout: float = 0.05, patience: float = 3.0) -> BrokerDelivery | None:
        """Fetch the next delivery from the pull consumer, or None when the consumer has nothing left.

        A quick fetch first; only if the consumer still counts a message as pending
        (not yet delivered, or delivered and unacked, so due again) does it wait up
        to ``patience`` seconds, so a busy machine cannot make a due message look absent.
        """
        async def fetch(wait: float) -> Any:
            try:
                return (await self._sub.fetch(1, timeout=wait))[0]
            except nats.errors.TimeoutError:
                return None

        async def fetch_patiently() -> Any:
            if (msg := await fetch(timeout)) is not None:
                return msg
            info = await self._sub.consumer_info()
            due = (info.num_pending or 0) + (info.num_ack_pending or 0) > 0
            return await fetch(patience) if due and patience > 0 else None
        msg = run(fetch_patiently())
        if msg is None:
            return None
        meta = msg.metadata
        self.deliveries.append({"stream sequence": meta.sequence.stream, "num_delivered": meta.num_delivered,
                                "Nats-Msg-Id": msg.headers.get("Nats-Msg-Id")})
        message = Message(msg.headers.get("Event-Id"), json.loads(msg.data))
        return BrokerDelivery(message, meta.num_delivered, meta.num_delivered > 1, msg)

    def ack(self, delivery: BrokerDelivery, *, lost: bool = False) -> bool:
        """Ack and wait for the server's answer (a double ack): True when it answered, False when no answer came.

        ``lost``: the ack does not reach the server. The adapter plays that by not sending
        it; the client sees what a lost double ack looks like, no answer.
        """
        msg = delivery.handle
        answer = "no answer: the ack was lost" if lost else _answer(msg)
        self.acks.append({"delivery": msg.metadata.num_delivered, "server's answer": answer})
        return answer == "ack taken"

    def drop(self, delivery: BrokerDelivery) -> None:
        """The consumer dies without acking: JetStream redelivers once the ack wait has run out."""
        time.sleep(self.ack_wait + MARGIN)

    def outlive_lease(self, delivery: BrokerDelivery) -> None:
        """The handler is still busy when the ack wait runs out; the consumer hands the message out again."""
        time.sleep(self.ack_wait + MARGIN)

    def give_up(self, delivery: BrokerDelivery) -> None:
        """Terminate the delivery (``+TERM``): no more redeliveries. The message stays in the stream."""
        run(delivery.handle.term())
        self._terminated.append(delivery.handle.metadata.sequence.stream)

    def dead_letters(self) -> list[tuple[Message, dict[str, Any]]]:
        """The messages this consumer terminated, read back from the stream by their sequence numbers.

        JetStream has no dead-letter queue: the stream keeps the message (a consumer
        that runs out of ``max_deliver`` only publishes an advisory, not tracked here).
        """
        letters = []
        for sequence in self._terminated:
            raw = run(self._js.get_msg(self.stream, sequence))
            headers = raw.headers or {}
            letters.append((Message(headers.get("Event-Id"), json.loads(raw.data or b"")),
                            {"reason": "terminated (+TERM)", "stream sequence": sequence,
                             "Nats-Msg-Id": headers.get("Nats-Msg-Id")}))
        self._terminated = []
        return letters

    def replay_dead_letters(self) -> int:
        """Publish every terminated message again, with its original ``Nats-Msg-Id`` (a replay is a new publish)."""
        return sum(self.publish(message, str(details["Nats-Msg-Id"])) for message, details in self.dead_letters())

    def pass_window(self) -> None:
        """Wait out the stream's duplicate window."""
        time.sleep(self.duplicate_window + MARGIN)

    def stream_state(self) -> dict[str, int]:
        """How many messages the stream holds and its first and last sequence numbers."""
        info = run(self._js.stream_info(self.stream))
        return {"messages": info.state.messages, "first sequence": info.state.first_seq,
                "last sequence": info.state.last_seq}


def _answer(msg: Any) -> str:
    """Send ``msg``'s double ack and say what came back."""
    async def ack() -> str:
        try:
            await msg.ack_sync(timeout=ACK_ANSWER_WAIT)
        except nats.errors.TimeoutError:
            return "no answer within the wait"
        except nats.errors.NoRespondersError:
            return "no responders: the consumer is gone"
        except nats.errors.MsgAlreadyAckdError:
            return "refused by the client: this delivery was already acked"
        return "ack taken"
    return run(ack())


def double_acks(message: Message) -> pd.DataFrame:
    """One delivery whose first ack is lost and which the consumer then acks again; then the ack wait passes.

    Each row is what the consumer saw: the server's answer to each double ack, and
    whether anything came back after the ack wait.
    """
    with JetStreamChannel() as channel:
        channel.publish(message, str(message.message_id))
        delivery = channel.receive()
        assert delivery is not None, f"JetStream did not deliver {message.label}"
        for lost in (True, False):
            channel.ack(delivery, lost=lost)
        steps = ["acks; the ack is lost on the way", "acks again"]
        rows = [(step, ack["server's answer"]) for step, ack in zip(steps, channel.acks)]
        channel.drop(delivery)
        rows.append(("receive after the ack wait", "nothing" if channel.receive() is None else "a redelivery"))
    return pd.DataFrame(rows, columns=["the consumer", "what it learned"]).set_index("the consumer")
