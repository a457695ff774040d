"""Lesson 06's exercises: an order of deliveries in which the last-ID row charges too much and the versioned row too
little, and which ways of forgetting a claim early apply to two cache servers."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.course.exercises.lesson_06 import VERSIONED

SECOND, FAILOVER = "loses the last second if the machine fails", "loses recent claims on a failover"

BANKS = {
    "check_version_order": Bank(
        right=[(["m-2", "m-1", "m-2"],), (("m-2", "m-1", "m-2", "m-2"),), ([" m-2", "m-1 ", "m-2"],),
               (["m-2", "m-2", "m-1", "m-2"],),  # a redelivered m-2 before the overtaken m-1
               (["m-2", "m-1", "m-2", "m-1"],),
               (["m-2", "m-1", "m-1", "m-2"],),  # the overtaken m-1 twice, then m-2 once more
               (np.array(["m-2", "m-1", "m-2"]),),  # a NumPy array of the IDs
               (["m-2", "m-1"] + ["m-2"] * 18,)],  # the longest order the check plays, 20 deliveries
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
            # a right order repeated: refused by length at once, where playing 30 or 300 deliveries took seconds
            Wrong((["m-2", "m-1", "m-2"] * 10,), "at most 20"),
            Wrong((["m-2", "m-1", "m-2"] * 100_000,), "at most 20"),
            # section 4's own Message objects, still in the kernel: told to give their IDs, not that they are neither
            Wrong(([VERSIONED["m-2"], VERSIONED["m-1"], VERSIONED["m-2"]],), "message_id"),
            Wrong((["m\u20102", "m-1", "m-2"],), "\\u2010"),  # a look-alike hyphen, shown as its code point
            Wrong((["m\xa02", "m-1", "m-2"],), "\\xa0"),  # a no-break space
        ],
    ),
    "check_cache_losses": Bank(
        right=[({"payments": {SECOND}, "loyalty": {FAILOVER}},),
               ({"loyalty": frozenset({FAILOVER}), "payments": [SECOND]},),
               ({" Payments ": ("Loses the last  second if the machine fails",), "LOYALTY": {FAILOVER, FAILOVER}},),
               ({"payments": [SECOND, SECOND], "loyalty": (FAILOVER,)},),
               ({"payments": np.array([SECOND]), "loyalty": np.array([FAILOVER])},)],
        wrong=[
            # the old exercise's reading: a policy's name read without maxmemory
            Wrong(({"payments": {"evicts early", SECOND}, "loyalty": {FAILOVER}},), "maxmemory 0"),
            # an out-of-memory kill taken for a restart that forgets everything, though appendonly is yes. Right for a
            # container without a volume, which restarts clean (kubernetes_container_restart_clean_state); the table
            # puts payments' data directory on a persistent volume, and the hint names it
            Wrong(({"payments": {"forgets every claim on a restart", SECOND}, "loyalty": {FAILOVER}},), "persistent volume"),
            Wrong(({"payments": {"forgets every claim on a restart"}, "loyalty": {FAILOVER}},), "persistent volume"),
            Wrong(({"payments": {"none"}, "loyalty": {FAILOVER}},), "everysec"),  # the file taken for a full guarantee
            Wrong(({"payments": {SECOND, FAILOVER}, "loyalty": {FAILOVER}},), "alone"),
            # volatile-ttl read as "evicts claims", though these carry no time to live
            Wrong(({"payments": {SECOND}, "loyalty": {"evicts early", FAILOVER}},), "without EX"),
            Wrong(({"payments": {SECOND}, "loyalty": {"forgets every claim on a restart", FAILOVER}},), "appendonly yes"),
            Wrong(({"payments": {SECOND}, "loyalty": {SECOND, FAILOVER}},), "appendfsync always"),
            Wrong(({"payments": {SECOND}, "loyalty": {SECOND}},), "appendfsync always"),  # the same file, the same loss
            Wrong(({"payments": {SECOND}, "loyalty": {"none"}},), "replica"),  # a replica read as a full copy
            Wrong(({"payments": {SECOND}, "loyalty": {"evicts early"}},), "without EX"),
            Wrong(({"payments": {SECOND}, "loyalty": {"none", FAILOVER}},), '"none"'),
            Wrong(({"payments": {SECOND}, "loyalty": set()},), "empty"),
            Wrong(({"payments": {SECOND}},), "keys are exactly"),
            Wrong(({"payments": {SECOND}, "loyalty": {FAILOVER}, "orders": {"none"}},), "keys are exactly"),
            Wrong(({"payments": {SECOND}, "payments ": {SECOND}, "loyalty": {FAILOVER}},), "keys are exactly"),
            Wrong(({SECOND, FAILOVER},), "dict"),  # one set for both servers
            Wrong(({"payments": SECOND, "loyalty": FAILOVER},), "set of the names"),  # a name, not a set
            Wrong(({"payments": {"loses the last second on a crash"}, "loyalty": {FAILOVER}},), "one of the names"),
            Wrong(({"payments": {SECOND}, "loyalty": {"failover"}},), "one of the names"),
            Wrong(({"payments": [1], "loyalty": {FAILOVER}},), "one of the names"),
            Wrong(({1: {SECOND}, 2: {FAILOVER}},), "keys are exactly"),
            Wrong(({"payments": {...}, "loyalty": None},), "not one of them"),  # a blank left in a set
            # the restart hint points to the paragraph on the append-only file, after the private Valkey
            Wrong(({"payments": {SECOND}, "loyalty": {"forgets every claim on a restart", FAILOVER}},),
                  "after the private Valkey"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
