"""Where the work and the processed message IDs live.

A *database* holds the ``payments`` table (the effect) and the
``processed_messages`` table (the inbox). Each consumer opens its own *session* on
it, as each process would hold its own connection, so two consumers can race each
other inside the real engine. DuckDB is the embedded default; SQLite needs only a
file; PostgreSQL needs a running server (see :func:`postgres_unavailable`).
"""

from __future__ import annotations

from idemlib.stores.duckdb_store import DuckDBPayments
from idemlib.stores.postgres_store import PostgresPayments, postgres_unavailable, postgres_url, require_servers
from idemlib.stores.sql import IdReused, PaymentsDatabase, PaymentsSession, SqlPayments, WriteConflict
from idemlib.stores.sqlite_store import SQLitePayments

__all__ = [
    "DuckDBPayments", "IdReused", "PaymentsDatabase", "PaymentsSession", "PostgresPayments", "SQLitePayments", "SqlPayments",
    "WriteConflict", "postgres_unavailable", "postgres_url", "require_servers",
]
