"""Lesson 07's exercises: what content-based deduplication lets through, and a window that outlasts every retry."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

from exercise_bank import Bank, Wrong, bank_tests

REACH = ["producer retry after the window", "consumer crash after commit, before ack",
         "lease expires while the handler works", "dead-letter replay"]

BANKS = {
    "check_content_based": Bank(
        right=[(set(REACH),), (list(reversed(REACH)),), (tuple(f" {s}" for s in REACH),),
               ({s.capitalize() for s in REACH},), ((s.replace(" ", "  ") for s in REACH),)],
        wrong=[
            Wrong(([*REACH, "relay republish with a new ID"],), "no deduplication ID sent"),
            Wrong((REACH[1:],), "left out"),
            Wrong(([*REACH, "producer retry inside the window"],), "stopped by the broker"),
            Wrong((["the lease"],), "source names"),
            Wrong((set(),), "left out"),
            # the inside-window retry swapped for the after-window one: both mistakes are named
            Wrong((["producer retry inside the window", *REACH[1:]],), "stopped by the broker"),
            Wrong((["producer retry inside the window", *REACH[1:]],), "left out"),
            Wrong(("dead-letter replay",), "source names"),
        ],
    ),
    "check_detection_window": Bank(
        right=[(961,), (3600.0,), (7 * 24 * 3600,), (timedelta(minutes=20),), (Fraction(2401, 2),),
               (Decimal("1200"),)],
        wrong=[
            Wrong((600,), "outlast"),
            Wrong((960,), "outlast"),
            Wrong((16,), "refuse"),
            Wrong((8 * 24 * 3600,), "refuse"),
            Wrong(("20 minutes",), "number of seconds"),
            Wrong((True,), "number of seconds"),
            Wrong((timedelta(minutes=10),), "outlast"),
            Wrong((float("nan"),), "refuse"),
            Wrong((20,), "outlast"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
