"""Lesson 10: retention horizons, pruning on real engines, TTL reads, ordering and the offset consumer."""

from __future__ import annotations

import pytest
from conftest import need
from conftest import need_postgres

from idemlib.retention_and_ordering.jetstream_log import JetStreamLog
from idemlib.retention_and_ordering.offsets import STEPS, CrashAt, Projection, consume, offset_crash_matrix
from idemlib.retention_and_ordering.ordered_log import MemoryLog
from idemlib.retention_and_ordering.ordering import (PAID, REFUNDED, WRITERS, OrderTable, arrival_orders,
                              explore_orderings, ordering_counts, run_twice_table)
from idemlib.retention_and_ordering.pruning import PruningBench, duckdb_delete_behaviour
from idemlib.retention_and_ordering.horizon import (DAY, HOUR, RetentionConfig, late_duplicate, retention_sweep, table_growth,
                               ttl_late_duplicates, ttl_reads)
from idemlib.servers import NATS

CONFIG = RetentionConfig(queue_retention=4 * DAY, dlq_replay=2 * DAY, producer_retry=HOUR)


def need_nats() -> None:
    need(NATS.unavailable())


def test_the_horizon_adds_queue_dlq_and_producer_retries_and_refuses_nonsense():
    assert CONFIG.horizon() == 6 * DAY + HOUR
    with pytest.raises(ValueError, match="queue_retention"):
        RetentionConfig(queue_retention=-1)


def test_pruning_one_hour_too_early_lets_the_dlq_replay_charge_twice_and_the_horizon_catches_it():
    early = late_duplicate(CONFIG.horizon() - HOUR, CONFIG)
    assert early.attrs["total charged"] == 80
    assert list(early["inbox"])[-1] == "charged again"
    assert "pruning job deletes the ID" in list(early["event"])
    assert late_duplicate(CONFIG.horizon(), CONFIG).attrs["total charged"] == 40
    sweep = retention_sweep(CONFIG, [-2, -1, 0, 1])
    assert list(sweep["total charged"]) == [80, 80, 40, 40]
    with pytest.raises(ValueError, match="positive"):
        late_duplicate(0, CONFIG)


def test_the_table_grows_with_traffic_and_pruning_bounds_it():
    grown = table_growth(500, 6)
    assert list(grown["rows"]) == [500 * d for d in range(1, 7)]
    bounded = table_growth(500, 6, retention_days=2)
    assert list(bounded["rows"])[-3:] == [1000, 1000, 1000]  # two days of IDs, no more


def test_on_real_postgresql_every_id_also_grows_the_key_index_and_pruning_stops_both():
    need_postgres()
    from idemlib.stores.postgres_store import postgres_url

    grown = table_growth(2_000, 4, postgres_url=postgres_url())
    index, total = list(grown["PostgreSQL index (MB)"]), list(grown["PostgreSQL (MB)"])
    assert index == sorted(index) and index[-1] > 2 * index[0]  # the index grows with the rows
    assert all(0 < i < t for i, t in zip(index, total))  # and is part of the relation's size
    bounded = table_growth(2_000, 6, retention_days=1, postgres_url=postgres_url())
    assert bounded["PostgreSQL (MB)"].iloc[-1] < grown["PostgreSQL (MB)"].iloc[-1]  # 6 days pruned < 4 kept


def test_duckdb_delete_keeps_the_rows_out_and_the_file_at_least_as_big():
    steps = duckdb_delete_behaviour(20_000)
    assert list(steps["rows"]) == [20_000, 10_000, 10_000, 12_000]
    sizes = list(steps["file size (MB)"])
    assert sizes[1] >= sizes[0]  # a DELETE alone gives no space back


def test_a_ttl_store_still_returns_expired_markers_until_it_deletes_them_and_a_filter_hides_them():
    reads = ttl_reads(HOUR, [0.5, 2, 60])
    stored = list(reads["stored (plain Scan)"])
    assert stored[0] == 50 and stored[1] > 40 and stored[2] == 0  # expired after 1 h, mostly still there at 2 h
    assert list(reads["live (filtered on expires_at)"]) == [50, 0, 0]
    late = ttl_late_duplicates(HOUR, [0.5, 2, 60])
    assert list(late["attribute_not_exists(pk)"]) == ["caught", "caught", "charged again"]  # late deletion: safe side
    assert list(late["... OR expires_at <= :now"]) == ["caught", "charged again", "charged again"]


def test_a_late_duplicate_is_caught_by_the_inbox_but_overwrites_newer_state_without_it():
    table = OrderTable()
    results = {}
    for writer in WRITERS:
        table.reset()
        for change in (PAID, REFUNDED, PAID):
            table.apply(writer, change)
        results[writer.name] = table.state()[0]
    assert results == {"SET status (naturally idempotent)": "PAID", "inbox + SET status": "REFUNDED",
                       "version guard": "REFUNDED"}


def test_the_version_guard_ends_right_in_every_arrival_order_and_the_others_do_not():
    orders = arrival_orders()
    assert len(orders) == 30 == len(set(orders))
    counts = ordering_counts(explore_orderings())
    assert counts.loc["version guard", "wrong"] == 0 and counts.loc["version guard", "right"] == 30
    assert counts.loc["SET status (naturally idempotent)", "wrong"] > 0
    assert counts.loc["inbox + SET status", "wrong"] > 0
    assert counts.loc["inbox + SET status", "right"] > counts.loc["SET status (naturally idempotent)", "right"]


def test_setting_a_value_is_safe_to_run_twice_and_an_increment_is_not():
    import duckdb

    table = run_twice_table({"DuckDB": duckdb.connect()})
    assert list(table["safe to run twice"]) == [True, False, True, False]
    assert list(table["DuckDB: twice"]) == [960, 920, 40, 80]


def test_upserts_behave_the_same_on_real_postgresql():
    need_postgres()
    from idemlib.retention_and_ordering.pruning import scratch_schema

    schema = scratch_schema()
    try:
        with schema.connect() as connection:
            table = run_twice_table({"PostgreSQL": connection.cursor()})
        assert list(table["PostgreSQL: twice"]) == [960, 920, 40, 80]
    finally:
        schema.drop()


def test_the_offset_consumer_applies_each_record_once_at_every_crash_point_in_the_model():
    matrix = offset_crash_matrix(MemoryLog)
    assert len(matrix) == len(STEPS) + 1
    assert (matrix["applied once"] == 3).all()
    naive = offset_crash_matrix(MemoryLog, use_offset=False, steps=("commit", "ack"))
    assert list(naive["applied twice"]) == [0, 1]
    overtaken = offset_crash_matrix(MemoryLog, max_in_flight=5, steps=("commit",))
    assert overtaken["never applied"].sum() > 0  # a redelivery behind a newer record is skipped: lost


def test_the_offset_consumer_crash_matrix_on_the_real_stream():
    need_nats()
    matrix = offset_crash_matrix(JetStreamLog)
    assert (matrix["applied once"] == 3).all(), matrix
    assert (matrix["crashes"] == [0] + [1] * len(STEPS)).all()
    overtaken = offset_crash_matrix(lambda: JetStreamLog(ack_wait=0.6), max_in_flight=5, steps=(None, "commit"))
    assert overtaken["never applied"].sum() > 0, overtaken


def test_one_offset_shared_by_two_subjects_loses_records_and_one_per_subject_does_not():
    need_nats()
    for shared, lost in ((True, True), (False, False)):
        log = JetStreamLog()
        try:
            sequences = [log.append(subject, {"order_id": 1042, "amount": 10}) for subject in ("a", "b", "a", "b")]
            projection = Projection()
            for subject in ("b", "a"):
                consume(log, projection, f"reader-{subject}", subject=subject, part="all" if shared else subject)
            applied = projection.applied_per_record(sequences)
            assert bool((applied == 0).any()) is lost, applied
        finally:
            log.close()


def test_a_crash_point_must_name_a_step():
    with pytest.raises(ValueError, match="steps"):
        CrashAt("dance", 1)


def test_dropping_a_day_partition_on_real_postgresql_removes_that_day_only_and_duplicates_still_conflict():
    need_postgres()
    bench = PruningBench(days=3, rows_per_day=400, batch=150)
    try:
        assert bench.count("inbox_daily") == bench.count("inbox_plain") == 1200
        assert bench.prune_partition() == 400
        assert bench.count("inbox_daily") == 800
        assert bench.prune_batched() == (400, 3)
        assert bench.count("inbox_plain") == 800
        kept = bench.connection.execute("SELECT message_id, sent_on FROM inbox_daily LIMIT 1").fetchone()
        again = bench.connection.execute("INSERT INTO inbox_daily VALUES (%s, %s) ON CONFLICT DO NOTHING", kept)
        assert again.rowcount == 0  # a duplicate carries the same sent_on, so it meets the original's key
        assert bench.drop_behind_reader(1, reader_seconds=0.5, lock_timeout_ms=50) is False  # gave up waiting
        assert bench.count("inbox_daily") == 800
        name = bench.schema.name
    finally:
        bench.close()
    import psycopg

    from idemlib.stores.postgres_store import postgres_url

    with psycopg.connect(postgres_url()) as connection:
        left = connection.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()[0]
    assert left == 0


def test_bad_sizes_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="messages_per_day"):
        table_growth(0, 5)
    with pytest.raises(ValueError, match="at least 2 days"):
        PruningBench(days=1)
