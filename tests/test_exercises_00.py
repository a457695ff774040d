"""Lesson 00's exercise: the running example as a Message."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.messages import Message

BANKS = {
    "check_running_example": Bank(
        right=[(Message.charge("m-7f3", 1042, 40),), (Message.charge(message_id="m-7f3", order_id=1042, amount=40),)],
        wrong=[
            Wrong((Message.charge("m-7f3", 1042, 80),), "amount"),
            Wrong((Message.charge("m-8a1", 1042, 40),), "ID"),
            Wrong((Message.charge("m-7f3", 1024, 40),), "order"),
            Wrong(("m-7f3",), "Message"),
            Wrong(({"message_id": "m-7f3", "order_id": 1042, "amount": 40},), "Message"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
