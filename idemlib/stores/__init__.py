"""Where the work and the processed message IDs live.

A *database* holds the ``payments`` table (the effect) and the
``processed_messages`` table (the inbox). Each consumer opens its own *session* on
it, as each process would hold its own connection, so two consumers can race each
other inside the real engine.
"""

from __future__ import annotations

from idemlib.stores.duckdb_store import DuckDBPayments
from idemlib.stores.sql import PaymentsDatabase, PaymentsSession, WriteConflict

__all__ = ["DuckDBPayments", "PaymentsDatabase", "PaymentsSession", "WriteConflict"]
