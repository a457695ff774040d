"""Lesson 11: overlapping batches inserted in opposite orders deadlock on PostgreSQL; in one order they do not."""

from __future__ import annotations

from conftest import need_postgres

from idemlib.operating.deadlock import overlapping_batches
from idemlib.operating.testing import PostgresSchema


def test_opposite_orders_deadlock_and_one_order_waits_instead():
    need_postgres()
    schema = PostgresSchema()
    crossed = overlapping_batches(schema.connect, {"A": ["m-7f3", "m-9c4", "m-1"], "B": ["m-9c4", "m-7f3", "m-2"]})
    outcomes = sorted(crossed["its transaction"])
    assert outcomes[0].startswith("DeadlockDetected") and outcomes[1] == "committed"
    assert crossed.attrs["IDs stored"] == 3  # the survivor's batch; the victim's goes back to the broker
    ordered = overlapping_batches(schema.connect, {"A": ["m-1", "m-7f3", "m-9c4"], "B": ["m-2", "m-7f3", "m-9c4"]})
    assert list(ordered["its transaction"]) == ["committed", "committed"]
    assert ordered.attrs["IDs stored"] == 4
    assert list(ordered["waits for a lock"]) == [0, 1]  # B waits for A's m-7f3; A never waits for B
    assert list(crossed["waits for a lock"]) == [1, 1]  # each waits for the other: the cycle
