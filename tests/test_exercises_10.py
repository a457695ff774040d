"""Lesson 10's exercises: which incidents a retention survives, and the version-guarded update."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.retention_and_ordering.ordering import VERSION_GUARD

UPSERT_GUARD = ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                "status = excluded.status, version = excluded.version WHERE orders.version < excluded.version")

GUARD_WITH = "UPDATE orders SET status = $status, version = $version WHERE order_id = $order_id AND {}"

SURVIVED = {"A": True, "B": False, "C": False, "D": True, "E": True}

BANKS = {
    "check_safe_retention": Bank(
        right=[({"A", "D", "E"},), ("ADE",), ("e, a, d",), (["D", "A", "E"],), (SURVIVED,),
               ({key.lower(): np.bool_(value) for key, value in SURVIVED.items()},),  # numpy booleans, lower case
               ({" a ": True, "b": False, "c": False, "d": True, "e": True},)],
        wrong=[
            # The redriven copy's retention counted from the first send: B looks expired, so "survived".
            Wrong(({"A", "B", "D", "E"},), "new message"),
            # The queue's 4 days taken as the bound on every copy: C looks expired.
            Wrong(({"A", "C", "D", "E"},), "do not bound"),
            # Any redrive brings the copy back, even after the DLQ deleted it.
            Wrong(({"A", "E"},), "own retention"),
            # Everything survives: "we keep IDs longer than the queue keeps messages".
            Wrong(({"A", "B", "C", "D", "E"},), "new message"),
            # Nothing survives an outage: the copies that arrive inside the 144 hours are caught.
            Wrong((set(),), "144 hours"),
            Wrong(({"A", "D"},), "144 hours"),  # the outage of E taken for a charge
            # the queue's 4 days taken for the inbox's 6: A's copy, redriven on day 5, looks too late to be caught
            Wrong(({"D", "E"},), "144 hours"),
            Wrong(({"A": True, "B": False},), "exactly the keys"),  # a dict that leaves incidents out
            Wrong(({"A": "yes", "B": "no", "C": "no", "D": "yes", "E": "yes"},), "True"),
            Wrong(({"A", "F"},), "not one"),
            Wrong((144,), "letters"),
        ],
    ),
    "check_version_guard": Bank(
        right=[(VERSION_GUARD,),
               ("UPDATE orders SET version = $version, status = $status "
                "WHERE $version > version AND order_id = $order_id",),
               (UPSERT_GUARD,),
               ("update orders set status = case when $version > version then $status else status end, "
                "version = greatest(version, $version) where order_id = $order_id",),
               # A comment line first, and a question mark inside a comment.
               ("-- apply only a newer message\n" + VERSION_GUARD,),
               ("UPDATE orders SET status = $status, version = $version /* newer? */ "
                "WHERE order_id = $order_id AND version < $version",),
               ("WITH m AS (SELECT $order_id AS id, $version AS v, $status AS s) UPDATE orders SET status = m.s, "
                "version = m.v FROM m WHERE orders.order_id = m.id AND orders.version < m.v",),
               ("MERGE INTO orders USING (SELECT $order_id AS id, $version AS v, $status AS s) AS m "
                "ON orders.order_id = m.id WHEN MATCHED AND orders.version < m.v THEN UPDATE SET status = m.s, "
                "version = m.v",)],
        wrong=[
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id",), "$version"),
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id AND version < $version",), "remember"),
            Wrong((GUARD_WITH.format("version > $version"),), "arrival order"),  # the comparison reversed
            Wrong((GUARD_WITH.format("version <> $version"),), "arrival order"),  # any other version wins
            Wrong(("UPDATE order SET status = $status, version = $version WHERE version < $version",), "refused"),
            # No WHERE order_id: every order's row takes the message's status.
            Wrong(("UPDATE orders SET status = $status, version = $version WHERE version < $version",), "other order"),
            # Guarding on the one status seen last in 1042's history, not on the version.
            Wrong(("UPDATE orders SET status = $status, version = $version "
                   "WHERE order_id = $order_id AND status <> 'REFUNDED'",), "arrival order"),
            Wrong(("UPDATE orders SET status = 'REFUNDED', version = 3 WHERE order_id = $order_id AND $version > 0",),
                  "$status"),
            Wrong((GUARD_WITH.format("$version = 3"),), "arrival order"),  # only the newest message of 1042 applies
            Wrong(("  ",), "empty"),
            # Only the very next version applies: a message after a gap is dropped.
            Wrong((GUARD_WITH.format("version + 1 = $version"),), "newer"),
            # Guards not tied to their own row: right for one order at a time, wrong when orders interleave.
            Wrong((GUARD_WITH.format("(SELECT max(version) FROM orders) < $version"),), "own order's row"),
            # Guards that fit 1042's and 2077's first histories only: statuses ranked PAID < SHIPPED < REFUNDED,
            # versions compared as text, versions assumed to stop at 3. Order 2077 paid again at version 10 refutes them.
            Wrong((GUARD_WITH.format("$version IS NOT NULL AND CASE $status WHEN 'PAID' THEN 1 WHEN 'SHIPPED' THEN 2 "
                                     "ELSE 3 END > CASE status WHEN 'PAID' THEN 1 WHEN 'SHIPPED' THEN 2 "
                                     "WHEN 'REFUNDED' THEN 3 ELSE 0 END"),), "arrival order"),
            Wrong((GUARD_WITH.format("CAST(version AS VARCHAR) < CAST($version AS VARCHAR)"),), "arrival order"),
            Wrong((GUARD_WITH.format("version < $version AND $version <= 3"),), "arrival order"),
            Wrong((GUARD_WITH.format("version < $version AND (SELECT version FROM orders WHERE order_id = 1042) "
                                     "< $version"),), "interleaved"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
