"""The course's pytest plugin: ``deliver-twice``'s ``postgres_schema`` on the course's own PostgreSQL.

The ``deliver-twice`` package (installed with the course) registers the plugin that gives a
test ``postgres_schema`` and reads ``idempotency_time_limit``; it never starts a server. The
course's tests and lessons load this module::

    pytest_plugins = ["idemlib.operating.pytest_plugin"]

to say where PostgreSQL is when no URL is configured: the course's own server
(``IDEMLIB_POSTGRES_URL``, the local default, or the one ``idemlib.servers`` starts). Without
a server the test is skipped, saying how to start one (it fails where ``IDEMLIB_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

import pytest

from idemlib.servers import require_servers
from idemlib.stores.postgres_store import postgres_unavailable, postgres_url


def pytest_deliver_twice_postgres_url(config: pytest.Config) -> str | None:
    """The course's PostgreSQL, started on first use; the test is skipped (or fails, servers required) without one."""
    if (reason := postgres_unavailable()) is not None:
        if require_servers():
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
        pytest.skip(reason)
    return postgres_url()
