"""Lesson 12's exercises: the five questions for a design no table shows, and a design safe 30 hours late."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.case_study.design_review import Design

# Exercise 1's design: the aggregate version, reconciling, with a payout key made up on each call; retries 30 h late.
RIGHT = ["yes", "no", "yes", "yes", "yes"]


def _design(**settings: object) -> dict[str, object]:
    return {"guard": "version", "payout_key": "approval", "keep_ids": "forever", "reconcile": True, **settings}


BANKS = {
    "check_five_answers": Bank(
        right=[(RIGHT,), ((True, False, True, True, True),), ([1, 0, 1, 1, 1],), (np.array([1, 0, 1, 1, 1]),),
               (np.array([True, False, True, True, True]),), ([" yes", "no ", "yes", "yes", "yes"],),
               (["Yes", "NO", "yes", "yes", "yes"],)],  # a printed name in another letter case is that name
        wrong=[
            # A printed row copied: mistake 4's "yes yes yes no yes".
            Wrong((["yes", "yes", "yes", "no", "yes"],), "question 2"),
            # All yes: the lookup taken to make the key right too.
            Wrong((["yes"] * 5,), "about the key itself"),
            # Mistake 2's row: the per-attempt key taken to pay twice, though the lookup stops it.
            Wrong((["yes", "no", "yes", "no", "no"],), "question 4"),
            Wrong((["yes", "no", "yes", "yes", "no"],), "question 5"),
            Wrong((["no", "no", "yes", "yes", "yes"],), "question 1"),
            Wrong((["yes", "no", "no", "yes", "yes"],), "question 3"),
            Wrong((["yes", "no", "yes", "no", "yes"],), "question 4"),  # the 30 h taken past the lookup too
            Wrong((["y", "n", "y", "y", "y"],), "one of the names"),  # a name is compared whole (any case, any spacing)
            Wrong(("yes no yes yes yes",), "list of five"),  # one string is not five answers
            Wrong((["yes", "no", "yes", "yes"],), "five"),
            Wrong(({"q1": "yes"},), "five"),
            Wrong(([2, 0, 1, 1, 1],), "one of the names"),
            Wrong(([True] * 5,), "about the key itself"),
            # Question 1 taken to be the twin of mistake 4's note (a twin during the payout call): the run says
            # where the first consumer is slow, before its commit.
            Wrong((["no", "no", "yes", "yes", "yes"],), "before its commit"),
        ],
    ),
    "check_safe_design": Bank(
        right=[(_design(),), (_design(payout_key="approval", keep_ids="1 hour"),),
               (_design(guard="unique application", keep_ids="2 days"),),
               (_design(reconcile=np.bool_(True)),),  # what a comparison returns
               (_design(reconcile=1),),  # 1 for True, as exercise 1 and lesson 10 read it
               (_design(guard="unique application", payout_key="approval", keep_ids=" 7 days "),),
               (_design(guard="Version"),)],  # a printed name in another letter case is that name
        wrong=[
            # The inbox, however long it keeps IDs: a copy under a new message ID is new to it.
            Wrong((_design(guard="inbox", keep_ids="forever"),), "new message ID"),
            Wrong((_design(guard="inbox", payout_key="approval", keep_ids="7 days"),), "new message ID"),
            # The key from the message: a copy under a new ID while the first is still being paid out sends
            # another key, and the lookup cannot see a payout in flight (accepted before the check ran that twin).
            Wrong((_design(payout_key="derived"),), "still being paid out"),
            Wrong((_design(guard="unique application", payout_key="derived", keep_ids="2 days"),), "both copies"),
            # No recorded intent: 30 h is past the payment system's key window.
            Wrong((_design(reconcile=False),), "question 4"),
            Wrong((_design(guard="unique application", reconcile=False),), "key window"),
            Wrong((_design(payout_key="per attempt"),), "question 2"),
            Wrong((_design(payout_key="none"),), "question 2"),
            Wrong((_design(guard="memory"),), "question 1"),
            Wrong((_design(guard="check outside"),), "question 1"),
            Wrong((_design(guard="none"),), "question 1"),
            Wrong((_design(keep_ids=30),), "'1 hour'"),  # hours as a number: the configurable retentions are named
            Wrong((_design(keep_ids="30 hours"),), "keep_ids"),
            Wrong((_design(reconcile="yes"),), "True or False"),
            Wrong((_design(reconcile=0),), "question 4"),  # 0 is False: the 30 h retry finds no record
            Wrong((_design(reconcile=2),), "True or False"),
            # A learner's read: the approval key taken to be enough past the key window, without the intent.
            Wrong((_design(payout_key="approval", reconcile=False),), "question 4"),
            Wrong((_design(guard="unique application", payout_key="per attempt"),), "question 2"),
            Wrong((_design(guard="inbox", payout_key="approval", keep_ids="1 day"),), "question 4"),
            Wrong(({"guard": "version"},), "exactly the keys"),
            Wrong((Design("an object", guard="version", reconcile=True),), "dict"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
