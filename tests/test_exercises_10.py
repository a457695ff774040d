"""Lesson 10's exercises: a safe retention for a given set-up, and the version-guarded update."""

from __future__ import annotations

import datetime

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.ordering import VERSION_GUARD

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
            Wrong(("414 hours",), "number"),
        ],
    ),
    "check_version_guard": Bank(
        right=[(VERSION_GUARD,),
               ("UPDATE orders SET version = $version, status = $status WHERE $version > version AND order_id = $order_id",),
               (UPSERT_GUARD,)],
        wrong=[
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id",), "$version"),
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id AND version < $version",), "remember"),
            Wrong((GUARD_WITH.format("version > $version"),), "arrival orders"),  # the comparison reversed
            Wrong((GUARD_WITH.format("version <> $version"),), "arrival orders"),  # any other version wins
            Wrong(("UPDATE order SET status = $status, version = $version WHERE version < $version",), "refused"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
