"""Extending a lease on the real NATS JetStream: the in-progress ack (lesson 09).

A JetStream consumer's lease on a delivery is its AckWait: a message not acked
within it is delivered again. A consumer still at work sends an in-progress ack
(``+WPI``; ``msg.in_progress()`` in nats-py), and the server restarts the wait.
:func:`extend_on_jetstream` holds one message for longer than the AckWait twice,
once without and once with in-progress acks, and reports what the server did.

This runs on the wall clock, as a real server must. The outcome "redelivered" is
waited for, not guessed: the run fetches until the redelivery comes. The outcome
"not redelivered" holds as long as each in-progress ack reaches the server within
an AckWait of the one before; they are sent every sixth of it and each is
confirmed by the server before the next is due, a margin of over a second.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import nats
import pandas as pd
from nats.js.api import ConsumerConfig, StreamConfig

from idemlib.brokers.jetstream import run
from idemlib.servers import NATS, ready

_runs = itertools.count(1)


async def _hold(extend: bool, ack_wait: float, hold: float, every: float) -> dict[str, Any]:
    """Publish one message, take it, keep it for ``hold`` seconds (extending or not), ack it; say what happened."""
    connection = await nats.connect(NATS.url(), connect_timeout=2, max_reconnect_attempts=0)
    js = connection.jetstream()
    name = f"IDEMLIB_L09_{os.getpid()}_{next(_runs)}"
    await js.add_stream(StreamConfig(name=name, subjects=[name.lower()]))
    try:
        subscription = await js.pull_subscribe(name.lower(), durable="payments", stream=name,
                                               config=ConsumerConfig(ack_wait=ack_wait, max_deliver=5))
        await js.publish(name.lower(), b'{"message_id": "m-7f3", "order_id": 1042, "amount": 40}')
        [first] = await subscription.fetch(1, timeout=5)
        confirmed = 0
        done = asyncio.Event()

        async def keep_lease() -> None:
            nonlocal confirmed
            while not done.is_set():
                try:
                    await asyncio.wait_for(done.wait(), timeout=every)
                    return  # told to stop: no in-progress ack goes out after the work is over
                except TimeoutError:
                    pass
                # Sent as a request, so the server confirms it (msg.in_progress() sends the same +WPI unconfirmed).
                await connection.request(first.reply, b"+WPI", timeout=ack_wait)
                confirmed += 1

        extender = asyncio.create_task(keep_lease()) if extend else None
        holder = first
        try:
            # Without in-progress acks the redelivery is waited for, however long a busy machine makes it take.
            [holder] = await subscription.fetch(1, timeout=hold if extend else hold + 10)
            redelivered = f"yes: delivery {holder.metadata.num_delivered}, while the first was still held"
        except nats.errors.TimeoutError:
            redelivered = "no"
        if extender is not None:
            # Stopped and awaited, not cancelled: a cancel can land while a request is in flight and be lost,
            # leaving the task to fail on the closed connection after the run (seen on a busy machine).
            done.set()
            await extender
        await holder.ack_sync()  # the latest delivery's ack, confirmed by the server before its state is read
        info = await subscription.consumer_info()
        # How many went out depends on the wall clock; that each was confirmed in time does not.
        extensions = f"every {every:g} s, each confirmed by the server" if confirmed else "none"
        return {"in-progress acks": extensions, "redelivered while held": redelivered,
                "deliveries": info.delivered.consumer_seq if info.delivered else 0,
                "left unacked": info.num_ack_pending}
    finally:
        await js.delete_stream(name)
        await connection.close()


def extend_on_jetstream(ack_wait: float = 1.5, hold: float = 3.2) -> pd.DataFrame:
    """One message held for ``hold`` seconds (more than two AckWaits) on the real JetStream, without and with in-progress acks.

    Both runs go at once, each on a stream of its own that is deleted after.
    """
    async def both() -> list[dict[str, Any]]:
        return list(await asyncio.gather(_hold(False, ack_wait, hold, ack_wait / 6),
                                         _hold(True, ack_wait, hold, ack_wait / 6)))

    rows = run(both(), timeout=hold + 20)
    return pd.DataFrame(rows, index=[f"held {hold:g} s, AckWait {ack_wait:g} s, no in-progress ack",
                                     f"held {hold:g} s, AckWait {ack_wait:g} s, in-progress ack every {ack_wait / 6:g} s"])


def jetstream_ready() -> bool:
    """True when the real NATS server answers. When it does not, say why and how to start it, or raise where
    servers are required."""
    return ready(NATS.unavailable(), "The JetStream run is skipped; the simulator's runs above show the same.")
