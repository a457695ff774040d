"""Races settled by real engines, in real threads, with the same handler code."""

import random
import sqlite3
import threading
import time

import duckdb
import pytest
from conftest import need_postgres

from idemlib.explore import interleavings
from idemlib.handlers import InboxHandler, NaiveHandler, WorkFirstHandler
from idemlib.messages import Message, payment_stream
from idemlib.races import postgres_at, race, race_engines, stress, with_duplicates
from idemlib.stores import DuckDBPayments, SQLitePayments, WriteConflict


def test_every_engine_charges_once_whether_the_first_consumer_commits_or_rolls_back(engine):
    for first_commits in (True, False):
        engine.empty()
        outcome = race(engine, first_commits=first_commits, hold_seconds=0.2)
        assert outcome.total_charged == 40
        assert outcome.b_inserted is (not first_commits or engine.engine == "DuckDB")


def test_duckdb_never_waits_and_fails_whoever_commits_second():
    outcome = race(DuckDBPayments(), hold_seconds=0.2)
    assert outcome.b_waited_at == "did not wait"
    assert outcome.failed == "A at commit"
    assert "TransactionException" in outcome.error and "m-7f3" in outcome.error


def test_sqlite_makes_the_second_writer_wait_at_begin_immediate():
    outcome = race(SQLitePayments(), hold_seconds=0.3)
    assert outcome.b_waited_at == "begin"
    assert outcome.b_wait_seconds >= 0.2
    assert outcome.failed == "nobody" and not outcome.b_inserted


def test_sqlite_without_a_busy_timeout_fails_the_second_writer_at_once_and_keeps_the_money_right():
    outcome = race(SQLitePayments(busy_timeout=0), hold_seconds=0.2)
    assert outcome.failed == "B at begin"
    assert "database is locked" in outcome.error
    assert outcome.total_charged == 40


def test_a_busy_sqlite_write_is_reported_as_a_write_conflict():
    db = SQLitePayments(busy_timeout=0)
    holder, other = db.session(), db.session()
    holder.begin()
    with pytest.raises(WriteConflict, match="locked"):
        other.begin()
    assert not other.in_transaction


def test_postgres_makes_the_second_insert_wait_for_the_first_transaction(postgres):
    committed = race(postgres, first_commits=True, hold_seconds=0.3)
    assert committed.b_waited_at == "record id" and committed.b_wait_seconds >= 0.3
    assert not committed.b_inserted and committed.failed == "nobody"
    postgres.empty()
    rolled_back = race(postgres, first_commits=False, hold_seconds=0.3)
    assert rolled_back.b_waited_at == "record id" and rolled_back.b_inserted
    assert rolled_back.total_charged == 40


def test_postgres_waits_as_long_as_the_holder_holds_and_reports_both_unrounded(postgres):
    outcome = race(postgres, hold_seconds=0.3)
    assert outcome.a_held_seconds >= 0.3
    assert abs(outcome.b_wait_seconds - outcome.a_held_seconds) < 0.05  # thread hand-overs, not the lock
    assert outcome.b_wait_seconds != round(outcome.b_wait_seconds, 1)


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_above_read_committed_the_waiting_insert_fails_to_serialize_and_a_retry_skips(isolation):
    need_postgres()
    outcome = race(postgres_at(isolation), hold_seconds=0.2, a_ack_lost=True)
    assert outcome.failed == "B at record id" and "SerializationFailure" in outcome.error
    assert outcome.retry == "duplicate skipped" and outcome.total_charged == 40
    rolled_back = race(postgres_at(isolation), first_commits=False, hold_seconds=0.2)
    assert rolled_back.failed == "nobody" and rolled_back.b_inserted


class LateRival(InboxHandler):
    """The inbox, except that consumer B is slow to start: its thread sleeps before its first step, once."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.slept = delay, False

    def run(self, ctx):
        if ctx.delivery.consumer == "consumer B" and not self.slept:
            self.slept = True
            time.sleep(self.delay)
        yield from super().run(ctx)


RACES_AS_THE_LESSON_SAYS = [  # (engine, whether A commits): (where B waited, who failed, whether B charged)
    ("DuckDB", True, "did not wait", "A at commit", True), ("DuckDB", False, "did not wait", "nobody", True),
    ("SQLite", True, "begin", "nobody", False), ("SQLite", False, "begin", "nobody", True),
    ("SQLite, busy timeout 0", True, "did not wait", "B at begin", False),
    ("PostgreSQL", True, "record id", "nobody", False), ("PostgreSQL", False, "record id", "nobody", True),
    ("PostgreSQL, REPEATABLE READ", True, "record id", "B at record id", False),
]


@pytest.mark.parametrize(("engine_name", "first_commits", "waited_at", "failed", "b_charged"), RACES_AS_THE_LESSON_SAYS)
def test_a_rival_that_starts_long_after_the_hold_would_end_still_races_as_the_lesson_says(
        engine_name, first_commits, waited_at, failed, b_charged):
    # B starts 4 to 8 holds late, as on a machine too busy to run its thread: a race whose overlap
    # came from the hold's length would see A finish first, and B would meet A's committed row.
    if engine_name.startswith("PostgreSQL"):
        need_postgres()
    make = {"DuckDB": DuckDBPayments, "SQLite": SQLitePayments, "SQLite, busy timeout 0": lambda: SQLitePayments(busy_timeout=0),
            "PostgreSQL": lambda: postgres_at("READ COMMITTED"),
            "PostgreSQL, REPEATABLE READ": lambda: postgres_at("REPEATABLE READ")}
    hold = 0.05
    delay = random.Random(f"{engine_name} {first_commits}").uniform(4, 8) * hold
    outcome = race(make[engine_name](), first_commits=first_commits, hold_seconds=hold, handler=LateRival(delay))
    assert (outcome.b_waited_at, outcome.failed, outcome.b_inserted) == (waited_at, failed, b_charged)
    assert outcome.a_held_seconds >= delay + hold and outcome.total_charged == 40


def test_an_unknown_isolation_level_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="READ COMMITTED"):
        postgres_at("SNAPSHOT")


def test_under_load_every_engine_charges_each_payment_exactly_once(engine):
    load = with_duplicates(payment_stream(2000))  # 2,667 messages, a third of the payments twice
    result = stress(engine, load, consumers=4)
    assert (result.published, result.distinct) == (2667, 2000)
    assert result.total_charged == result.expected_total
    assert result.messages_charged_twice == result.messages_never_charged == result.dead_lettered == 0


def test_the_naive_consumer_under_the_same_load_charges_the_duplicates():
    result = stress(DuckDBPayments(), with_duplicates(payment_stream(300)), consumers=3, handler=NaiveHandler())
    assert result.messages_charged_twice == 100
    assert result.total_charged > result.expected_total


@pytest.mark.parametrize(
    ("handler", "twice", "lost"),
    [(NaiveHandler(), "all", 0), (WorkFirstHandler(), "some", 0), (InboxHandler(), "none", 0)],
)
def test_every_interleaving_of_two_consumers(handler, twice, lost):
    table = interleavings(handler)
    assert table["interleaving"].is_unique
    charged_twice = (table["outcome"] == "charged twice").sum()
    assert (table["outcome"] == "charge lost").sum() == lost
    assert {"all": charged_twice == len(table), "some": 0 < charged_twice < len(table), "none": charged_twice == 0}[twice]


def test_the_inbox_interleavings_include_the_conflicts_duckdb_raises():
    table = interleavings(InboxHandler())
    assert table["conflicts"].sum() > 0
    assert (table[table["conflicts"] > 0]["outcome"] == "charged once").all()


def test_race_engines_lists_duckdb_and_sqlite_always(monkeypatch):
    monkeypatch.setenv("IDEMLIB_POSTGRES_URL", "postgresql://nobody:wrong@127.0.0.1:1/none")
    monkeypatch.delenv("IDEMLIB_REQUIRE_SERVERS", raising=False)
    engines, note = race_engines()
    assert list(engines) == ["DuckDB", "SQLite"]
    assert "start-postgres" in note
    # what the lesson's race table shows is what these versions do, so the note names them
    assert f"DuckDB {duckdb.__version__}" in note and f"SQLite {sqlite3.sqlite_version}" in note
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", "1")
    with pytest.raises(RuntimeError, match="IDEMLIB_POSTGRES_URL"):
        race_engines()


def test_a_message_that_fails_in_a_worker_thread_is_dead_lettered_and_the_run_returns(engine):
    # Issue 10: the engine's error killed the worker thread holding the lease, and the run never returned.
    class RawCharge(InboxHandler):
        def with_the_charge(self, ctx, charge):
            yield "audit"
            if ctx.message_id == "p-0003":
                ctx.db.charge(2**70, 1, ctx.message_id)  # more than any engine's INTEGER column holds

    stream = [*payment_stream(6), Message("m-big", {"order_id": 1042, "amount": 2**31})]
    result = returns_within(60, lambda: stress(engine, stream, consumers=3, handler=RawCharge(), max_deliveries=3))
    assert result.dead_lettered == 2 and result.messages_charged_twice == 0
    assert result.expected_total == sum(m.body["amount"] for m in payment_stream(6))
    assert result.total_charged == result.expected_total - payment_stream(6)[2].body["amount"]
    assert result.messages_never_charged == 1


@pytest.mark.parametrize("call", [lambda: stress(DuckDBPayments(), payment_stream(2), consumers=0),
                                  lambda: with_duplicates(payment_stream(2), every=0)])
def test_impossible_settings_are_refused_saying_what_to_change(call):
    with pytest.raises(ValueError, match="at least 1"):
        call()


def test_a_worker_whose_connection_breaks_reconnects_and_every_payment_is_charged_once():
    class ConnectionDrops(InboxHandler):
        def with_the_charge(self, ctx, charge):
            yield "network"
            if ctx.delivery.count == 1:
                ctx.db._cursor.connection.close()  # even the rollback will fail on this connection
                raise ConnectionError("server closed the connection unexpectedly")

    result = returns_within(60, lambda: stress(SQLitePayments(), payment_stream(4), consumers=2, handler=ConnectionDrops()))
    assert result.messages_charged_twice == result.messages_never_charged == result.dead_lettered == 0
    assert result.conflicts >= 4


def returns_within(seconds, call):
    """What ``call`` returns, failing the test (instead of hanging it) if it has not returned in time."""
    finished = []
    runner = threading.Thread(target=lambda: finished.append(call()), daemon=True)
    runner.start()
    runner.join(timeout=seconds)
    assert finished, "stress() did not return: a worker thread died holding a lease"
    return finished[0]
