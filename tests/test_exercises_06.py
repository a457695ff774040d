"""Lesson 06's exercise: an order of deliveries in which a versioned business row charges too little."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

BANKS = {
    "check_version_order": Bank(
        right=[(["m-2", "m-1"],), (("m-2", "m-1", "m-1"),), ([" m-2", "m-1 ", "m-2"],),
               (["m-2", "m-2", "m-1"],),  # a redelivered m-2 before the overtaken m-1
               (["m-2", "m-1", "m-2", "m-1"],)],
        wrong=[
            Wrong((["m-1", "m-2", "m-1"],), "never applied"),  # the late duplicate: refused, and rightly
            Wrong((["m-1", "m-2"],), "never applied"),
            Wrong((["m-1", "m-1", "m-2", "m-1"],), "never applied"),
            Wrong((["m-2", "m-2"],), "never applied"),
            Wrong((["m-1", "m-3"],), "neither"),
            Wrong(([["m-2", "m-1"]],), "neither"),  # a list inside the list
            Wrong((["m-2"],), "what was owed"),
            Wrong(("m-2, m-1",), "list of message IDs"),
            Wrong(([],), "list of message IDs"),
            Wrong((["M-2", "m-1"],), "neither"),  # IDs are compared exactly, as the inbox compares them
            Wrong((["m-1", "m-1", "m-1"],), "what was owed"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
