"""Lesson 11's exercises: an alert rule for the skip rate, and the batch step whose crash the inbox turns into skips."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.metrics import SkipRateAlert

BANKS = {
    "check_alert_rule": Bank(
        right=[(SkipRateAlert(threshold=0.15, windows=2),), (SkipRateAlert(threshold=0.25, windows=1),),
               (SkipRateAlert(0.1, 3),)],
        wrong=[
            Wrong((SkipRateAlert(threshold=0.05, windows=1),), "quiet day"),
            Wrong((SkipRateAlert(threshold=0.5, windows=1),), "more than an hour"),
            Wrong((SkipRateAlert(threshold=0.15, windows=6),), "windows in a row"),
            Wrong((SkipRateAlert(threshold=0.9, windows=2),), "never fires"),
            Wrong((0.15,), "SkipRateAlert"),
        ],
    ),
    "check_batch_crash": Bank(
        right=[("ack all",), ("crash before ack all",), ("  Ack all ",)],
        wrong=[
            Wrong(("commit",), "rolls the whole batch back"),
            Wrong(("record ids",), "rolls the whole batch back"),
            Wrong(("begin",), "rolls the whole batch back"),
            Wrong(("ack",), "no step"),
            Wrong((5,), "as text"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
