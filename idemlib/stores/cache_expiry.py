"""A cache key's time to live, shown on the server's own clock rather than by sleeping a guess.

The claim and its duplicate are sent in one ``MULTI``/``EXEC`` transaction, so the
server runs them one after the other with nothing between them, however busy the
machine is. The second duplicate is sent only once the server's own ``TIME`` has
passed the claim's expiry, so it always meets an expired key. The in-process model
does the same on its virtual clock.
"""

from __future__ import annotations

import time
import uuid

from idemlib.stores.cache import Cache, MemoryCache

MARGIN_MS = 5
"""How far past the expiry the server's clock must be before the late duplicate is sent."""


def _server_ms(cache: Cache) -> int:
    seconds, micros = cache.time()  # type: ignore[attr-defined]  # a Redis server's TIME
    return int(seconds) * 1000 + int(micros) // 1000


def duplicate_before_and_after_expiry(cache: Cache, ttl_ms: int = 100) -> dict[str, str]:
    """Claim a new marker with ``SET NX PX ttl_ms``, then meet it with a duplicate at once and one after it expired.

    Returns what each ``SET NX`` did: ``claimed``, ``caught`` (the marker was there)
    or ``let through`` (the marker was gone, so the duplicate claimed it anew).
    """
    marker = f"lesson-06:ttl:{uuid.uuid4()}"  # a name of its own on every run
    if isinstance(cache, MemoryCache):
        claimed = cache.set(marker, "1", nx=True, px=ttl_ms)
        at_once = cache.set(marker, "1", nx=True, px=ttl_ms)
        cache.clock.advance((ttl_ms + MARGIN_MS) / 1000)
    else:
        transaction = cache.pipeline(transaction=True)  # type: ignore[attr-defined]
        transaction.time()
        transaction.set(marker, "1", nx=True, px=ttl_ms)
        transaction.set(marker, "1", nx=True, px=ttl_ms)
        (seconds, micros), claimed, at_once = transaction.execute()
        expires_ms = int(seconds) * 1000 + int(micros) // 1000 + ttl_ms
        while _server_ms(cache) <= expires_ms + MARGIN_MS:
            time.sleep(0.01)  # until the server's clock, not ours, says the marker has expired
    after = cache.set(marker, "1", nx=True, px=ttl_ms)

    def verdict(answer: object) -> str:
        return "caught" if answer is None else "let through"

    return {"first claim": "claimed" if claimed else "not claimed",
            "a duplicate in the same transaction": verdict(at_once),
            "a duplicate once the server's clock passed it": verdict(after)}
