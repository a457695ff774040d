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

The plugin also sets how long one delivery may take before ``assert_idempotent``
fails it as blocked (:data:`~idemlib.operating.testing.TIME_LIMIT`, 60 s): a safety
net that turns a consumer blocked for good into a failure instead of a hung suite.
Change it for the whole suite in your pytest configuration (``idempotency_time_limit
= 120`` under ``[pytest]``, or ``-o idempotency_time_limit=120`` on the command line),
or for one call with ``time_limit=``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from idemlib.operating import testing
from idemlib.operating.testing import PostgresSchema, fresh_schema
from idemlib.servers import require_servers
from idemlib.stores.postgres_store import postgres_unavailable


_SETTING = "idempotency_time_limit"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(_SETTING, "seconds one delivery may take before assert_idempotent fails it as blocked "
                  f"(default {testing.TIME_LIMIT:g})", default=str(testing.TIME_LIMIT))


def pytest_configure(config: pytest.Config) -> None:
    value = config.getini(_SETTING)
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(f"{_SETTING} is a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise pytest.UsageError(f"{_SETTING} must be a positive number of seconds, not {value!r}")
    testing.TIME_LIMIT = seconds


@pytest.fixture
def postgres_schema() -> Iterator[PostgresSchema]:
    """A fresh schema on the PostgreSQL at ``IDEMLIB_POSTGRES_URL``, dropped after the test; skipped without a server."""
    if (reason := postgres_unavailable()) is not None:
        if require_servers():
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
        pytest.skip(reason)
    with fresh_schema() as schema:
        yield schema
