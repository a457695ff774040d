"""Lesson 12's exercises: the five questions for one more design, and a design that answers all five yes."""

from __future__ import annotations

import math

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.case_study.design_review import Design

# The design of exercise 1: the inbox, its IDs deleted after two hours, reconciling (payout intent recorded, looked up).
RIGHT = ["yes", "yes", "yes", "no", "yes"]

BANKS = {
    "check_five_answers": Bank(
        right=[(RIGHT,), ((True, True, True, False, True),), (["Yes ", "y", "YES", "n", "true"],),
               ({"q1": "yes", "q2": "yes", "q3": "yes", "q4": "no", "q5": "yes"},),
               ({"q5": "yes", "q3": "yes", "q1": "yes", "q4": "no", "q2": "yes"},),  # keys give the order
               (np.array([True, True, True, False, True]),), ("yes, yes, yes, no, yes",), ("Yes Yes Yes No Yes",),
               ([1, 1, 1, 0, 1],), (np.array([1, 1, 1, 0, 1]),), ("1 1 1 0 1",),  # 1 and 0 for yes and no
               (["yes.", "Yes!", "yes", "No.", "yes"],)],  # written as sentences
        wrong=[
            # The lookup taken for a cure of question 4: it saves the money, not the account.
            Wrong((["yes"] * 5,), "question 4"),
            Wrong((["no"] * 5,), "question 1"),
            # Pruning taken to break prompt duplicates too.
            Wrong((["no", "yes", "yes", "no", "yes"],), "question 1"),
            Wrong((["yes", "no", "yes", "no", "yes"],), "question 2"),  # the lookup taken for a second key
            Wrong((["yes", "yes", "no", "no", "yes"],), "question 3"),
            Wrong((["yes", "yes", "yes", "no", "no"],), "question 5"),  # the payout call inside the transaction
            Wrong((["yes", "yes", "yes", "no"],), "five"),
            Wrong(("yes, yes, yes",), "five"),
            Wrong(("yes yes yes no yes yes",), "five"),
            Wrong((["yes", "yes", "maybe", "no", "yes"],), "yes or no"),
            # The late retry taken for a second payout (the lookup forgotten), and the call after the commit for no key.
            Wrong((["yes", "yes", "yes", "yes", "no"],), "question 4"),
            Wrong(({"q1": "yes", "q2": "yes", "q3": "yes", "q4": "yes", "q5": "yes"},), "question 4"),
            Wrong(([1, 1, 1, 1, 1],), "question 4"),  # all yes, written as numbers
            Wrong(([2, 1, 1, 0, 1],), "yes or no"),  # a number that is neither 1 nor 0
            Wrong((["yes", "yes", "yes", "no", "yes?"],), "yes or no"),
        ],
    ),
    "check_safe_design": Bank(
        right=[(Design("mine", guard="version", reconcile=True),),
               (Design("inbox kept two days", keep_hours=48, reconcile=True),),
               (Design("kept forever", keep_hours=math.inf, reconcile=True),),
               (Design("just longer", keep_hours=30.5, reconcile=True),),
               (Design("numpy hours", keep_hours=np.int64(48), reconcile=True),),  # what a pandas sum returns
               (Design("numpy yes", keep_hours=48, reconcile=np.bool_(True)),),  # what a comparison returns
               (Design("constraint", guard="unique application", payout_key="derived", keep_hours=1, reconcile=True),),
               (Design("a day past the outage", keep_hours=31, reconcile=True),),
               (Design("a year", keep_hours=24 * 365, reconcile=True),)],
        wrong=[
            # The plain inbox: its IDs are kept, but the payment system forgets the key after 24 h.
            Wrong((Design("the table's inbox"),), "question 4"),
            Wrong((Design("IDs a day", keep_hours=24, reconcile=True),), "after the late redelivery"),
            # Exactly the outage: the run passes only by the seconds between delivery and save.
            Wrong((Design("IDs as long as the outage", keep_hours=30, reconcile=True),), "longer than"),
            Wrong((Design("IDs forever, no lookup", keep_hours=math.inf),), "after the late retry"),
            Wrong((Design("memory", guard="memory", reconcile=True),), "question 1"),
            Wrong((Design("fresh key", payout_key="per attempt", reconcile=True),), "question 2"),
            Wrong((Design("no key", guard="version", payout_key="none", reconcile=True),), "question 5"),
            Wrong((Design("read first", guard="check outside", reconcile=True),), "question 3"),
            Wrong((Design("nothing", guard="none", reconcile=True),), "question 1"),
            Wrong(({"guard": "inbox", "keep_hours": 48, "reconcile": True},), "Design"),
            # IDs kept longer than the payment system's 24 h, but not longer than the 30 h outage.
            Wrong((Design("past the key window", keep_hours=25, reconcile=True),), "after the late redelivery"),
            Wrong((Design("just short", keep_hours=29.9, reconcile=True),), "question 4"),
            # The business constraint alone: the account is safe, the payout 30 h later is not.
            Wrong((Design("constraint, no lookup", guard="unique application"),), "after the late retry"),
            # The lookup taken to make any key safe: a 429 leaves nothing to find, and the retry's new key pays.
            Wrong((Design("lookup, fresh keys", guard="version", payout_key="per attempt", reconcile=True),),
                  "a new key per call"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
