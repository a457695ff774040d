"""Lesson 09's exercise: a claim deadline between the longest work and the broker's last redelivery."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_deadline": Bank(
        right=[(75,), (90.0,), (110,), (70.5,), (Fraction(181, 2),), (timedelta(seconds=90),), (Decimal("100"),)],
        wrong=[
            Wrong((30,), "outlast the longest work"),  # the lease itself: shorter than the work
            Wrong((60,), "taken over"),
            # Longer than any lease-aligned redelivery's wait, shorter than the work: no rival happens to
            # arrive while the claim has run out, but one could, and the check must say so.
            Wrong((65,), "ran out 5 s before"),
            Wrong((70,), "the very moment"),  # the work's length exactly: no margin at all
            Wrong((150,), "dead-letter"),
            Wrong((3600,), "dead-letter"),  # Powertools' default record life
            Wrong((float("inf"),), "dead-letter"),
            Wrong((float("nan"),), "NaN"),
            Wrong(("90",), "number"),
            Wrong((-5,), "positive"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
