"""A schema of its own on a PostgreSQL server, for one test: needs the ``postgres`` extra (psycopg).

Nothing here starts a server: the URL is the one the suite configured. When the server does
not answer, or refuses the credentials, :class:`PostgresSchema` raises :class:`DatabaseUnavailable`
with the driver's own reason, so a test fails saying so instead of passing having tested nothing.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_schemas = itertools.count(1)


class DatabaseUnavailable(Exception):
    """The configured PostgreSQL did not answer or refused the connection: the text says why, as the server said."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise DatabaseUnavailable("postgres_schema needs psycopg: pip install 'deliver-twice[postgres]'") from None
    return psycopg


def _drop(url: str, name: str) -> None:
    psycopg = _psycopg()
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    except psycopg.Error:
        pass  # the server went away: nothing of ours is left to drop


def _hidden(url: str) -> str:
    """``url`` without its password, to print."""
    conninfo = _psycopg().conninfo
    try:
        parts = conninfo.conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - not a URL psycopg reads: say nothing of it
        return "the configured URL"
    parts.pop("password", None)
    return str(conninfo.make_conninfo(**parts))


class PostgresSchema:
    """An empty schema of its own on the PostgreSQL at ``url``, dropped by :meth:`drop` or when the object goes.

    ``connect()`` opens connections that work inside it.
    """

    def __init__(self, url: str, connect_timeout: float = 5) -> None:
        psycopg = _psycopg()
        self.url = url
        self.name = f"idempotency_test_{os.getpid()}_{next(_schemas)}"
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=connect_timeout) as admin:
                admin.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
                admin.execute(f"CREATE SCHEMA {self.name}")
        except psycopg.OperationalError as error:
            reason = " ".join(str(error).split())
            raise DatabaseUnavailable(f"the PostgreSQL at {_hidden(url)} cannot be used: {reason}. Start it, or "
                                      "fix the URL or credentials (deliver_twice_postgres_url)") from error
        self.drop = weakref.finalize(self, _drop, self.url, self.name)

    def connect(self) -> Any:
        """A new connection to this schema's tables (its ``search_path``), not in autocommit: the consumer commits."""
        return _psycopg().connect(self.url, options=f"-c search_path={self.name}")


@contextmanager
def fresh_schema(url: str) -> Iterator[PostgresSchema]:
    """An empty schema on the PostgreSQL at ``url``, dropped afterwards."""
    schema = PostgresSchema(url)
    try:
        yield schema
    finally:
        schema.drop()
