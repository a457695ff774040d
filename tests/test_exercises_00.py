"""Lesson 00's exercises: which inserts of m-7f3's payment are idempotent, and which statements are."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

IDEMPOTENT = {"set the status": True, "take 40 off the balance": False,
              "record the payment under the next number": False, "upsert the status": True, "delete a cart": True,
              "add cart 11 unless it exists": True}
INSERTS = {"ignore a repeat": True, "fail on a repeat": True, "add on a repeat": False}

BANKS = {
    "check_idempotent_inserts": Bank(
        right=[(INSERTS,), ({name: "yes" if value else "no" for name, value in INSERTS.items()},),
               ({name: np.bool_(value) for name, value in INSERTS.items()},),
               ({name: int(value) for name, value in reversed(INSERTS.items())},)],
        wrong=[
            # "the repeat answers 0 rows / an error, so it is not the same": judges the answer, not the data
            Wrong(({**INSERTS, "ignore a repeat": False},), "answer"),
            Wrong(({**INSERTS, "fail on a repeat": False},), "answer"),
            # "ON CONFLICT makes it safe": the upsert that adds charges again on every repeat
            Wrong(({**INSERTS, "add on a repeat": True},), "changes a row again"),
            Wrong(({name: True for name in INSERTS},), "changes a row again"),
            # only the keyword DO NOTHING counts as safe
            Wrong(({"ignore a repeat": True, "fail on a repeat": False, "add on a repeat": False},), "answer"),
            Wrong(({name: False for name in INSERTS},), "2 of 3"),
            Wrong(({name: not value for name, value in INSERTS.items()},), "3 of 3"),
            Wrong(({"ignore a repeat": True},), "keys"),
            Wrong(({**INSERTS, "add on a repeat": "sometimes"},), "True"),
            Wrong(([True, True, False],), "dict"),
        ],
    ),
    "check_idempotent_statements": Bank(
        right=[(IDEMPOTENT,), ({name: "yes" if value else "no" for name, value in IDEMPOTENT.items()},),
               ({name: int(value) for name, value in IDEMPOTENT.items()},),
               ({name: np.bool_(value) for name, value in IDEMPOTENT.items()},)],
        wrong=[
            Wrong(({name: True for name in IDEMPOTENT},), "Not every statement"),
            Wrong(({name: False for name in IDEMPOTENT},), "set a value"),
            # "a delete changes the data, so it cannot be idempotent": the second run deletes nothing
            Wrong(({**IDEMPOTENT, "delete a cart": False},), "second run find"),
            # "an upsert inserts, so it repeats": it sets the same values again
            Wrong(({**IDEMPOTENT, "upsert the status": False},), "upsert"),
            # "the unique key refused exercise 1's repeat, so it refuses this one": a new ID every run passes it
            Wrong(({**IDEMPOTENT, "record the payment under the next number": True},), "the same ID"),
            Wrong(({**IDEMPOTENT, "record the payment under the next number": True, "delete a cart": False},), "2 of 6"),
            # "an insert always adds a row": this one looks for its row first
            Wrong(({**IDEMPOTENT, "add cart 11 unless it exists": False},), "NOT EXISTS"),
            Wrong(({"set the status": True},), "keys"),
            Wrong(({**IDEMPOTENT, "delete a cart": "maybe"},), "True"),
            Wrong(({**IDEMPOTENT, "delete a cart": 2},), "True"),
            Wrong(({**IDEMPOTENT, "delete a cart": None},), "True"),
            # "take 40 off" sets a balance, so it looks like "set the balance"
            Wrong(({**IDEMPOTENT, "take 40 off the balance": True},), "adds to it"),
            Wrong(({**IDEMPOTENT, "set the status": False},), "is the status any different"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
