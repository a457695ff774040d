"""Async consumers, awaited: ``async def handle(connection, message)`` on asyncpg or psycopg's ``AsyncConnection``.

Each thread that delivers (the consumer's, and each of a race's) runs the coroutines of its
deliveries in an event loop of its own, kept for the thread's life so that a connection opened
in it stays usable there. A statement is a step when the consumer calls it (``execute``,
``fetch``, ``fetchrow``, ``fetchval``, ``commit``, and the clean exit of ``async with
conn.transaction():``), just before it is sent, so a death there leaves it unsent.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any

_threads = threading.local()


def settle(value: object) -> Any:
    """``value`` itself, or, when it is awaitable (a coroutine of an async consumer or driver), what it returns,
    awaited in this thread's event loop."""
    if not inspect.isawaitable(value):
        return value
    loop: asyncio.AbstractEventLoop | None = getattr(_threads, "loop", None)
    if loop is None or loop.is_closed():
        loop = _threads.loop = asyncio.new_event_loop()

    async def wait() -> Any:
        return await value

    return loop.run_until_complete(wait())


def is_async(connection: Any) -> bool:
    """An asyncpg connection or psycopg's ``AsyncConnection``: its ``close`` is a coroutine function."""
    return inspect.iscoroutinefunction(getattr(type(connection), "close", None))


async def then(pending: Awaitable[Any], wrap: Callable[[Any], Any]) -> Any:
    """Await a driver's call, then wrap what it returns (a cursor to watch in turn)."""
    return wrap(await pending)
