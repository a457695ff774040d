"""Lesson 10's exercises: which incidents a retention survives, and the version-guarded upsert of a read model."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.retention_and_ordering.ordering import VERSION_GUARD

UPSERT_GUARD = ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                "status = excluded.status, version = excluded.version WHERE orders.version < excluded.version")

UPSERT_WITH = ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
               "status = excluded.status, version = excluded.version WHERE {}")

SURVIVED = {"A": True, "B": False, "C": False, "D": True, "E": True}

BANKS = {
    "check_safe_retention": Bank(
        right=[({"A", "D", "E"},), ("ADE",), ("e, a, d",), (["D", "A", "E"],), (SURVIVED,), ("a d e",), ("EDA",),
               (("A", "D", "E"),), (frozenset("ADE"),), (["A", "D", "E", "A"],),
               ({name: int(value) for name, value in SURVIVED.items()},),  # 1 and 0, as lesson 12's check reads them
               ({key.lower(): np.bool_(value) for key, value in SURVIVED.items()},),  # numpy booleans, lower case
               ({" a ": True, "b": False, "c": False, "d": True, "e": True},)],
        wrong=[
            # The redriven copy's retention counted from the first send: B looks expired, so "survived".
            Wrong(({"A", "B", "D", "E"},), "new message"),
            # The queue's 4 days taken as the bound on every copy: C looks expired.
            Wrong(({"A", "C", "D", "E"},), "redrive decide"),
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
            Wrong(("ADE.",), "not one of them"),
            Wrong(({"A": 2, "B": 0, "C": 0, "D": 1, "E": 1},), "True"),
        ],
    ),
    "check_version_guard": Bank(
        right=[(UPSERT_GUARD,),
               # a semicolon inside a block comment or a quoted text does not end the statement
               ("/* newest wins; old loses */ " + UPSERT_GUARD,),
               (UPSERT_GUARD + " AND excluded.status <> 'x;y'",),
               # Operands flipped, lower case, a trailing semicolon, the version compared with <= (a harmless re-set).
               (UPSERT_WITH.format("excluded.version > orders.version").lower() + ";",),
               (UPSERT_WITH.format("orders.version <= excluded.version"),),
               ("INSERT INTO orders (order_id, status, version) VALUES ($order_id, $status, $version) "
                "ON CONFLICT (order_id) DO UPDATE SET status = excluded.status, version = excluded.version "
                "WHERE NOT (orders.version >= excluded.version)",),
               ("-- a newer message wins, whichever came first\n" + UPSERT_GUARD,),
               ("MERGE INTO orders USING (SELECT $order_id AS id, $status AS s, $version AS v) AS m "
                "ON orders.order_id = m.id WHEN MATCHED AND orders.version < m.v THEN UPDATE SET status = m.s, "
                "version = m.v WHEN NOT MATCHED THEN INSERT VALUES (m.id, m.s, m.v)",),
               ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                "status = CASE WHEN excluded.version > orders.version THEN excluded.status ELSE orders.status END, "
                "version = greatest(orders.version, excluded.version)",),
               # A semicolon inside a comment is not a second statement.
               ("-- newest wins; an old copy changes nothing\n" + UPSERT_GUARD + ";\n",),
               # The row from a SELECT rather than VALUES, the guard written the other way round.
               ("INSERT INTO orders SELECT $order_id, $status, $version ON CONFLICT (order_id) DO UPDATE SET "
                "status = excluded.status, version = excluded.version WHERE excluded.version > orders.version",),
               # The message's parameters in DO UPDATE instead of excluded, and a RETURNING clause as section 7's
               # upsert with a WHERE has: both change nothing the check looks at.
               ("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                "status = $status, version = $version WHERE orders.version < $version",),
               (UPSERT_GUARD + " RETURNING status",),
               # Replace the row only when no row as new exists.
               ("INSERT OR REPLACE INTO orders SELECT $order_id, $status, $version WHERE NOT EXISTS "
                "(SELECT 1 FROM orders WHERE order_id = $order_id AND version >= $version)",)],
        wrong=[
            # The section's UPDATE guard, copied: right on a row that exists, but here no row does.
            Wrong((VERSION_GUARD,), "no row"),
            Wrong(("UPDATE orders SET status = $status, version = $version WHERE order_id = $order_id",), "no row"),
            # The first message to arrive wins, whatever its version.
            Wrong(("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT DO NOTHING",), "newer"),
            # The last message to arrive wins: an upsert that sets, without the guard (section 7's safe-twice write).
            Wrong((UPSERT_WITH.format("true"),), "newer"),
            Wrong(("INSERT OR REPLACE INTO orders VALUES ($order_id, $status, $version)",), "newer"),
            Wrong((UPSERT_WITH.format("orders.version > excluded.version"),), "newer"),  # the comparison reversed
            Wrong((UPSERT_WITH.format("orders.version <> excluded.version"),), "newer"),
            # Guards that look at something other than the order of the versions (tried in the depth review).
            Wrong((UPSERT_WITH.format("orders.status <> excluded.status"),), "newer"),
            Wrong((UPSERT_WITH.format("excluded.version > 0"),), "newer"),
            # Section 7's upsert with a WHERE carried over as it is: it leaves out only updates that change nothing.
            Wrong(("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                   "status = excluded.status, version = excluded.version WHERE orders.status <> excluded.status "
                   "RETURNING status",), "newer"),
            Wrong(("INSERT OR IGNORE INTO orders VALUES ($order_id, $status, $version)",), "newer"),
            # The guard without remembering the version: the row keeps version of its first message.
            Wrong(("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT (order_id) DO UPDATE SET "
                   "status = excluded.status WHERE orders.version < excluded.version",), "remember"),
            # Versions compared as text: "10" < "9".
            Wrong((UPSERT_WITH.format("CAST(orders.version AS VARCHAR) < CAST(excluded.version AS VARCHAR)"),),
                  "newer"),
            # Only the very next version applies: a message after a gap is dropped.
            Wrong((UPSERT_WITH.format("orders.version + 1 = excluded.version"),), "newer"),
            # Not tied to its own row: compares with the newest version of any order (DuckDB takes no subquery there).
            Wrong((UPSERT_WITH.format("(SELECT max(version) FROM orders) < excluded.version"),), "refused"),
            # Every order's row takes the message's status: the unrelated order 3000 changes.
            Wrong(("UPDATE orders SET status = $status, version = $version WHERE version < $version",), "another order"),
            Wrong(("UPDATE orders SET status = $status WHERE order_id = $order_id",), "$version"),
            Wrong(("INSERT INTO orders VALUES ($order_id, 'PAID', $version) ON CONFLICT DO NOTHING",), "$status"),
            Wrong(("INSERT INTO order VALUES ($order_id, $status, $version)",), "refused"),
            # Two statements, the insert then the guarded update: the exercise asks for one.
            Wrong(("INSERT INTO orders VALUES ($order_id, $status, $version) ON CONFLICT DO NOTHING; "
                   "UPDATE orders SET status = $status, version = $version WHERE order_id = $order_id "
                   "AND version < $version",), "more than one statement"),
            # a real second statement after a comment and a text that hold semicolons of their own
            Wrong(("/* a; b */ " + UPSERT_GUARD + " AND excluded.status <> 'x;y'; DELETE FROM orders",),
                  "more than one statement"),
            Wrong(("  ",), "empty"),
            Wrong((42,), "string"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
