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
    "check_cache_losses": Bank(
        right=[({"evicts early", "loses the last second on a crash"},),
               (frozenset({"loses the last second on a crash", "evicts early"}),),
               (["Evicts  early", "loses the last second on a crash"],),  # a list, case and spacing aside
               (("evicts early", "loses the last second on a crash", "evicts early"),)],  # a name twice
        wrong=[
            Wrong(({"none"},), "volatile-"),  # appendonly yes read as "safe"
            Wrong(({"forgets on restart"},), "volatile-"),  # the course's own server's row, copied
            Wrong(({"evicts early", "forgets on restart", "loses the last second on a crash"},), "appendonly"),
            Wrong(({"evicts early", "forgets on restart"},), "appendonly"),  # save none read as no persistence
            Wrong(({"evicts early"},), "everysec"),  # the append-only file taken for a full guarantee
            Wrong(({"loses the last second on a crash"},), "volatile-"),  # volatile- read as "only keys without TTL"
            Wrong(({"evicts early", "none"},), '"none"'),
            Wrong(("evicts early",), "a set"),
            Wrong(({"evicts"},), "one of the names"),
            Wrong((set(),), "empty set"),
            Wrong(({"evicts early": True},), "a set"),
            Wrong(([1, 2],), "one of the names"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
