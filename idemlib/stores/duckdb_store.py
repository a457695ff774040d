"""The embedded default: a DuckDB database, in memory or in a file, no server needed."""

from __future__ import annotations

import duckdb

from idemlib.stores.sql import Cursor, SqlPayments


class DuckDBPayments(SqlPayments):
    """A payments database on DuckDB.

    DuckDB's transactions are optimistic: two sessions may both insert the same
    message ID, and the one that commits second fails at ``COMMIT`` with a
    ``TransactionException`` (reported as :class:`~idemlib.stores.WriteConflict`).
    Nobody waits.
    """

    engine = "DuckDB"
    conflict_errors = (duckdb.TransactionException, duckdb.ConstraintException)

    def __init__(self, path: str = ":memory:") -> None:
        # One thread: the simulator sends tiny statements, for which DuckDB's parallel
        # machinery costs more than it saves (about half the time per insert, measured).
        self._db = duckdb.connect(path, config={"threads": 1})
        self._create_schema()

    def connect(self) -> Cursor:
        return self._db.cursor()
