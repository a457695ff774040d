"""Lesson 03's exercises: who loses a DuckDB race with the roles swapped, and ID first's interleavings."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_race_loser": Bank(
        right=[("B at commit",), ("consumer B at COMMIT",), ("b, at commit",), ("B fails at its commit",),
               ("B's commit",)],
        wrong=[
            Wrong(("A at commit",), "section 3"),  # the unswapped race, read off the table
            Wrong(("nobody",), "one of them must fail"),
            Wrong(("B at record id",), "optimistic"),
            Wrong(("A at record id",), "optimistic"),
            Wrong(("A at begin",), "optimistic"),
            Wrong(("B at insert",), "optimistic"),  # the insert is the step called record id
            Wrong(("B at ack",), "acks only after its commit"),
            Wrong(("B",), "which step"),  # who, but not where
            Wrong(("neither",), "one of them must fail"),
            Wrong(("A at commit and B at commit",), "in the form"),
            Wrong((1,), "string"),
        ],
    ),
    "check_interleaving_count": Bank(
        right=[((12, 0),), ([12, 0],), ((np.int64(12), np.int64(0)),), (("12", "0"),), ((12.0, 0.0),)],
        wrong=[
            Wrong(((20, 0),), "schedules"),  # C(6, 3), not the distinct orders
            Wrong(((12, 12),), "charge twice is not"),
            Wrong(((6, 0),), "off"),
            Wrong(((66, 60),), "off"),  # work first's numbers, from the table
            Wrong((12,), "pair"),
            Wrong(((12.5, 0),), "pair"),
            Wrong(((True, 0),), "pair"),
            Wrong((("twelve", "0"),), "pair"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
