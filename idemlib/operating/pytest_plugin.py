"""A pytest plugin for your own suite: a PostgreSQL schema of its own for each test.

Add to your top-level ``conftest.py`` (or to a test module)::

    pytest_plugins = ["idemlib.operating.pytest_plugin"]

and a test may ask for ``postgres_schema``: an empty schema on the PostgreSQL at
``IDEMLIB_POSTGRES_URL`` (or the local default), dropped when the test ends, whose
``connect()`` opens a psycopg connection that works inside it. That is what
:func:`~idemlib.operating.testing.assert_idempotent` needs to give each delivery a
connection of its own::

    from idemlib import assert_idempotent

    def test_my_consumer(postgres_schema):
        assert_idempotent(my_consumer, my_messages, connect=postgres_schema.connect,
                          reset=create_my_tables, state=read_my_business_rows)

Without a server the test is skipped, saying how to start one (it fails where
``IDEMLIB_REQUIRE_SERVERS=1``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from idemlib.operating.testing import PostgresSchema, fresh_schema
from idemlib.servers import require_servers
from idemlib.stores.postgres_store import postgres_unavailable


@pytest.fixture
def postgres_schema() -> Iterator[PostgresSchema]:
    """A fresh schema on the PostgreSQL at ``IDEMLIB_POSTGRES_URL``, dropped after the test; skipped without a server."""
    if (reason := postgres_unavailable()) is not None:
        if require_servers():
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
        pytest.skip(reason)
    with fresh_schema() as schema:
        yield schema
