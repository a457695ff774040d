"""A cache with a time to live, outside the database transaction: Redis's ``SET key value NX EX seconds``.

The real thing is a Redis server, used through the ``redis`` client; where none
runs, :class:`MemoryCache` keeps the same call and the same answers in process, on
the simulation's clock. Either way, the cache and the database cannot commit
together: that is the lesson.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol, cast

from idemlib.clock import VirtualClock
from idemlib.servers import REDIS

if TYPE_CHECKING:  # the client is imported where a real server is used: the model needs none of it
    import redis


class Cache(Protocol):
    def set(self, name: str, value: Any, *, nx: bool = False, ex: int | None = None,
            px: int | None = None) -> bool | None: ...
    def get(self, name: str) -> Any: ...


def redis_url() -> str:
    """Where the course finds Redis: ``IDEMLIB_REDIS_URL``, a server at the default address, or its own."""
    return REDIS.url()


def redis_unavailable() -> str | None:
    """None when a Redis server answers at :func:`redis_url`; otherwise why not, and how to start one."""
    import redis

    try:
        redis.Redis.from_url(redis_url(), socket_connect_timeout=2).ping()
        return None
    except redis.RedisError as error:
        return REDIS.reason(error)


def real_redis() -> redis.Redis:
    """A client of the real Redis server (see :func:`redis_unavailable` first)."""
    import redis

    return redis.Redis.from_url(redis_url(), socket_connect_timeout=2)


def what_it_is(cache: Cache) -> dict[str, str]:
    """What the cache server says it is and how it may forget before a key's time to live: its name and
    version, the Redis version it answers as, its memory limit and eviction policy, and whether it writes
    its data to disk (append-only file, snapshots). Read from the server (INFO, CONFIG GET); nothing is set."""
    if isinstance(cache, MemoryCache):
        return {"server": "in-process model", "answers as Redis": "", "maxmemory (bytes, 0: no limit)": "",
                "maxmemory-policy": "", "appendonly": "", "save (snapshots)": ""}
    server = cast("redis.Redis", cache)  # not the model: a client of a real server
    info = server.info("server")
    name = str(info.get("server_name", "redis"))
    config: dict[Any, Any] = {**server.config_get("maxmemory"), **server.config_get("maxmemory-policy"),
              **server.config_get("appendonly"), **server.config_get("save")}
    return {"server": f"{name.capitalize()} {info.get(f'{name}_version', info.get('redis_version'))}",
            "answers as Redis": str(info.get("redis_version")), "maxmemory (bytes, 0: no limit)": config["maxmemory"],
            "maxmemory-policy": config["maxmemory-policy"], "appendonly": config["appendonly"],
            "save (snapshots)": config["save"] or "(none)"}


class MemoryCache:
    """Redis's SET NX EX and GET, in process, with keys expiring on a virtual clock."""

    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock or VirtualClock()
        self._values: dict[str, tuple[Any, float | None]] = {}

    def set(self, name: str, value: Any, *, nx: bool = False, ex: int | None = None,
            px: int | None = None) -> bool | None:
        """Store ``value`` for ``ex`` seconds or ``px`` milliseconds; with ``nx`` only if ``name`` is absent.

        Like Redis, it answers None when ``nx`` finds the name there, and a name whose
        time to live has passed is absent at once.
        """
        if nx and self.get(name) is not None:
            return None
        ttl = ex if px is None else px / 1000
        self._values[name] = (value, None if ttl is None else self.clock.now() + ttl)
        return True

    def get(self, name: str) -> Any:
        value, expires = self._values.get(name, (None, None))
        if expires is not None and self.clock.now() >= expires:
            del self._values[name]
            return None
        return value


def let_pass(cache: Cache, seconds: float) -> None:
    """Let ``seconds`` go by for ``cache``: real time for a Redis server (this sleeps), the model's own clock otherwise."""
    if isinstance(cache, MemoryCache):
        cache.clock.advance(seconds)
    else:
        time.sleep(seconds)
