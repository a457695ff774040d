"""Lesson 07's exercises: what content-based deduplication lets through, and which sends an interval drops."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.brokers.sources import SOURCES

REACH = ["application resend after the window", "consumer crash after commit, before ack",
         "lease expires while the handler works", "dead-letter replay"]
EVERY = {source: source in REACH for source in SOURCES}

BANKS = {
    "check_content_based": Bank(
        right=[(set(REACH),), (list(reversed(REACH)),), (tuple(f" {s}" for s in REACH),),
               ({s.capitalize() for s in REACH},), ((s.replace(" ", "  ") for s in REACH),),
               (EVERY,), ({s: np.bool_(v) for s, v in EVERY.items()},), ({s: int(v) for s, v in EVERY.items()},),
               # punctuation is not the question: no hyphen, no comma, a full stop, a typographic apostrophe
               (["application resend after the window.", "consumer crash after commit before ack",
                 "Lease expires while the handler works", "dead letter replay"],),
               ({s.replace("'", "\u2019"): v for s, v in EVERY.items()},),
               # the mapping answer built with pandas, as the lesson's own tables are
               (pd.Series(EVERY),)],
        wrong=[
            Wrong(([*REACH, "relay republish with a new ID"],), "no deduplication ID sent"),
            Wrong((REACH[1:],), "left out"),
            Wrong(([*REACH, "application resend inside the window"],), "stopped by the broker"),
            Wrong(([*REACH, "client library's own retry"],), "stopped by the broker"),
            Wrong(([*REACH, "ack lost on the way"],), "delete"),
            Wrong((["the lease"],), "source names"),
            Wrong((set(),), "left out"),
            # the resend inside the window swapped for the one after it: both mistakes are named
            Wrong((["application resend inside the window", *REACH[1:]],), "stopped by the broker"),
            Wrong((["application resend inside the window", *REACH[1:]],), "left out"),
            Wrong(("dead-letter replay",), "source names"),
            # every source a content-based window cannot catch, read as "every source after the first send"
            Wrong(({**EVERY, "ack lost on the way": True},), "delete"),
            Wrong(({s: v for s, v in EVERY.items() if v},), "leaves 4 out"),
            Wrong(({**EVERY, "dead-letter replay": "maybe"},), "mapping"),
            Wrong((pd.Series({**EVERY, "relay republish with a new ID": True}),), "no deduplication ID sent"),
            Wrong((["application resend after the window", "consumer crash after commit", "lease expires",
                    "dead letter replay"],), "source names"),  # cut-down names are not the table's rows
        ],
    ),
    "check_interval_sends": Bank(
        right=[({0, 9, 16},), ([16, 9, 0],), ((0.0, 9.0, 16.0),), ({np.int64(0), np.int64(9), np.int64(16)},),
               ({"0", "9", " 16 "},), ({timedelta(0), timedelta(minutes=9), timedelta(minutes=16)},),
               ({Decimal("0"), Fraction(18, 2), 16},), ({0: True, 3: False, 9: True, 10: False, 16: True},),
               (pd.Series({0: True, 3: False, 9: True, 10: False, 16: True}),), (pd.Series([0, 9, 16]),)],
        wrong=[
            Wrong(({0},), "for ever"),  # an ID is never forgotten
            Wrong(({0, 9, 10, 16},), "not from the very first one"),  # the interval counted from the first send only
            Wrong(({0, 3, 9, 10, 16},), "less than five minutes"),  # no deduplication at all
            Wrong(({9, 16},), "first send"),
            Wrong(({0, 9},), "left out"),  # the interval never ends once restarted
            Wrong(({0, 10, 16},), "less than five minutes"),  # the repeat's own time taken for the stored one
            Wrong(({0, 16},), "left out"),  # Service Bus's default 10-minute window taken for SQS's 5 minutes
            Wrong((pd.Series({0: True, 3: False, 9: True, 10: True, 16: True}),), "less than five minutes"),
            Wrong(({0, 5, 10, 15},), "one of SENDS"),
            Wrong(("0, 9, 16",), "set of minutes"),
            Wrong(({0: True, 9: True, 16: True},), "leaves 2 out"),
            Wrong(({True, 9, 16},), "set of minutes"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_exercise_2s_sends_have_one_answer_whether_or_not_a_dropped_send_restarts_the_interval():
    from idemlib.course.exercises.lesson_07 import SENDS, _delivered_sends

    def delivered(restart_on_drop: bool) -> set[float]:
        kept, since = set(), None
        for minute in SENDS:
            if since is None or minute - since >= 5:
                kept.add(float(minute))
                since = minute
            elif restart_on_drop:
                since = minute
        return kept

    assert delivered(restart_on_drop=False) == delivered(restart_on_drop=True) == _delivered_sends()
