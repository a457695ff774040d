"""The pytest plugin, registered when the package is installed: a PostgreSQL schema per test, and the suite's settings.

A test may ask for ``postgres_schema``: an empty schema on the configured PostgreSQL,
dropped when the test ends, whose ``connect()`` opens a psycopg connection inside it::

    from deliver_twice import assert_idempotent

    def test_my_consumer(postgres_schema):
        assert_idempotent(my_consumer, my_messages, connect=postgres_schema.connect, reset=create_my_tables)

Where the server is, first found wins: ``--deliver-twice-postgres-url=URL``, the ini option
``deliver_twice_postgres_url``, the environment variable ``DELIVER_TWICE_POSTGRES_URL``,
then the ``pytest_deliver_twice_postgres_url`` hook of a project's conftest. The plugin
never starts a server. A test asking for ``postgres_schema`` fails, never skips, when none
is configured, when it does not answer, or when it refuses the credentials, with the
server's own reason: a suite never stays green having tested nothing.

``idempotency_time_limit`` (ini, seconds, default 60) is how long one delivery may take before
``assert_idempotent`` fails it as blocked: a safety net that turns a hang into a failure. It is
read from this run's pytest configuration, for this run's tests only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from deliver_twice import hooks
from deliver_twice.postgres import DatabaseUnavailable, PostgresSchema
from deliver_twice.scenarios import TIME_LIMIT, suite_time_limit

TIME_SETTING = "idempotency_time_limit"
URL_SETTING = "deliver_twice_postgres_url"
URL_VARIABLE = "DELIVER_TWICE_POSTGRES_URL"
time_limit_key = pytest.StashKey[float]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(TIME_SETTING, "seconds one delivery may take before assert_idempotent fails it as blocked "
                  f"(default {TIME_LIMIT:g})", default=str(TIME_LIMIT))
    parser.addini(URL_SETTING, f"the PostgreSQL URL postgres_schema uses (else ${URL_VARIABLE})", default="")
    parser.getgroup("deliver-twice").addoption("--deliver-twice-postgres-url", dest=URL_SETTING, default=None,
                                               help="the PostgreSQL URL postgres_schema uses")


def pytest_configure(config: pytest.Config) -> None:
    value = config.getini(TIME_SETTING)
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(f"{TIME_SETTING} is a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise pytest.UsageError(f"{TIME_SETTING} must be a positive number of seconds, not {value!r}")
    config.stash[time_limit_key] = seconds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    # The limit of this run's configuration, for this test only: nothing is left behind for another session.
    token = suite_time_limit.set(item.config.stash.get(time_limit_key, TIME_LIMIT))
    try:
        return (yield)
    finally:
        suite_time_limit.reset(token)


def postgres_url(config: pytest.Config) -> str | None:
    """The configured PostgreSQL URL, first found of option, ini, environment and hook; None when none is."""
    return (config.getoption(URL_SETTING) or config.getini(URL_SETTING) or os.environ.get(URL_VARIABLE)
            or config.hook.pytest_deliver_twice_postgres_url(config=config))


@pytest.fixture
def postgres_schema(request: pytest.FixtureRequest) -> Iterator[PostgresSchema]:
    """A fresh schema on the configured PostgreSQL, dropped after the test; fails saying why when there is none."""
    url = postgres_url(request.config)
    if not url:
        pytest.fail(f"postgres_schema needs a PostgreSQL: pass --deliver-twice-postgres-url=URL, set {URL_SETTING} "
                    f"in your pytest configuration or {URL_VARIABLE} (deliver-twice never starts a server)",
                    pytrace=False)
    try:
        schema = PostgresSchema(url)
    except DatabaseUnavailable as error:
        reason = str(error)
    else:
        reason = ""
    if reason:  # failed outside the except block, so the report shows the reason once, not a chain
        pytest.fail(reason, pytrace=False)
    try:
        yield schema
    finally:
        schema.drop()
