"""Lesson 10's exercises: a safe retention for a given set-up, and the version-guarded update."""

from __future__ import annotations

import datetime

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.retention_and_ordering.ordering import VERSION_GUARD

UPSERT_GUARD = ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                "status = excluded.status, version = excluded.version WHERE orders.version < excluded.version")

GUARD_WITH = "UPDATE orders SET status = $status, version = $version WHERE order_id = $order_id AND {}"

BANKS = {
    "check_safe_retention": Bank(
        right=[(414,), (datetime.timedelta(days=17, hours=6),), (432,)],
        wrong=[
            Wrong((408,), "leave out"),  # forgot the producer's retries
            Wrong((174,), "leave out"),  # forgot the dead-letter queue
            Wrong((17.25,), "unit"),  # days given as hours
            Wrong((24 * 30,), "longer"),  # a month: safe, but for nothing
            Wrong((7 * 24 + 10 * 24 + 6 * 24,), "longer"),  # the producer's 6 hours read as 6 days
            Wrong(("414 hours",), "number"),
            Wrong((float("nan"),), "number"),  # a computation gone wrong used to pass every comparison
            Wrong((414 - 0.1,), "exactly"),  # six minutes short: the last copy can still arrive
        ],
    ),
    "check_version_guard": Bank(
        right=[(VERSION_GUARD,),
               ("UPDATE orders SET version = $version, status = $status WHERE $version > version AND order_id = $order_id",),
               (UPSERT_GUARD,),
               ("update orders set status = case when $version > version then $status else status end, "
                "version = greatest(version, $version) where order_id = $order_id",)],
        wrong=[
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id",), "$version"),
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id AND version < $version",), "remember"),
            Wrong((GUARD_WITH.format("version > $version"),), "arrival orders"),  # the comparison reversed
            Wrong((GUARD_WITH.format("version <> $version"),), "arrival orders"),  # any other version wins
            Wrong(("UPDATE order SET status = $status, version = $version WHERE version < $version",), "refused"),
            # No WHERE order_id: every order's row takes the message's status.
            Wrong(("UPDATE orders SET status = $status, version = $version WHERE version < $version",), "other order"),
            # Guarding on the one status seen last in 1042's history, not on the version.
            Wrong(("UPDATE orders SET status = $status, version = $version "
                   "WHERE order_id = $order_id AND status <> 'REFUNDED'",), "arrival orders"),
            Wrong(("UPDATE orders SET status = 'REFUNDED', version = 3 WHERE order_id = $order_id AND $version > 0",),
                  "$status"),
            Wrong((GUARD_WITH.format("$version = 3"),), "arrival orders"),  # only the newest message of 1042 applies
            Wrong(("  ",), "empty"),
            # Only the very next version applies: a message after a gap is dropped.
            Wrong((GUARD_WITH.format("version + 1 = $version"),), "newer"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
