"""Lesson 09's exercise: a lease that outlasts the longest payment, and a claim deadline that covers the work and ends in time."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_deadline": Bank(
        right=[(100, 90), (100, 100), (120.0, 85.5), (90, 150), (200, 150), (150, 100), (100, 190),
               (Decimal("150"), Fraction(181, 2)), (timedelta(seconds=90), timedelta(seconds=100)),
               (np.int64(90), np.float64(85.0)),  # what a pandas computation hands back
               ("90", "85"), (" 90 s", "85"),
               # a busy day's payment takes 82.5 s from delivery to ack, its claim 80.5 s of it
               (83, 81)],
        wrong=[
            # Sized to the quiet day's longest payment, with no margin for the busy day.
            Wrong((90, 80), "busy day"),
            Wrong((76, 74), "busy day"),  # a 1-second margin over the 75 s payment
            # The lesson's own way of saying "no deadline": stuck after a crash, never charged.
            Wrong((90, None), "no deadline"),
            Wrong((None, 90), "always has a lease"),
            # The lease as the broker ships it: the long payment outlives it with no fault at all.
            Wrong((30, 80), "outlast the longest payment"),
            Wrong((60, 90), "outlast the longest payment"),
            # Fits the usual payment (40 s), not the longest one: a check that only ran typical work would pass it.
            Wrong((45, 45), "outlast the longest payment"),
            Wrong((75, 90), "the very moment"),  # the quiet day's longest payment exactly: no margin at all
            Wrong((74, 90), "1 s after"),
            Wrong((82.5, 90), "the very moment"),  # the busy day's longest payment exactly: no margin left
            Wrong((90, 200), "both the lease and the deadline"),  # a deadline over one lease costs a second lease
            # The deadline shorter than the work: no copy arrived in the gap, but one could.
            Wrong((100, 60), "ran out 13 s before"),
            Wrong((300, 10), "ran out 63 s before"),  # a long lease cannot save a deadline shorter than the work
            Wrong((100, 73), "the very moment"),
            # Each number fine alone, together too slow after a crash: the waits add up.
            Wrong((230, 100), "300 s allowed"),
            Wrong((100, 230), "300 s allowed"),
            Wrong((3600, 90), "300 s allowed"),  # "longer is safer" for the lease
            Wrong((220, 90), "300.5 s after"),  # one lease of 220 s: half a second too late
            # Longer than the broker's patience: stuck in progress, dead-lettered.
            Wrong((85, 400), "dead-letter"),
            Wrong((90, 3600), "dead-letter"),  # Powertools' default record life
            Wrong((90, float("inf")), "dead-letter"),
            Wrong((float("inf"), 90), "never runs out"),  # never redelivered after a crash: never charged
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



def test_the_feedback_reads_an_85_s_claim_not_a_85_s_claim():
    from idemlib.course.exercises import check_deadline

    assert "an 85 s claim" in check_deadline(100, 85).message
    assert "an 80 s lease" in check_deadline(80, 100).message
    assert "an 18 s lease" in check_deadline(18, 90).message
