"""Whether a missing server is an error or a skip: ``IDEMLIB_REQUIRE_SERVERS``.

``1`` (CI) requires every server and the browser; a list such as
``postgres,redis,nats`` requires those only, so a machine without root can demand
the servers the course starts by itself and still skip RabbitMQ. A missing server
that is not required is replaced by a model, or its test skipped, with a message.
"""

from __future__ import annotations

import os

from idemlib.servers.catalogue import SERVERS

NAMES = (*SERVERS, "chromium", "axe-core")
"""What ``IDEMLIB_REQUIRE_SERVERS`` may list: every server, the browser the site's tests drive, and the
accessibility engine (axe-core, from npm) they run in it; without it here, ``1`` would skip those tests silently."""


class ServerMissing(RuntimeError):
    """A server the run needs is not there, and ``IDEMLIB_REQUIRE_SERVERS`` requires it."""


def required() -> set[str]:
    """The servers ``IDEMLIB_REQUIRE_SERVERS`` requires (all of :data:`NAMES` for ``1``)."""
    value = os.environ.get("IDEMLIB_REQUIRE_SERVERS", "").strip().lower()
    if value in ("", "0"):
        return set()
    if value == "1":
        return set(NAMES)
    listed = {name.strip() for name in value.split(",") if name.strip()}
    if unknown := listed - set(NAMES):
        raise ValueError(f"IDEMLIB_REQUIRE_SERVERS={value!r} names {', '.join(sorted(unknown))}; "
                         f"it takes 1 or a list of {', '.join(NAMES)}")
    return listed


def require_servers(server: str | None = None) -> bool:
    """Whether a missing ``server`` is an error rather than a skip; without a name, whether every server is required."""
    wanted = required()
    return wanted == set(NAMES) if server is None else server in wanted


def ready(reason: str | None, otherwise: str) -> bool:
    """True when ``reason`` (why a server cannot be reached, from any ``..._unavailable()``) is None.

    Otherwise raise :class:`ServerMissing` where that server is required, or print
    the reason and ``otherwise``, what the lesson does instead.
    """
    if reason is None:
        return True
    if require_servers(getattr(reason, "server", None)):
        raise ServerMissing(f"IDEMLIB_REQUIRE_SERVERS requires it. {reason}")
    print(f"{reason} {otherwise}")
    return False
