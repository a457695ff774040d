"""Lesson 10: retention horizons, pruning on real engines, TTL reads, ordering and the offset consumer."""

from __future__ import annotations

import pytest
from conftest import need, need_postgres

from idemlib.facts import fact_seconds
from idemlib.retention_and_ordering.horizon import (
    DAY,
    HOUR,
    INCIDENTS,
    KEEP_IDS,
    DatedInbox,
    RetentionConfig,
    example_configs,
    late_duplicate,
    play_incident,
    retention_sweep,
    table_growth,
)
from idemlib.retention_and_ordering.jetstream_log import JetStreamLog
from idemlib.retention_and_ordering.offsets import (
    STEPS,
    CrashAt,
    Projection,
    consume,
    fold_outcomes,
    offset_crash_matrix,
    rebuild_projection,
)
from idemlib.retention_and_ordering.ordered_log import MemoryLog
from idemlib.retention_and_ordering.ordering import (
    HISTORY,
    OTHER_HISTORY,
    PAID,
    REFUNDED,
    WRITERS,
    OrderTable,
    Writer,
    arrival_orders,
    explore_orderings,
    interleaved_orders,
    ordering_counts,
    run_twice_table,
    upsert_where_table,
)
from idemlib.retention_and_ordering.pruning import PruningBench, duckdb_delete_behaviour, measure_pruning, partition_locks
from idemlib.retention_and_ordering.republish import republish_table
from idemlib.retention_and_ordering.ttl import redis_expiry, ttl_late_duplicates, ttl_reads
from idemlib.servers import NATS
from idemlib.stores.cache import redis_unavailable

CONFIG = RetentionConfig(queue_retention=4 * DAY, dlq_replay=2 * DAY, producer_retry=HOUR)


def need_nats() -> None:
    need(NATS.unavailable())


def test_the_horizon_adds_queue_dlq_and_producer_retries_and_refuses_nonsense():
    assert CONFIG.horizon() == 6 * DAY + HOUR
    with pytest.raises(ValueError, match="queue_retention"):
        RetentionConfig(queue_retention=-1)


def test_after_a_redrive_the_queue_retention_counts_again_so_a_14_day_standard_dlq_needs_29_days():
    steps = CONFIG.worst_copy()
    assert list(steps.index) == [0.0, 1.0, 49.0, 145.0]  # retry at 1 h, redrive at 49 h, then 4 more days
    assert "retention starts again" in steps["step"].iloc[2]
    longest = list(example_configs().values())[-1]
    assert longest.horizon() == 29 * DAY  # 1 day of retries + 14 days to the redrive + 14 days of new retention
    assert RetentionConfig(4 * DAY, producer_retry=HOUR).worst_copy().shape[0] == 3  # no DLQ: no redrive step


def test_each_exercise_incident_ends_as_its_arrival_says_on_a_real_inbox():
    queue, dlq = fact_seconds("sqs_retention_default"), fact_seconds("sqs_retention_max")
    arrivals = {incident.name: incident.arrival(queue, dlq) for incident in INCIDENTS}
    assert arrivals == {"A": 5 * DAY, "B": 6.5 * DAY, "C": 10 * DAY, "D": None, "E": 3.5 * DAY}
    inbox = DatedInbox()
    outcomes = {incident.name: play_incident(incident, KEEP_IDS, queue, dlq, inbox) for incident in INCIDENTS}
    assert outcomes == {"A": "caught", "B": "charged again", "C": "charged again", "D": "never arrives",
                        "E": "caught"}
    # A longer retention survives the redrive and the outage after it, never the redrive on day 10.
    longer = {i.name: play_incident(i, 7 * DAY, queue, dlq, inbox) for i in INCIDENTS}
    assert longer["B"] == "caught" and longer["C"] == "charged again"


def test_pruning_one_hour_too_early_lets_the_dlq_replay_charge_twice_and_the_horizon_catches_it():
    early = late_duplicate(CONFIG.horizon() - HOUR, CONFIG)
    assert early.attrs["total charged"] == 80
    assert list(early["inbox"])[-1] == "charged again"
    assert "redriven copy" in list(early["event"])[-1]
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


def test_a_guard_compared_with_another_row_passes_each_order_alone_and_fails_them_interleaved():
    first, second = arrival_orders(HISTORY), arrival_orders(OTHER_HISTORY, duplicated=OTHER_HISTORY[:1])
    mixed = interleaved_orders(first, second, per_order=1)
    assert len(mixed) == len(first) + 2 and all(len({c.order_id for c in run}) == 2 for run in mixed)
    assert mixed == interleaved_orders(first, second, per_order=1)  # seeded: the same runs every time
    not_its_row = Writer("max over the table", "UPDATE orders SET status = $status, version = $version "
                         "WHERE order_id = $order_id AND (SELECT max(version) FROM orders) < $version")
    alone = explore_orderings([not_its_row], orders=first + second)
    together = explore_orderings([not_its_row], orders=mixed)
    assert alone["right"].all() and not together["right"].all()
    assert "1042 REFUNDED" in together["arrival order"].iloc[0]  # labels name the order when a run has two
    guarded = explore_orderings([WRITERS[-1]], orders=mixed)
    assert guarded["right"].all()


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


def test_an_upserts_where_leaves_a_row_alone_and_returns_nothing_for_it_on_both_engines():
    """Lesson 10, section 7: DO UPDATE ... WHERE false changes nothing and returns no row; true updates it."""
    import duckdb

    need_postgres()
    from idemlib.retention_and_ordering.pruning import scratch_schema

    schema = scratch_schema()
    try:
        with schema.connect() as connection:
            table = upsert_where_table({"DuckDB": duckdb.connect(), "PostgreSQL": connection.cursor()})
        for engine in ("DuckDB", "PostgreSQL"):
            assert list(table[f"{engine}: rows returned"]) == [1, 0, 1]  # inserted, left alone, updated
            assert list(table[f"{engine}: paid after"]) == [40, 40, 55]
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


def test_folding_the_crash_matrix_keeps_one_row_per_outcome_and_names_every_crash_point():
    folded = fold_outcomes(offset_crash_matrix(MemoryLog))
    assert len(folded) == 1 and folded["applied once"].iloc[0] == 3
    assert all(step in folded.index[0] for step in STEPS) and folded["max_ack_pending (server)"].iloc[0] == 1
    naive = fold_outcomes(offset_crash_matrix(MemoryLog, use_offset=False, steps=(None, "commit", "ack")))
    assert list(naive.index) == ["no crash, crash before commit", "crash before ack"]


def test_a_retried_publish_is_a_second_record_that_only_the_window_or_an_id_check_stops_in_the_model():
    table = republish_table(MemoryLog)
    assert list(table["records in the stream"]) == [3, 2, 3, 3]
    assert list(table["order 1042 paid ($)"]) == [80, 40, 80, 40]
    assert list(table["second publish answered as duplicate"]) == [False, True, False, False]


def test_on_real_jetstream_nats_msg_id_drops_a_copy_only_within_the_window_and_the_id_check_always():
    need_nats()
    table = republish_table(JetStreamLog)
    assert list(table["duplicate window (s)"]) == [120, 120, 0.2, 120]  # the server's default, then the short one
    assert list(table["records in the stream"]) == [3, 2, 3, 3], table
    assert list(table["times m-7f3 applied"]) == [2, 1, 2, 1]
    assert list(table["order 1042 paid ($)"]) == [80, 40, 80, 40]
    assert list(table["order 2077 paid ($)"]) == [15, 15, 15, 15]


def test_the_offset_consumer_crash_matrix_on_the_real_stream():
    need_nats()
    matrix = offset_crash_matrix(JetStreamLog)
    assert (matrix["applied once"] == 3).all(), matrix
    assert (matrix["max_ack_pending (server)"] == 1).all()  # the consumer's setting, read back from the server
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


def test_a_projection_rebuilt_from_the_log_through_a_crash_matches_the_live_one():
    events = (("orders", {"order_id": 1042, "amount": 40}), ("orders", {"order_id": 2077, "amount": 15}),
              ("orders", {"order_id": 1042, "amount": -40}), ("orders", {"order_id": 3001, "amount": 25}))
    rebuilt = rebuild_projection(MemoryLog, events, crash=CrashAt("commit", 3))
    assert rebuilt.attrs["crashes during rebuild"] == 1
    assert list(rebuilt["rebuilt from the log ($)"]) == list(rebuilt["live projection ($)"]) == [0, 15, 25]


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


def test_a_partition_drop_waits_for_access_exclusive_on_the_parent_and_the_insert_into_today_waits_behind_it():
    need_postgres()
    locks, refused = partition_locks()
    waiting = locks[locks["held or waiting"] == "waiting"]
    assert set(waiting["table"]) == {"inbox_daily"}  # the parent, not the partition dropped or today's
    assert sorted(waiting["lock mode"]) == ["AccessExclusiveLock", "RowExclusiveLock"]
    assert waiting["session"].str.startswith("pruning job: DROP TABLE").any()
    assert waiting["session"].str.contains("INSERT").any()
    assert set(locks.loc[locks["held or waiting"] == "held", "lock mode"]) == {"AccessShareLock"}  # the report
    assert list(refused["error"]) == ["ActiveSqlTransaction", "ObjectNotInPrerequisiteState"]


def test_detaching_concurrently_behind_a_report_still_removes_the_day():
    need_postgres()
    bench = PruningBench(days=2, rows_per_day=100)
    try:
        assert bench.detach_behind_reader(0, reader_seconds=0.2) is True
        assert bench.count("inbox_daily") == 100
        gone = bench.connection.execute("SELECT to_regclass('inbox_daily_d00')").fetchone()[0]
        assert gone is None  # detached, then dropped
    finally:
        bench.close()


def test_redis_forgets_an_expired_key_at_once_so_a_duplicate_claims_it_again():
    need(redis_unavailable())
    table = redis_expiry()
    answers = list(table["answer"])
    assert answers[:4] == ["OK (claimed)", "nil (refused)", 0, "OK (claimed)"]
    # The eviction policy the server runs under, as it reports it: the course's own runs without a limit.
    assert "maxmemory-policy" in table.index[4] and answers[4].split()[0] in (
        "noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
        "volatile-random", "volatile-ttl")
    assert table.index.name.split()[1] in ("Valkey", "Redis")


def test_bad_sizes_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="messages_per_day"):
        table_growth(0, 5)
    with pytest.raises(ValueError, match="at least 2 days"):
        PruningBench(days=1)
    with pytest.raises(ValueError, match="five runs"):
        measure_pruning(days=3)
