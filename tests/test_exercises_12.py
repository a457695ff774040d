"""Lesson 12's exercises: the five questions for one more design, and a design that answers all five yes."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.design_review import Design

BANKS = {
    "check_five_answers": Bank(
        right=[(["yes", "yes", "no", "no", "yes"],), ((True, True, False, False, True),),
               (["Yes ", "y", "No", "FALSE", "true"],),
               ({"q1": "yes", "q2": "yes", "q3": "no", "q4": "no", "q5": "yes"},)],
        wrong=[
            Wrong((["yes"] * 5,), "question 3"),
            Wrong((["no"] * 5,), "question 1"),
            Wrong((["yes", "yes", "no", "yes", "yes"],), "question 4"),  # mistake 1's answers alone
            Wrong((["yes", "yes", "yes", "no", "yes"],), "question 3"),  # mistake 4's answers alone
            Wrong((["yes", "no", "no", "no", "no"],), "question 2"),
            Wrong((["yes", "yes", "no"],), "five"),
            Wrong(("yes, yes, no, no, yes",), "five"),
            Wrong((["yes", "yes", "maybe", "no", "yes"],), "yes or no"),
        ],
    ),
    "check_safe_design": Bank(
        right=[(Design("mine", guard="version"),), (Design("inbox", guard="inbox", key_hours=72),),
               (Design("constraint", guard="unique application", payout_key="derived", key_hours=4),)],
        wrong=[
            Wrong((Design("memory", guard="memory"),), "question"),
            Wrong((Design("fresh key", payout_key="per attempt"),), "question"),
            Wrong((Design("short keys", key_hours=1),), "question 4"),
            Wrong((Design("no key", guard="version", payout_key="none"),), "question"),
            Wrong((Design("read first", guard="check outside"),), "question 3"),
            Wrong((Design("nothing", guard="none"),), "question"),
            Wrong(({"guard": "inbox"},), "Design"),
            Wrong((Design("typo", guard="inbx"),), "does not run"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
