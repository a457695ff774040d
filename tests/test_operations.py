"""Lesson 11's other tools: dead-letter replays, the libraries' inbox tables, statement counts, delivery signals."""

from __future__ import annotations

from idemlib import InboxHandler, Message, NaiveHandler, payment_stream
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.operating.costs import inbox_against_naive, record_ids_duckdb, statements_per_message
from idemlib.operating.day import NOON, Day, clock_time, run_day
from idemlib.operating.libraries import LIBRARIES, deliver_twice_to_each
from idemlib.operating.metrics import compare_signals
from idemlib.operating.replay import POISON, dead_letter_replay, repair_amount
from idemlib.stores import DuckDBPayments, SQLitePayments

DAY = [RUNNING_EXAMPLE, POISON, Message.charge("m-8a1", 1044, 15)]


def test_the_inbox_charges_a_replayed_dead_letter_once_and_skips_the_one_that_had_committed():
    table = dead_letter_replay(InboxHandler(), DAY, replays=3)
    assert "m-9c2 after 5" in table["dead letters"].iloc[0] and "m-7f3 after 5" in table["dead letters"].iloc[0]
    assert list(table["m-7f3 charged ($)"]) == [40, 40, 40, 40]
    assert list(table["m-9c2 charged ($)"]) == [0, 25, 25, 25]


def test_the_naive_consumer_charges_again_on_every_replay():
    table = dead_letter_replay(NaiveHandler(), DAY)
    assert list(table["m-7f3 charged ($)"]) == [200, 240, 280]
    assert list(table["m-9c2 charged ($)"]) == [0, 25, 50]


def test_the_repair_reads_only_whole_dollars_sent_as_text():
    assert repair_amount({"amount": "25"}) == {"amount": 25}
    assert repair_amount({"amount": "2.5"}) == {"amount": "2.5"}
    assert repair_amount("not a body") == "not a body"


def test_each_library_table_absorbs_a_second_delivery():
    table = deliver_twice_to_each()
    assert list(table["library"]) == [library.library for library in LIBRARIES]
    assert (table["rows after two deliveries"] == 1).all()


def test_the_inbox_sends_one_more_insert_per_message_on_every_engine():
    for make in (DuckDBPayments, SQLitePayments):
        counts = statements_per_message(make, payment_stream(10))
        assert counts["naive"].sum() == 3 and counts["inbox"].sum() == 4
        assert counts.loc["INSERT processed_messages", "inbox"] == 1


def test_the_cost_table_has_a_ratio_per_engine():
    table = inbox_against_naive({"DuckDB": DuckDBPayments, "SQLite": SQLitePayments}, payment_stream(5), repeats=1)
    assert list(table.index) == ["DuckDB", "SQLite"]
    ratio = table["inbox (ms per message)"] / table["naive (ms per message)"]
    assert (abs(ratio - table["inbox / naive, lowest"]) < 0.01 + 0.01 * ratio).all()
    assert (table["inbox / naive, lowest"] == table["inbox / naive, highest"]).all() and table["within ±20 %"].all()


def test_several_rounds_give_the_ratio_as_a_range_and_say_whether_it_held_within_a_fifth():
    table = inbox_against_naive({"DuckDB": DuckDBPayments}, payment_stream(5), repeats=1, rounds=3)
    low, high = table.loc["DuckDB", ["inbox / naive, lowest", "inbox / naive, highest"]]
    assert 0 < low <= high
    assert table.loc["DuckDB", "within ±20 %"] == (high - low <= 0.2 * (high + low) + 0.01)


def test_both_ways_of_recording_a_batch_of_ids_on_duckdb_are_timed_at_each_inbox_size():
    table = record_ids_duckdb(stored=(0, 500), new_ids=50, repeats=1)
    assert list(table.index) == [0, 500] and list(table.columns) == ["anti-join (ms)", "ON CONFLICT DO NOTHING (ms)"]
    assert (table > 0).all().all()


def test_signals_side_by_side_end_with_a_diagnosis():
    run = run_day(Day(messages=200, slow_from=NOON))
    table = compare_signals({"slow": run.trace}, lease_seconds=30.0, since=NOON)
    assert table.index[-1] == "diagnosis" and "slower than its lease" in table.loc["diagnosis", "slow"]


def test_clock_time_reads_like_a_wall_clock():
    assert clock_time(NOON + 1800) == "12:30" and clock_time(0) == "00:00"
