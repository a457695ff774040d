"""Engine behaviours the lessons measure: when a snapshot starts, a late insert, a lock timeout, an event left unsent."""

from __future__ import annotations

import pytest

from idemlib.races import postgres_at
from idemlib.stores import DuckDBPayments, postgres_unavailable
from idemlib.stores.snapshots import late_duplicate, snapshot_starts_at_begin


def test_duckdb_takes_the_snapshot_at_the_first_statement_and_a_read_before_the_commit_fails_the_insert():
    assert not snapshot_starts_at_begin(DuckDBPayments())
    began, read = (late_duplicate(DuckDBPayments(), b_reads_first=reads) for reads in (False, True))
    assert began.b_insert == "zero rows" and not began.error
    assert read.b_insert == "duplicate-key error" and "Duplicate key" in read.error
    assert began.version.startswith("v")  # what DuckDB itself reports, not a typed number


@pytest.mark.skipif(postgres_unavailable() is not None, reason="needs a PostgreSQL server")
@pytest.mark.parametrize(("level", "reads", "signal"), [
    ("READ COMMITTED", True, "zero rows"),
    ("REPEATABLE READ", True, "serialization failure"),
    ("REPEATABLE READ", False, "zero rows"),
    ("SERIALIZABLE", True, "serialization failure"),
])
def test_postgresql_fails_a_late_insert_only_where_the_snapshot_predates_the_rival_s_commit(level, reads, signal):
    assert late_duplicate(postgres_at(level), b_reads_first=reads).b_insert == signal


@pytest.mark.skipif(postgres_unavailable() is not None, reason="needs a PostgreSQL server")
def test_a_wait_longer_than_the_lock_timeout_is_a_lost_race_and_the_money_stays_right():
    from idemlib.races import race
    from idemlib.stores import PostgresPayments

    outcome = race(PostgresPayments(lock_timeout="100ms"), hold_seconds=0.3)
    assert outcome.failed == "B at record id" and outcome.error.startswith("LockNotAvailable")
    assert outcome.total_charged == 40


def test_a_skipped_duplicate_sends_the_event_only_when_it_was_stored_with_the_work():
    from idemlib.stores.outgoing import DESIGNS, crash_before_publishing

    runs = crash_before_publishing()
    assert (runs["charges"] == 1).all()
    assert runs.loc[DESIGNS[0], "events published"] == 0  # sent after the commit: lost with the crash
    assert runs.loc[DESIGNS[1], "events published"] == 1  # a row of the transaction: the duplicate sends it
