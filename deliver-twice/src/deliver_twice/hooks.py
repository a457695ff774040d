"""The plugin's one hook: a project that runs its own PostgreSQL for tests says where it is."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_deliver_twice_postgres_url(config: pytest.Config) -> str | None:
    """The URL of the PostgreSQL that ``postgres_schema`` uses, or None to leave it to the next implementation.

    Asked only when neither ``--deliver-twice-postgres-url``, the ini option
    ``deliver_twice_postgres_url`` nor ``DELIVER_TWICE_POSTGRES_URL`` names one. An
    implementation may start a server (that is then the project's own choice); the plugin never does.
    """
