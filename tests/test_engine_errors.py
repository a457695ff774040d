"""After a failed insert, PostgreSQL and DuckDB abort the transaction; SQLite undoes only that statement."""

from __future__ import annotations

from idemlib.stores.engine_errors import after_a_duplicate


def test_a_duplicate_insert_is_refused_by_every_engine_but_only_sqlite_goes_on(engine):
    after = after_a_duplicate(engine)
    assert after.duplicate_insert.startswith("refused")
    if engine.engine == "SQLite":
        assert after.next_statement == "ran" and after.charges_saved == 1
    else:
        assert "aborted" in after.next_statement and after.charges_saved == 0
    assert after.version
