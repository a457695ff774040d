"""The embedded default: a DuckDB database, in memory or in a file, no server needed."""

from __future__ import annotations

import duckdb
import pandas as pd

from idemlib.stores.sql import SCHEMA, PaymentsSession


class DuckDBPayments:
    """A payments database on DuckDB.

    DuckDB's transactions are optimistic: two sessions may both insert the same
    message ID, and the one that commits second fails at ``COMMIT`` with a
    ``TransactionException`` (reported here as :class:`~idemlib.stores.WriteConflict`).
    """

    engine = "DuckDB"

    def __init__(self, path: str = ":memory:") -> None:
        # One thread: the simulator sends tiny statements, for which DuckDB's parallel
        # machinery costs more than it saves (about half the time per insert, measured).
        self._db = duckdb.connect(path, config={"threads": 1})
        for statement in SCHEMA:
            self._db.execute(statement)

    def session(self) -> PaymentsSession:
        """A new connection to the same database, with a transaction of its own."""
        return PaymentsSession(self._db.cursor(), "?", (duckdb.TransactionException, duckdb.ConstraintException))

    def payments(self) -> pd.DataFrame:
        """Every committed charge, in the order written."""
        return self._db.cursor().execute("SELECT order_id, amount, message_id FROM payments").df()

    def processed_ids(self) -> list[str]:
        """The message IDs the inbox holds."""
        return [row[0] for row in self._db.cursor().execute("SELECT message_id FROM processed_messages ORDER BY 1").fetchall()]

    def total_charged(self) -> int:
        """The sum of all committed charges, in dollars."""
        return int(self._db.cursor().execute("SELECT coalesce(sum(amount), 0) FROM payments").fetchone()[0])
