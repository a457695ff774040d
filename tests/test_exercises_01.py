"""Lesson 01's exercises: the rule for how often the naive consumer charges a payment, and what a DLQ replay adds."""

from __future__ import annotations

import functools
import operator

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.course.exercises import check_charges_per_message, check_replay_charges_again
from idemlib.course.exercises.lesson_01 import (
    FAULTS,
    MORNING,
    MORNING_LIMIT,
    MORNING_MISHAPS,
    faulty_mornings,
    morning_run,
    replay_charges,
    simulated_charges,
)

ROLLED_BACK = ("crash before begin", "crash before charge", "crash before commit")


def times_charged(faults, max_deliveries):
    """The rule: a delivery made charges unless it crashed before its commit; an unharmed one ends the deliveries."""
    charges = 0
    for delivery in range(1, max_deliveries + 1):
        fault = faults.get(delivery)
        if fault in ROLLED_BACK:
            continue
        charges += 1
        if fault is None:
            break
    return charges


def recursive(faults, limit, delivery=1):
    """The same rule, another shape: one delivery, then the rest."""
    if delivery > limit:
        return 0
    fault = faults.get(delivery)
    if fault is None:
        return 1
    return (fault not in ROLLED_BACK) + recursive(faults, limit, delivery + 1)


class Rule:
    """A callable object, the rule as a class: grading calls it like any function."""

    def __call__(self, faults, max_deliveries):
        return float(times_charged(faults, max_deliveries))  # 2.0 is 2


def counting_faults(faults, limit):
    """A misconception: one charge, plus one for every lost ack; crashes and the delivery limit ignored."""
    return 1 + sum(fault == "ack lost" for fault in faults.values())


def any_crash_repeats(faults, limit):
    """"A crash is a crash": every fault makes one more charge, the crash before the commit too."""
    return times_charged({d: ("ack lost" if f in ROLLED_BACK else f) for d, f in faults.items()}, limit)


def only_acks_lost(faults, limit):
    """"Only a lost ack makes a duplicate": a crash after the commit is counted as a rollback."""
    return times_charged({d: ("crash before commit" if f == "crash before ack" else f) for d, f in faults.items()},
                         limit)


def every_fault_fires(faults, limit):
    """"A named fault always happens": the deliveries after an unharmed one are counted as if they came."""
    unharmed = next((d for d in range(1, limit + 1) if d not in faults), limit)
    return times_charged(faults, limit) + sum(f not in ROLLED_BACK for d, f in faults.items() if unharmed < d <= limit)


def dead_letters_unpaid(faults, limit):
    """"A dead-lettered message was never charged.\""""
    made = times_charged(faults, limit)
    dead = all(faults.get(d) is not None for d in range(1, limit + 1))
    return 0 if dead else made


def broker_keeps_trying(faults, limit):
    """"The broker keeps trying": the limit ignored."""
    return times_charged(faults, 10)


def beyond_the_limit(faults, limit):
    """Every planned delivery counted, even those past the limit."""
    return times_charged(faults, max([limit, *faults]))


def off_by_one(faults, limit):
    return times_charged(faults, limit - 1)


def raises(faults, limit):
    return faults["1"]  # the delivery numbers taken for strings


def words(faults, limit):
    return "twice"


class OwnBatches:
    """An answer that offers to answer the check's batch of calls itself, with nothing: the check never uses an
    answer's own ``call_each`` (only the grader's), so it calls this one and is told 'garbage'."""

    def __call__(self, faults, limit):
        return "garbage"

    def call_each(self, arguments):
        return []


ON_THE_DAY, AFTER = replay_charges()
FIRST = next(iter(AFTER))

BANKS = {
    "check_charges_per_message": Bank(
        right=[(times_charged,), (recursive,), (Rule(),), (lambda f, m: np.int64(times_charged(f, m)),),
               (functools.partial(times_charged),), (lambda f, m: str(times_charged(f, m)),),
               (lambda faults, limit, /: times_charged(faults, limit),)],
        wrong=[
            Wrong((counting_faults,), "already saved"),  # p-103's question: a crash after the commit
            Wrong((any_crash_repeats,), "rollback"),
            Wrong((only_acks_lost,), "after its commit"),
            Wrong((every_fault_fires,), "Is there a second delivery"),
            Wrong((dead_letters_unpaid,), "Did each delivery commit its charge"),
            Wrong((broker_keeps_trying,), "gives up after max_deliveries"),
            Wrong((beyond_the_limit,), "beyond max_deliveries"),
            Wrong((off_by_one,), "gives up after max_deliveries"),
            Wrong((lambda f, m: 1,), "not right yet"),
            Wrong((lambda f, m: m,), "not right yet"),
            Wrong((raises,), "KeyError"),
            Wrong((words,), "whole number"),
            Wrong((lambda f, m: True,), "whole number"),
            Wrong((lambda f, m: 1.5,), "whole number"),
            Wrong((operator.add,), "failed"),  # dict + int: a TypeError becomes a hint
            # the old exercise's answer, the morning's counts as a dict, is not a function
            Wrong(({"p-101": 1, "p-102": 2, "p-103": 2, "p-104": 2, "p-105": 3, "p-106": 0, "p-107": 1},), "function"),
            Wrong((3,), "function"),
            # odd numbers: far beyond a float, a superscript digit str.isdigit() takes: refused, never a crash
            Wrong((lambda f, m: 10**400,), "not right yet"),
            Wrong((lambda f, m: "\u00b2",), "whole number"),
            Wrong((OwnBatches(),), "it returned 'garbage'"),
        ],
    ),
    "check_replay_charges_again": Bank(
        right=[(AFTER,), ({f" {name} ": str(count) for name, count in AFTER.items()},),
               ({name: np.int64(count) for name, count in reversed(AFTER.items())},),
               ({name: float(count) for name, count in AFTER.items()},)],
        wrong=[
            # the day's counts alone: the replay forgotten
            Wrong((ON_THE_DAY,), "the day alone"),
            # "the DLQ holds the payments never made": only those counted
            Wrong(({name: 1 for name, count in ON_THE_DAY.items() if count == 0},), "missing"),
            # "the replay charges only the unpaid ones again" / every payment once
            Wrong(({name: max(count, 1) for name, count in ON_THE_DAY.items()},), "the day alone"),
            Wrong(({name: 1 for name in AFTER},), "more than one delivery"),
            # the old exercise's answer: only the dead-lettered payments charged already
            Wrong(({name: count for name, count in AFTER.items() if ON_THE_DAY[name] > 0},), "missing"),
            Wrong(({name: count + 1 for name, count in AFTER.items()},), "more than"),
            Wrong(({**AFTER, "p-0003": 1},), "dead-letter queue only"),
            Wrong(({**AFTER, "p-9999": 1},), "not in this day"),
            Wrong((set(AFTER),), "dict"),
            Wrong(({name: True for name in AFTER},), "whole number"),
            Wrong(({name: 1.5 for name in AFTER},), "whole number"),
            Wrong((len(AFTER),), "dict"),
            Wrong(({**AFTER, FIRST: 10**400},), "more than"),
            Wrong(({**AFTER, FIRST: "\u00b2"},), "whole number"),
            # the same payment twice, once with a space: a contradictory answer, whichever comes last
            Wrong(({FIRST + " ": 99, **AFTER},), "given twice"),
            Wrong(({**AFTER, FIRST + " ": 99},), "given twice"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_rule_is_what_the_simulator_does_for_every_plan_of_up_to_three_deliveries():
    import itertools
    for limit in (1, 2, 3):
        plans = [{d: f for d, f in enumerate(combo, start=1) if f}
                 for combo in itertools.product((None, *FAULTS), repeat=limit)]
        assert simulated_charges(plans, limit) == [times_charged(plan, limit) for plan in plans]


def test_the_worked_morning_holds_the_traps_and_the_check_judges_other_cases_on_other_seeds():
    run = morning_run()
    assert {letter.message.message_id for letter in run.dead_letters} == {"p-105", "p-106"}
    assert [message.message_id for message in MORNING] == list(MORNING_MISHAPS)
    assert run.charges_per_message().reindex(list(MORNING_MISHAPS), fill_value=0).tolist() == [
        times_charged(faults, MORNING_LIMIT) for faults in MORNING_MISHAPS.values()]
    cases = {seed: faulty_mornings(seed=seed) for seed in (0, 1)}
    assert cases[0] != cases[1] and len(cases[0]) > 150
    # the drawn cases hold faults the broker never gets to, and every outcome from 0 to 4 charges
    assert any(max(faults, default=0) > limit for faults, limit, _ in cases[1])
    assert {charges for _, _, charges in cases[1]} == {0, 1, 2, 3, 4}
    assert check_charges_per_message(times_charged, seed=1)
    # a rule right only on the telling cases is caught by the drawn ones
    telling = {(tuple(sorted(f.items())), m): c for f, m, c in cases[0][:12]}
    assert not check_charges_per_message(lambda f, m: telling.get((tuple(sorted(f.items())), m), 0), seed=1)


def test_a_replay_adds_one_charge_to_each_dead_letter_and_the_answer_differs_by_day():
    other_day, other = replay_charges(seed=5)
    assert all(other[name] == count + 1 for name, count in other_day.items())
    assert {0, 1, 2} <= set(ON_THE_DAY.values())  # never charged, charged once, charged at both deliveries
    assert other != AFTER
    assert check_replay_charges_again(other, seed=5)
    assert not check_replay_charges_again(AFTER, seed=5)
