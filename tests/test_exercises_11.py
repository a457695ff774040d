"""Lesson 11's exercises: an alert rule for the skip rate, and the batch step whose crash the inbox turns into skips."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.operating.metrics import SkipRateAlert

class _AlwaysRight(SkipRateAlert):
    def fires_at(self, rates, window_seconds):  # pages at 12:15 on any day with many skips, else never
        return 12 * 3600 + window_seconds if rates["skipped"].sum() > 20 else None


BANKS = {
    "check_alert_rule": Bank(
        right=[(SkipRateAlert(threshold=0.15, windows=1, min_handled=10),), (SkipRateAlert(0.2, 1, 6),),
               (SkipRateAlert(threshold=0.21, windows=1, min_handled=14),),
               (SkipRateAlert(threshold=np.float64(0.1), windows=np.int64(1), min_handled=np.int64(12)),),
               # The floor left at 5 works when the threshold sits above one skip in five (20 %) and below the
               # storm's first window after noon (3 of 14); a low threshold works with the floor just under 10.
               (SkipRateAlert(threshold=0.21, windows=1, min_handled=5),),
               (SkipRateAlert(threshold=0.12, windows=1, min_handled=9),)],
        wrong=[
            # Pass on the quiet day only because its three stray skips fell in busy windows: one stray
            # lost ack in a thinner window that the rule counts (10, 14, 9 deliveries) would page.
            Wrong((SkipRateAlert(threshold=0.1, windows=1, min_handled=10),), "would page"),
            Wrong((SkipRateAlert(threshold=0.07, windows=1, min_handled=10),), "would page"),
            Wrong((SkipRateAlert(threshold=0.1, windows=1, min_handled=6),), "would page"),
            # A subclass that brings its own fires_at is not judged.
            Wrong((_AlwaysRight(threshold=0.5, windows=3, min_handled=100),), "SkipRateAlert itself"),
            # The lesson's own rule: it pages at the quiet hour, two thin windows of one skip each.
            Wrong((SkipRateAlert(threshold=0.15, windows=2),), "quiet hour"),
            # The old answer, one window: fast enough, but the floor of 5 lets a thin window page at night.
            Wrong((SkipRateAlert(threshold=0.1, windows=1),), "quiet hour"),
            Wrong((SkipRateAlert(threshold=0.15, windows=2, min_handled=10),), "how many windows after noon"),
            Wrong((SkipRateAlert(threshold=0.05, windows=1, min_handled=10),), "quiet day"),
            Wrong((SkipRateAlert(threshold=0.3, windows=1, min_handled=10),), "first window after noon"),
            Wrong((SkipRateAlert(threshold=0.1, windows=1, min_handled=16),), "how many deliveries"),
            Wrong((SkipRateAlert(threshold=0.06, windows=1, min_handled=1),), "quiet day"),
            Wrong((SkipRateAlert(threshold=0.9, windows=2, min_handled=10),), "never fires"),
            Wrong((0.15,), "SkipRateAlert"),
            # A floor above every bad-day window: the hint must point at the floor, not only the threshold.
            Wrong((SkipRateAlert(threshold=0.15, windows=1, min_handled=40),), "floor above the counts"),
            # A floor above the storm's first window after noon (14 handled) waits a window.
            Wrong((SkipRateAlert(threshold=0.15, windows=1, min_handled=20),), "first window after noon"),
            # Exactly one skip in five: 20 % is not below a threshold of 20 %.
            Wrong((SkipRateAlert(threshold=0.2, windows=1, min_handled=5),), "quiet hour"),
        ],
    ),
    "check_batch_crash": Bank(
        right=[("ack all",), ("crash before ack all",), ("  Ack all ",), ("ack_all",), ("before ack all",),
               ("after the commit",), ("right after the commit",), ("Crash before ACK-ALL",), ("after commit",),
               ("crash after the commit",), ("after the commit, before ack all",), ("between commit and ack all",),
               ("Before 'ack all'",), ("after the commit and before ack all",), ("ack all.",),
               ("before the ack all step",)],
        wrong=[
            Wrong(("commit",), "rolls the whole batch back"),
            Wrong(("record ids",), "rolls the whole batch back"),
            Wrong(("begin",), "rolls the whole batch back"),
            Wrong(("ack",), "no step"),
            Wrong(("charge new",), "rolls the whole batch back"),
            # Words for crash points (issue 23, class 5): none of these is "after the commit".
            Wrong(("before the commit",), "rolls the whole batch back"),
            Wrong(("crash before the commit",), "rolls the whole batch back"),
            Wrong(("the commit",), "rolls the whole batch back"),
            Wrong(("Commit",), "rolls the whole batch back"),
            Wrong(("after charge new",), "rolls the whole batch back"),  # the moment before the commit
            Wrong(("after ack all",), "redelivers nothing"),
            Wrong(("between charge new and commit",), "rolls the whole batch back"),
            Wrong(("after record ids, before commit",), "follow one another"),
            # A gap whose two sides are joined by "and", or given in reverse, or with a made-up first side.
            Wrong(("after charge new and before ack all",), "follow one another"),
            Wrong(("after record ids and before ack all",), "follow one another"),
            Wrong(("between ack all and commit",), "follow one another"),
            Wrong(("after bogus, before ack all",), "no step"),
            Wrong((5,), "as text"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
