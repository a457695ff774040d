"""Lesson 09's exercise: a lease that outlasts the longest payment, and a claim deadline that covers the work and ends in time."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_deadline": Bank(
        right=[(90, 80), (100, 100), (120.0, 75.5), (76, 150), (200, 150), (80, 100), (150, 100),
               (Decimal("150"), Fraction(181, 2)), (timedelta(seconds=90), timedelta(seconds=100)),
               (np.int64(90), np.float64(80.0)),  # what a pandas computation hands back
               ("90", "80"), (" 90 s", "80"),
               # The claim runs from the claim to the completion, 73 s of the longest payment's 75 s; a lease
               # ending exactly 300 s after the first delivery less the 73 s still charges within the 5 minutes.
               (76, 74), (227, 74)],
        wrong=[
            # The lease as the broker ships it: the long payment outlives it with no fault at all.
            Wrong((30, 80), "outlast the longest payment"),
            Wrong((60, 90), "outlast the longest payment"),
            # Fits the usual payment (40 s), not the longest one: a check that only ran typical work would pass it.
            Wrong((45, 45), "outlast the longest payment"),
            Wrong((75, 90), "the very moment"),  # the longest payment exactly: no margin at all
            # One second short: no other consumer happened to be free, but the lease did run out.
            Wrong((74, 90), "1 s after"),
            # The deadline shorter than the work: no copy arrived in the gap, but one could.
            Wrong((90, 60), "ran out 13 s before"),
            Wrong((90, 73), "the very moment"),
            # Each number fine alone, together too slow after a crash: the waits add up.
            Wrong((230, 100), "300 s allowed"),
            Wrong((100, 230), "300 s allowed"),
            Wrong((80, 250), "300 s allowed"),
            Wrong((3600, 80), "300 s allowed"),  # "longer is safer" for the lease
            # Longer than the broker's patience: stuck in progress, dead-lettered.
            Wrong((80, 330), "dead-letter"),
            Wrong((90, 3600), "dead-letter"),  # Powertools' default record life
            Wrong((90, float("inf")), "dead-letter"),
            Wrong((float("inf"), 80), "never runs out"),  # never redelivered after a crash: never charged
            Wrong((228, 74), "301 s after"),
            Wrong((float("nan"), 90), "NaN"),
            Wrong((90, float("nan")), "NaN"),
            Wrong(("ninety", 90), "number"),
            Wrong((True, 90), "number"),
            Wrong((-5, 90), "positive"),
            Wrong((90, 0), "positive"),
        ],
        blank=(..., ...),
    ),
}

test_bank = bank_tests(BANKS)


def test_one_blank_among_two_answers_is_still_not_answered():
    from idemlib.course.exercises import check_deadline

    for answers in ((90, ...), (..., 80)):
        feedback = check_deadline(*answers)
        assert not feedback and "Not answered yet" in feedback.message



def test_the_feedback_reads_an_80_s_claim_not_a_80_s_claim():
    from idemlib.course.exercises import check_deadline

    assert "an 80 s claim" in check_deadline(90, 80).message
    assert check_deadline(80, 100).message.startswith("An 80 s lease")
    assert "an 18 s lease" in check_deadline(18, 90).message
