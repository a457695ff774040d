"""Lesson 12's exercises: the five questions for one more design, and a design that answers all five yes."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.case_study.design_review import Design

BANKS = {
    "check_five_answers": Bank(
        right=[(["no", "yes", "no", "no", "yes"],), ((False, True, False, False, True),),
               (["No ", "y", "n", "FALSE", "true"],),
               ({"q1": "no", "q2": "yes", "q3": "no", "q4": "no", "q5": "yes"},),
               ({"q5": "yes", "q3": "no", "q1": "no", "q4": "no", "q2": "yes"},),  # keys give the order
               (np.array([False, True, False, False, True]),), ("no, yes, no, no, yes",), ("No Yes No No Yes",)],
        wrong=[
            Wrong((["yes"] * 5,), "question 1"),
            Wrong((["no"] * 5,), "question 2"),  # "no guard, so every answer is no"
            Wrong((["no", "no", "no", "no", "yes"],), "question 2"),  # the lost answer taken for a second payout
            Wrong((["no", "yes", "no", "no", "no"],), "question 5"),
            Wrong((["no", "yes", "no", "yes", "yes"],), "question 4"),  # section 2's service with 24 h keys
            Wrong((["no", "yes", "yes", "no", "yes"],), "question 3"),
            Wrong((["yes", "yes", "no", "no", "yes"],), "question 1"),  # mistakes 1 and 4 combined, the old design
            Wrong((["no", "yes", "no"],), "five"),
            Wrong(("no, yes, no",), "five"),
            Wrong(("no yes no no yes yes",), "five"),
            Wrong((["no", "yes", "maybe", "no", "yes"],), "yes or no"),
        ],
    ),
    "check_safe_design": Bank(
        right=[(Design("mine", guard="version", key_hours=48),), (Design("inbox", guard="inbox", key_hours=72),),
               (Design("keys forever", key_hours=float("inf")),), (Design("just longer", key_hours=30.5),),
               (Design("constraint", guard="unique application", payout_key="derived", key_hours=31),)],
        wrong=[
            Wrong((Design("the table's inbox"),), "question 4"),  # 24 h keys: copied from the review above
            Wrong((Design("as long as the outage", guard="version", key_hours=30),), "question 4"),
            Wrong((Design("memory", guard="memory", key_hours=48),), "question 1"),
            Wrong((Design("fresh key", payout_key="per attempt", key_hours=48),), "question 2"),
            Wrong((Design("no key", guard="version", payout_key="none", key_hours=48),), "question 5"),
            Wrong((Design("read first", guard="check outside", key_hours=48),), "question 3"),
            Wrong((Design("nothing", guard="none", key_hours=float("inf")),), "question 1"),
            Wrong(({"guard": "inbox", "key_hours": 48},), "Design"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
