"""PostgreSQL: a real server, found through ``IDEMLIB_POSTGRES_URL``."""

from __future__ import annotations

import itertools
import os
import weakref
from typing import Any

import psycopg
from psycopg import errors

from idemlib.servers import POSTGRES, require_servers  # noqa: F401 - re-exported by idemlib.stores
from idemlib.stores.sql import SqlPayments

_runs = itertools.count(1)


def postgres_url() -> str:
    """Where the course finds PostgreSQL: ``IDEMLIB_POSTGRES_URL``, a server at the default address, or its own."""
    return POSTGRES.url()


def postgres_unavailable() -> str | None:
    """None when a PostgreSQL server answers at :func:`postgres_url`; otherwise why not, and how to start one."""
    try:
        with psycopg.connect(postgres_url(), connect_timeout=3):
            return None
    except Exception as error:  # noqa: BLE001 - any failure to connect means the same thing here
        return POSTGRES.reason(error)


def _drop_schema(url: str, schema: str) -> None:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except psycopg.Error:
        pass  # the server went away; nothing of ours is left to drop


class PostgresPayments(SqlPayments):
    """A payments database on a PostgreSQL server, in a schema of its own that is dropped with it.

    PostgreSQL settles a race with a lock: a second ``INSERT ... ON CONFLICT DO
    NOTHING`` of the same ID waits for the first transaction. If that one commits,
    the second writes zero rows; if it rolls back, the second writes its row.
    """

    engine = "PostgreSQL"
    placeholder = "%s"
    conflict_errors = (errors.UniqueViolation, errors.SerializationFailure, errors.LockNotAvailable)

    def __init__(self, url: str | None = None, *, lock_timeout: str = "10s") -> None:
        self.url = url or postgres_url()
        self.lock_timeout = lock_timeout
        self.schema = f"idemlib_run_{os.getpid()}_{next(_runs)}"
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            connection.execute(f"CREATE SCHEMA {self.schema}")
        weakref.finalize(self, _drop_schema, self.url, self.schema)
        self._create_schema()

    def connect(self) -> psycopg.Cursor[Any]:  # a Cursor, and psycopg's own: its .connection is read by the races
        # Autocommit: the session's own BEGIN and COMMIT decide. The lock timeout is a
        # safety net, so a race that can never be settled fails instead of hanging; a wait
        # longer than it ends in LockNotAvailable, which the handler treats as a lost race.
        connection = psycopg.connect(
            self.url, autocommit=True, options=f"-c search_path={self.schema} -c lock_timeout={self.lock_timeout}"
        )
        return connection.cursor()
