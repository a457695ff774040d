"""Lesson 00's exercises: the running example as a Message, and which statements are idempotent."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.messages import Message

IDEMPOTENT = {"set the status": True, "take 40 off the balance": False, "insert a payment": False,
              "upsert the status": True, "delete a cart": True}

BANKS = {
    "check_running_example": Bank(
        right=[(Message.charge("m-7f3", 1042, 40),), (Message.charge(message_id="m-7f3", order_id=1042, amount=40),)],
        wrong=[
            Wrong((Message.charge("m-7f3", 1042, 80),), "amount"),
            Wrong((Message.charge("m-8a1", 1042, 40),), "ID"),
            Wrong((Message.charge("m-9c2", 1043, 25),), "ID"),  # the example shown above it, copied
            Wrong((Message.charge("m-7f3", 1024, 40),), "order"),
            Wrong(("m-7f3",), "Message"),
            Wrong(({"message_id": "m-7f3", "order_id": 1042, "amount": 40},), "Message"),
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
            Wrong(({**IDEMPOTENT, "delete a cart": False},), "1 of 5"),
            # "an upsert inserts, so it repeats": it sets the same values again
            Wrong(({**IDEMPOTENT, "upsert the status": False, "insert a payment": True},), "2 of 5"),
            Wrong(({"set the status": True},), "keys"),
            Wrong(({**IDEMPOTENT, "delete a cart": "maybe"},), "True"),
            Wrong(({**IDEMPOTENT, "delete a cart": 2},), "True"),
            Wrong(({**IDEMPOTENT, "delete a cart": None},), "True"),
            # "take 40 off" sets a balance, so it looks like "set the balance"
            Wrong(({**IDEMPOTENT, "take 40 off the balance": True},), "1 of 5"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
