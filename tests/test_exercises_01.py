"""Lesson 01's exercises: how often a faulty morning charges each payment, and what a DLQ replay charges again."""

from __future__ import annotations

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.course.exercises import check_replay_charges_again
from idemlib.course.exercises.lesson_01 import MORNING, morning_run, replay_day_run

CHARGES = {"p-101": 1, "p-102": 2, "p-103": 2, "p-104": 2, "p-105": 3, "p-106": 0, "p-107": 1}


def _replay(seed: int = 11) -> tuple[set[str], set[str], set[str]]:
    """The dead-lettered payments already charged, all the dead-lettered ones, and the payments charged and acked."""
    run = replay_day_run(seed)
    charges = run.charges_per_message()
    dead = {letter.message.message_id for letter in run.dead_letters}
    return {m for m in dead if charges.get(m, 0) > 0}, dead, set(charges[charges > 0].index) - dead


AGAIN, DEAD, ACKED = _replay()

BANKS = {
    "check_charges_per_message": Bank(
        right=[(CHARGES,), ({name: str(count) for name, count in CHARGES.items()},),
               ({name: np.int64(count) for name, count in CHARGES.items()},),
               ({name: float(count) for name, count in reversed(CHARGES.items())},)],
        wrong=[
            # "a crash is a crash": a crash before the commit leaves nothing to charge again
            Wrong(({**CHARGES, "p-101": 2},), "rollback"),
            # "only a lost ack makes a duplicate": a crash after the commit does too
            Wrong(({**CHARGES, "p-103": 1},), "after the commit"),
            # "a dead-lettered message was never charged"
            Wrong(({**CHARGES, "p-105": 0},), "already have been charged"),
            # "the broker keeps trying": it stops at the delivery limit
            Wrong(({**CHARGES, "p-105": 4},), "gives up after 3"),
            # "a named fault always happens": p-107 is never delivered twice
            Wrong(({**CHARGES, "p-107": 2},), "delivered a second time"),
            Wrong(({**CHARGES, "p-104": 1},), "reached the commit"),
            Wrong(({**CHARGES, "p-104": 3},), "reached the commit"),
            Wrong(({**CHARGES, "p-106": 3},), "rollbacks"),
            Wrong(({**CHARGES, "p-102": 1},), "ack never arrived"),
            Wrong(({name: 1 for name in CHARGES},), "of 7"),
            Wrong(({name: True for name in CHARGES},), "whole number"),
            Wrong(({**CHARGES, "p-101": 1.5},), "whole number"),
            Wrong(({"p-101": 1},), "keys"),
            Wrong(([1, 2, 2, 2, 3, 0, 1],), "dict"),
        ],
    ),
    "check_replay_charges_again": Bank(
        right=[(AGAIN,), (sorted(AGAIN),), (frozenset(AGAIN),), (tuple(f" {m} " for m in AGAIN),)],
        wrong=[
            # "the DLQ holds the payments never made": some were charged before their ack was lost
            Wrong((DEAD,), "Not every dead-lettered"),
            Wrong((set(),), "after its charge committed"),
            # "every payment charged is at risk": only what the DLQ holds is replayed
            Wrong((ACKED | AGAIN,), "dead-letter queue only"),
            Wrong((ACKED,), "dead-letter queue only"),
            Wrong((DEAD - AGAIN,), "misplaced"),
            Wrong((AGAIN | {"p-9999"},), "not in this day"),
            Wrong((len(AGAIN),), "set of message IDs"),
            Wrong(({1, 2},), "set of message IDs"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_morning_holds_every_case_the_exercise_asks_about():
    # a payment charged at every delivery and still dead-lettered, one never charged, one whose fault never fires
    run = morning_run()
    assert {letter.message.message_id for letter in run.dead_letters} == {"p-105", "p-106"}
    assert [message.message_id for message in MORNING] == list(CHARGES)


def test_a_replay_charges_again_on_other_days_too_and_the_answer_differs_by_day():
    other, _, _ = _replay(seed=5)
    assert other and other != AGAIN
    assert check_replay_charges_again(other, seed=5)
    assert not check_replay_charges_again(AGAIN, seed=5)
