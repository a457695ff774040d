"""Lesson 09's exercise: a claim deadline between the longest work and the broker's last redelivery."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_deadline": Bank(
        right=[(75,), (90.0,), (110,)],
        wrong=[
            Wrong((30,), "outlast the longest work"),  # the lease itself: shorter than the work
            Wrong((60,), "taken over"),
            Wrong((150,), "dead-letter"),
            Wrong((3600,), "dead-letter"),  # Powertools' default record life
            Wrong(("90",), "number"),
            Wrong((-5,), "positive"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
