"""Checks for lesson 01, Why duplicates arrive."""

from __future__ import annotations

import functools
import numbers
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from idemlib.course.exercises.feedback import Feedback, blank, call_each, exercise, hint, right
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import NaiveHandler
from idemlib.messages import Message, payment_stream
from idemlib.sim import RunResult, simulate

__all__ = ["check_charges_per_message", "check_replay_charges_again"]

FAULTS = ("crash before begin", "crash before charge", "crash before commit", "crash before ack", "ack lost")
"""What can go wrong on one delivery of the naive consumer: a crash just before one of its steps, or a lost ack."""

Mishaps = dict[int, str]
"""One payment's faults: delivery number → one of :data:`FAULTS`; a delivery not named goes through unharmed."""


def fault_plan(mishaps: Mapping[str, Mishaps]) -> FaultPlan:
    """The simulator's plan for ``mishaps``: message ID → that payment's :data:`Mishaps`."""
    crashes, lost_acks = [], []
    for message_id, faults in mishaps.items():
        for delivery, fault in faults.items():
            if fault == "ack lost":
                lost_acks.append(LostAck(delivery, message_id))
            else:
                crashes.append(Crash(fault.removeprefix("crash before "), delivery, message_id))
    return FaultPlan(crashes=crashes, lost_acks=lost_acks)


MORNING_MISHAPS: dict[str, Mishaps] = {
    "p-101": {1: "crash before commit"}, "p-102": {1: "ack lost"}, "p-103": {1: "crash before ack"},
    "p-104": {1: "crash before charge", 2: "ack lost"}, "p-105": {1: "ack lost", 2: "ack lost", 3: "ack lost"},
    "p-106": {1: "crash before commit", 2: "crash before commit", 3: "crash before commit"}, "p-107": {2: "ack lost"},
}
"""Exercise 1's worked morning: what goes wrong for each of seven payments; no fault is drawn at random."""

MORNING = [Message.charge(name, order_id=2000 + n, amount=10 * n) for n, name in enumerate(MORNING_MISHAPS, start=1)]
"""The morning's seven payments, p-101 ... p-107."""

MORNING_LIMIT = 3
"""The morning's broker gives a message up to the dead-letter queue after this many deliveries."""

MORNING_FAULTS = fault_plan(MORNING_MISHAPS)
""":data:`MORNING_MISHAPS` as the simulator's plan."""


def morning_run() -> RunResult:
    """Exercise 1's run: the naive consumer on :data:`MORNING` under :data:`MORNING_FAULTS`."""
    return simulate(NaiveHandler(), MORNING, faults=MORNING_FAULTS, max_deliveries=MORNING_LIMIT)


def _whole_number(value: Any) -> int | None:
    """2, 2.0, numpy's 2 and "2" read as 2; a bool, a fraction or a word as None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, str):
        value = value.strip()  # ASCII digits only: "²" is a digit to str.isdigit() but no number to int()
        return int(value) if re.fullmatch(r"[0-9]{1,18}", value) else None
    if isinstance(value, numbers.Integral):
        return int(value)  # exact, however large: no float in between to overflow
    if isinstance(value, numbers.Real):
        try:
            as_float = float(value)
        except (OverflowError, ValueError):  # a Fraction beyond any float, or a number type that will not say
            return None
        return int(as_float) if as_float.is_integer() else None
    return None


def simulated_charges(cases: Sequence[Mishaps], max_deliveries: int) -> list[int]:
    """How many times the naive consumer charges each case's payment, one consumer and a 30-second lease, as run."""
    names = [f"c-{number}" for number in range(len(cases))]
    messages = [Message.charge(name, order_id=5000 + number, amount=10) for number, name in enumerate(names)]
    faults = fault_plan(dict(zip(names, cases)))
    run = simulate(NaiveHandler(), messages, faults=faults, max_deliveries=max_deliveries)
    counts = run.charges_per_message().reindex(names, fill_value=0)
    return [int(count) for count in counts]


_TELLING: tuple[tuple[Mishaps, int, str], ...] = (
    ({}, 3, "With no fault, the first delivery charges, commits and acks. Does your function count that charge, "
            "and stop there?"),
    ({1: "ack lost"}, 3, "The charge was committed and only the ack went missing. What does the broker do with a "
                         "message whose ack never arrived, and what does a consumer with no memory do with it? "
                         "(Section 2.)"),
    ({1: "crash before commit"}, 3, "The consumer died before its commit: what did the rollback leave in payments, "
                                    "and what did the redelivery then do? (Section 3.)"),
    ({1: "crash before ack"}, 3, "The consumer died after its commit, just before its ack. To the broker that is "
                                 "a lost ack (section 3): was the charge already saved?"),
    ({1: "crash before charge"}, 3, "A crash before the charge: what had been written, and what does the "
                                    "redelivery do?"),
    ({1: "crash before begin"}, 3, "A crash before the transaction even began: what had been written, and what "
                                   "does the redelivery do?"),
    ({2: "ack lost"}, 3, "This plan loses the ack of a second delivery. Is there a second delivery?"),
    ({1: "ack lost", 2: "ack lost", 3: "ack lost"}, 3,
     "Every ack is lost, and this broker gives up after max_deliveries deliveries. Did each delivery commit its "
     "charge before its ack went missing, and are there any more deliveries after the last? (Section 4.)"),
    ({1: "ack lost", 2: "ack lost", 3: "ack lost", 4: "ack lost"}, 3,
     "A fault planned for a delivery beyond max_deliveries: does the broker ever make that delivery?"),
    ({1: "ack lost"}, 1, "With one delivery allowed, the message goes to the dead-letter queue when its ack is lost. "
                         "Was it charged before that? (Section 4.)"),
    ({1: "crash before commit", 2: "crash before commit", 3: "crash before commit"}, 3,
     "Every delivery crashed before its commit, and then the message was dead-lettered. What did the rollbacks "
     "leave behind?"),
    ({1: "crash before charge", 2: "ack lost"}, 3, "A crash before the charge, then a lost ack: count the "
                                                   "deliveries that reached the commit."),
)
"""Cases every answer is tried on first, each with the question its failure raises."""


@functools.lru_cache(maxsize=2)  # drawn and run once per seed; the cases are never changed
def faulty_mornings(*, seed: int = 0) -> tuple[tuple[Mishaps, int, int], ...]:
    """:data:`_TELLING`'s cases, then 150 drawn by ``seed``: each (faults, max_deliveries, charges as simulated).

    A drawn case allows 1 to 4 deliveries and names a fault, or none, for each of them and
    sometimes one more, a fault the broker never gets to.
    """
    draw = random.Random(seed)
    cases: list[tuple[Mishaps, int]] = [(faults, limit) for faults, limit, _ in _TELLING]
    for _ in range(150):
        limit = draw.randint(1, 4)
        planned = range(1, limit + 1 + (draw.random() < 0.3))
        cases.append(({delivery: fault for delivery in planned
                       if (fault := draw.choice((None, None, *FAULTS))) is not None}, limit))
    charges: dict[int, int] = {}
    for limit in sorted({limit for _, limit in cases}):
        numbers = [number for number, (_, each) in enumerate(cases) if each == limit]
        charges.update(zip(numbers, simulated_charges([cases[number][0] for number in numbers], limit)))
    return tuple((faults, limit, charges[number]) for number, (faults, limit) in enumerate(cases))


@exercise
def check_charges_per_message(times_charged: Any, *, seed: int = 0) -> Feedback:
    """Lesson 01, exercise 1: a function (faults, max_deliveries) → how often the naive consumer charges that payment.

    Judged against the simulator on :func:`faulty_mornings` (the telling cases, then ones drawn by
    ``seed``): one consumer, a 30-second lease, a broker that dead-letters after ``max_deliveries``.
    """
    if (missing := blank(times_charged, "a function such as def times_charged(faults, max_deliveries): ...")) is not None:
        return missing
    if not callable(times_charged):
        return hint("Give a function that takes a payment's faults (a dict such as {1: 'ack lost'}) and the broker's "
                    "max_deliveries, and returns how many times the payment is charged.")
    cases = faulty_mornings(seed=seed)
    try:
        given = call_each(times_charged, [(dict(faults), limit) for faults, limit, _ in cases])
    except Exception as error:  # noqa: BLE001 - the learner's code: any error is worth a hint, not a traceback
        return hint(f"Calling it as times_charged({{1: 'ack lost'}}, 3) failed ({type(error).__name__}: {error}). It "
                    "takes a dict from delivery number (1, 2, ...) to one of FAULTS, and a whole number.")
    counts = [_whole_number(value) for value in given]
    for (faults, limit, _), said, count in zip(cases, given, counts):
        if count is None:
            return hint(f"For times_charged({faults!r}, {limit}) it returned {said!r:.40}: give a whole number of charges "
                        "(0, 1, 2, ...).")
    wrong = [number for number, ((_, _, truth), count) in enumerate(zip(cases, counts)) if count != truth]
    if not wrong:
        return right(f"{len(cases)} payments, each as the simulator charged it. A charge that committed stays, "
                     "whatever happens to its ack; a rollback leaves nothing; a fault planned for a delivery that "
                     "never comes never strikes; and the dead-letter queue receives messages already charged.")
    faults, limit, _ = cases[wrong[0]]
    question = (_TELLING[wrong[0]][2] if wrong[0] < len(_TELLING) else
                "Walk it delivery by delivery: which deliveries does the broker make, and which of them committed "
                "a charge before its fault?")
    return hint(f"{len(wrong)} of {len(cases)} payments are not right yet. For times_charged({faults!r}, {limit}) "
                f"your function returns {counts[wrong[0]]!r:.40}. {question}")


class ReplayDay(TypedDict):
    messages: int
    ack_loss_rate: float
    crash_rate: float
    max_deliveries: int
    consumers: int


REPLAY_DAY: ReplayDay = {"messages": 60, "ack_loss_rate": 0.3, "crash_rate": 0.1, "max_deliveries": 2, "consumers": 4}
"""Exercise 2's day: 60 payments, 30% of acks lost, a 10% chance of a crash before each step, two deliveries each."""


def replay_day_run(seed: int = 11) -> RunResult:
    """Exercise 2's day through the naive consumer, its faults drawn from ``seed``."""
    day = REPLAY_DAY
    return simulate(NaiveHandler(), payment_stream(day["messages"]),
                    faults=FaultPlan(ack_loss_rate=day["ack_loss_rate"], crash_rate=day["crash_rate"], seed=seed),
                    max_deliveries=day["max_deliveries"], consumers=day["consumers"])


@functools.lru_cache(maxsize=2)  # each day is run once per seed; the counts are never changed
def replay_charges(seed: int = 11) -> tuple[dict[str, int], dict[str, int]]:
    """Each dead-lettered payment of :data:`REPLAY_DAY` → how often the day charged it, and how often it is charged in
    all once the dead-letter queue is replayed through the naive consumer with no fault (the replay is run, not
    assumed)."""
    day = replay_day_run(seed)
    dead = [letter.message for letter in day.dead_letters]
    replay = simulate(NaiveHandler(), dead).charges_per_message()
    before = day.charges_per_message()
    on_the_day = {str(message.message_id): int(before.get(message.message_id, 0)) for message in dead}
    return on_the_day, {name: count + int(replay.get(name, 0)) for name, count in on_the_day.items()}


@exercise
def check_replay_charges_again(answer: Any, *, seed: int = 11) -> Feedback:
    """Lesson 01, exercise 2: each dead-lettered payment of :data:`REPLAY_DAY` → its charges once the DLQ is replayed.

    ``seed`` draws the day's faults (the exercise's day by default), so the check can be
    run on other days too.
    """
    if (missing := blank(answer, "a dict mapping each dead-lettered payment's ID to how many times it is charged")) \
            is not None:
        return missing
    if not isinstance(answer, dict) or not all(isinstance(key, str) for key in answer):
        return hint(f'Answer with a dict from message ID (a string such as "p-0017") to a whole number, not {answer!r}.')
    counts = {key.strip(): _whole_number(value) for key, value in answer.items()}
    if len(counts) < len(answer):  # two keys that differ only in spaces: one payment given two counts
        twice = next(name for name in counts if sum(key.strip() == name for key in answer) > 1)
        return hint(f"{twice} is given twice (its ID with and without spaces around it): give each payment one count.")
    given = {name: count for name, count in counts.items() if count is not None}
    if len(given) < len(counts):
        return hint("Give each payment a whole number of charges (0, 1, 2, ...).")
    on_the_day, truth = replay_charges(seed)
    day_ids = {message.message_id for message in payment_stream(REPLAY_DAY["messages"])}
    if given == truth:
        most = max(truth.values())
        return right(f"all {len(truth)} dead-lettered payments, {sum(count > 1 for count in truth.values())} of them "
                     f"charged more than once, some {most} times. A message reaches the dead-letter queue for the "
                     "deliveries it used up, not for the charges it failed to make; a replay through a consumer "
                     "with no memory charges every one of them once more.")
    if not set(given) <= day_ids:
        return hint("Some of those IDs are not in this day's payments. Take the IDs from the run's dead_letters.")
    if not set(given) <= set(truth):
        return hint("A replay reads the dead-letter queue only: a payment that was acked is never replayed. Which "
                    "payments did the day dead-letter?")
    if set(given) < set(truth):
        return hint(f"{len(truth) - len(given)} dead-lettered payment(s) are missing. The replay delivers every "
                    "message in the dead-letter queue, also those the consumer never got to charge: give each one "
                    "its count.")
    off = {name for name in truth if given[name] != truth[name]}
    limit = REPLAY_DAY["max_deliveries"]
    if any(given[name] > limit + 1 for name in off):
        return hint(f"Some counts are more than the day's {limit} deliveries and the replay's one could make. How "
                    "many deliveries did a dead-lettered message get?")
    if all(given[name] == on_the_day[name] for name in off):
        return hint(f"{len(off)} count(s) are the charges of the day alone. What does the replay do with each "
                    "message it delivers to a consumer with no memory?")
    if all(truth[name] > 1 and given[name] < truth[name] for name in off):
        return hint("Some dead-lettered payments were charged at more than one delivery of the day: a lost ack after "
                    "a commit leaves the charge in place (section 3), and then the next delivery charges again. "
                    "Count each payment's rows in the day's payments.")
    return hint(f"{len(off)} of {len(truth)} counts are not right yet. For each dead-lettered payment: the day's rows "
                "in payments, plus what the replay does (section 4).")
