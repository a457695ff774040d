"""Lesson 06's exercise: an order of deliveries in which the last-ID row charges too much and the versioned row too little."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_version_order": Bank(
        right=[(["m-2", "m-1", "m-2"],), (("m-2", "m-1", "m-2", "m-2"),), ([" m-2", "m-1 ", "m-2"],),
               (["m-2", "m-2", "m-1", "m-2"],),  # a redelivered m-2 before the overtaken m-1
               (["m-2", "m-1", "m-2", "m-1"],),
               (["m-2", "m-1", "m-1", "m-2"],)],  # the overtaken m-1 twice, then m-2 once more
        wrong=[
            Wrong((["m-2", "m-1"],), "last-ID row"),  # the versioned row's half alone (the old exercise's answer)
            Wrong((["m-1", "m-2", "m-1"],), "never applied"),  # the lesson's late duplicate: the versioned row is right
            Wrong((["m-1", "m-2"],), "never applied"),
            Wrong((["m-1", "m-1", "m-2", "m-1"],), "never applied"),
            Wrong((["m-2", "m-2", "m-1"],), "last-ID row"),  # the last-ID row catches the back-to-back m-2
            Wrong((["m-2", "m-2"],), "never applied"),
            Wrong((["m-1", "m-3"],), "neither"),
            Wrong(([["m-2", "m-1"]],), "neither"),  # a list inside the list
            Wrong((["m-2"],), "never applied"),
            Wrong(("m-2, m-1, m-2",), "list of message IDs"),
            Wrong(([],), "list of message IDs"),
            Wrong((["M-2", "m-1", "m-2"],), "neither"),  # IDs are compared exactly, as the inbox compares them
            Wrong((["m-1", "m-1", "m-1"],), "never applied"),
            Wrong(({"m-2", "m-1"},), "list of message IDs"),  # a set has no order
            Wrong(([2, 1, 2],), "neither"),  # the versions, not the message IDs
            Wrong((["m-2", "m-1", "m-1"],), "last-ID row"),  # the last-ID row catches the back-to-back m-1
        ],
    ),
}

test_bank = bank_tests(BANKS)
