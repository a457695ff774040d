"""Stores with a time to live: expiry is not always deletion.

DynamoDB deletes an expired item in the background, typically within days, and
until then the item still shows up in reads (lesson 06's key-value model plays
that, with the deletion delay it assumes). Redis treats a key as gone the moment
its time to live has passed: a read, or a ``SET NX``, finds it absent at once.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from idemlib.clock import VirtualClock
from idemlib.retention_and_ordering.horizon import DAY, HOUR
from idemlib.stores.cache import real_redis
from idemlib.stores.keyvalue import KeyValueTable

MODEL_DELETION_DELAY = 2 * DAY
"""The longest deletion delay lesson 06's key-value model draws: the course's assumption, not an AWS figure."""

def ttl_reads(ttl: float, hours: list[float], markers: int = 50, seed: int = 3,
              delay: float = MODEL_DELETION_DELAY) -> pd.DataFrame:
    """``markers`` IDs written at time 0 with a time to live of ``ttl`` seconds, read at each of ``hours``.

    ``stored`` is what a plain Scan returns (items not yet deleted, however long
    expired); ``live`` is what a reader gets when it filters on the expiry attribute
    (``expires_at > now``), which is what the time to live promised. The model
    spreads each deletion over the ``delay`` seconds after expiry (by default the
    course's assumption :data:`MODEL_DELETION_DELAY`; AWS gives no maximum).
    """
    clock = VirtualClock()
    table = KeyValueTable(clock=clock, seed=seed, deletion_delay_seconds=delay)
    for n in range(markers):
        table.put(f"msg#p-{n:02d}", {"message_id": f"p-{n:02d}", "expires_at": ttl})
    rows = []
    for hour in hours:
        clock.advance_to(hour * HOUR)
        table.reap()
        live = sum(1 for item in table.items.values() if item["expires_at"] > clock.now())
        rows.append((hour, len(table.items), live))
    return pd.DataFrame(rows, columns=["hours after writing", "stored (plain Scan)", "live (filtered on expires_at)"]
                        ).set_index("hours after writing")


def claim_with_ttl(table: KeyValueTable, message_id: str, ttl: float, *, filter_expired: bool) -> bool:
    """A conditional put of ``msg#<id>`` with a time to live; True if the ID was claimed (so: do the work).

    Without ``filter_expired`` the condition is ``attribute_not_exists(pk)``: an
    expired marker the store has not deleted yet still blocks. With it, the
    condition adds ``OR expires_at <= :now``, so the ID is remembered exactly ``ttl``.
    """
    key, now = f"msg#{message_id}", table.clock.now()
    table.reap()
    existing = table.items.get(key)
    if existing is not None and (not filter_expired or existing["expires_at"] > now):
        return False
    table.items[key] = {"message_id": message_id, "expires_at": now + ttl}
    return True


def ttl_late_duplicates(ttl: float, arrivals_hours: list[float], seed: int = 3) -> pd.DataFrame:
    """``m-7f3`` handled at time 0 with a marker kept ``ttl`` seconds; one duplicate arrives at each of ``arrivals_hours``.

    Each arrival is played on a fresh store, with and without the filter on the
    expiry attribute: the column says whether the duplicate was charged again.
    """
    rows = []
    for hour in arrivals_hours:
        verdicts = []
        for filtered in (False, True):
            clock = VirtualClock()
            table = KeyValueTable(clock=clock, seed=seed)
            claim_with_ttl(table, "m-7f3", ttl, filter_expired=filtered)
            clock.advance_to(hour * HOUR)
            verdicts.append("charged again" if claim_with_ttl(table, "m-7f3", ttl, filter_expired=filtered)
                            else "caught")
        rows.append((hour, *verdicts))
    return pd.DataFrame(rows, columns=["duplicate arrives (h)", "attribute_not_exists(pk)",
                                       "... OR expires_at <= :now"]).set_index("duplicate arrives (h)")


def redis_expiry(ttl_ms: int = 500, key: str = "idemlib:l10:msg:m-7f3") -> pd.DataFrame:
    """``m-7f3``'s marker on the real Redis with ``SET key 1 NX PX ttl_ms``, then a duplicate's ``SET NX`` before
    and after the time to live: after it, the key is absent at once and the duplicate claims it again.

    The duplicate within the time to live follows the first command at once (half a second
    leaves room for a busy machine); the wait after it is twice the time to live (a busy
    machine only waits longer). The key is deleted at the end; its name is this lesson's
    own, on a server others share.
    """
    client = real_redis()
    client.delete(key)
    try:
        steps: list[tuple[str, Any]] = [("first delivery: SET NX PX", client.set(key, 1, nx=True, px=ttl_ms))]
        steps.append(("duplicate, within the time to live: SET NX PX", client.set(key, 1, nx=True, px=ttl_ms)))
        time.sleep(2 * ttl_ms / 1000)
        steps.append(("after the time to live: EXISTS", client.exists(key)))
        steps.append(("duplicate, after the time to live: SET NX PX", client.set(key, 1, nx=True, px=ttl_ms)))
        server = client.info("server")
        # Valkey reports its own name and version beside the Redis version it is compatible with.
        name = str(server.get("server_name", "redis")).capitalize()
        version = server.get(f"{name.lower()}_version", server["redis_version"])
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "?")
        limit = client.config_get("maxmemory").get("maxmemory", "?")
        steps.append(("this server's maxmemory-policy (maxmemory in bytes; 0: no limit)", f"{policy} ({limit})"))
    finally:
        client.delete(key)
    frame = pd.DataFrame([(what, "OK (claimed)" if answer is True else "nil (refused)" if answer is None else answer)
                          for what, answer in steps], columns=[f"on {name} {version}, time to live {ttl_ms} ms",
                                                               "answer"])
    return frame.set_index(frame.columns[0])
