"""The minimum of NATS JetStream that lesson 10 needs: a stream per run, publish, a durable pull consumer, ack.

nats-py is asynchronous; a private event loop in a daemon thread runs its
coroutines, so notebook cells (which already run inside Jupyter's own loop) stay
synchronous. Lesson 07 has a fuller adapter; the two can share this loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from idemlib.retention_and_ordering.ordered_log import Appended, Record
from idemlib.servers import NATS

T = TypeVar("T")
_runs = itertools.count(1)


class _Loop:
    """A private asyncio event loop in a daemon thread: run a coroutine and wait for its result.

    Jupyter already runs a loop in the main thread, so ``asyncio.run`` cannot be used in a cell.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class JetStreamLog:
    """A real JetStream stream named for this process and run, with subjects ``<stream>.<subject>``.

    ``ack_wait`` is short (seconds) so that a record a crashed consumer left unacked
    comes back quickly. ``duplicate_window`` (seconds) is how long the stream
    remembers a ``Nats-Msg-Id`` to drop a repeated publish; None keeps the server's
    default. :meth:`close` deletes the stream.
    """

    kind = "real NATS JetStream"

    def __init__(self, url: str | None = None, ack_wait: float = 0.2, duplicate_window: float | None = None) -> None:
        import nats

        self.name = f"idemlib_l10_{os.getpid()}_{next(_runs)}"
        self.ack_wait = ack_wait
        self._loop = _Loop()

        async def connect() -> Any:
            connection = await nats.connect(url or NATS.url(), connect_timeout=3, allow_reconnect=False)
            stream = connection.jetstream()
            window: dict[str, Any] = {} if duplicate_window is None else {"duplicate_window": duplicate_window}
            await stream.add_stream(name=self.name, subjects=[f"{self.name}.>"], **window)
            return connection, stream

        self._connection, self._js = self._loop.run(connect())

    def publish(self, subject: str, data: dict[str, Any], msg_id: str | None = None) -> Appended:
        """Publish a record; with ``msg_id`` as its ``Nats-Msg-Id`` header, which the stream deduplicates on."""
        headers = {"Nats-Msg-Id": msg_id} if msg_id is not None else None
        ack = self._loop.run(self._js.publish(f"{self.name}.{subject}", json.dumps(data).encode(), headers=headers))
        return Appended(int(ack.seq), bool(ack.duplicate))

    def append(self, subject: str, data: dict[str, Any]) -> int:
        return self.publish(subject, data).seq

    def duplicate_window(self) -> float:
        """The stream's duplicate window in seconds, as the server holds it (its default unless one was given)."""
        info = self._loop.run(self._js.stream_info(self.name))
        return float(info.config.duplicate_window)

    def max_ack_pending(self, consumer: str) -> int:
        """The ``max_ack_pending`` the server holds for ``consumer``: how many records it may have out unacked."""
        info = self._loop.run(self._js.consumer_info(self.name, consumer))
        return int(info.config.max_ack_pending)

    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> _JetStreamSubscription:
        from nats.js.api import AckPolicy, ConsumerConfig
        from nats.js.errors import NotFoundError

        async def bind() -> Any:
            try:
                await self._js.consumer_info(self.name, consumer)
            except NotFoundError:
                await self._js.add_consumer(self.name, ConsumerConfig(
                    durable_name=consumer, ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
                    max_ack_pending=max_in_flight, filter_subject=f"{self.name}.{subject or '>'}"))
            return await self._js.pull_subscribe_bind(durable=consumer, stream=self.name)

        return _JetStreamSubscription(self, consumer, self._loop.run(bind()))

    def close(self) -> None:
        async def finish() -> None:
            try:
                await self._js.delete_stream(self.name)
            finally:
                await self._connection.close()

        try:
            self._loop.run(finish())
        finally:
            self._loop.stop()


class _JetStreamSubscription:
    def __init__(self, log: JetStreamLog, consumer: str, subscription: Any) -> None:
        self._log, self._consumer, self._sub = log, consumer, subscription

    def fetch(self) -> Record | None:
        import nats.errors

        async def one() -> Any:
            try:
                return (await self._sub.fetch(1, timeout=self._log.ack_wait * 3))[0]
            except (TimeoutError, nats.errors.TimeoutError):
                return None

        message = self._log._loop.run(one())
        if message is None:
            return None
        subject = message.subject.removeprefix(f"{self._log.name}.")
        return Record(message.metadata.sequence.stream, subject, json.loads(message.data),
                      lambda: self._log._loop.run(message.ack_sync()))

    def done(self) -> bool:
        info = self._log._loop.run(self._log._js.consumer_info(self._log.name, self._consumer))
        return info.num_pending == 0 and info.num_ack_pending == 0

    def close(self) -> None:
        self._log._loop.run(self._sub.unsubscribe())
