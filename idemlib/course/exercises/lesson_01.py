"""Checks for lesson 01, Why duplicates arrive."""

from __future__ import annotations

import numbers
from typing import Any, TypedDict

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import NaiveHandler
from idemlib.messages import Message, payment_stream
from idemlib.sim import RunResult, simulate

__all__ = ["check_charges_per_message", "check_replay_charges_again"]

MORNING = [Message.charge(f"p-10{n}", order_id=2000 + n, amount=10 * n) for n in range(1, 8)]
"""Exercise 1's seven payments, p-101 ... p-107, each with a fault plan of its own."""

MORNING_LIMIT = 3
"""Exercise 1's broker gives a message up to the dead-letter queue after this many deliveries."""

MORNING_FAULTS = FaultPlan(
    crashes=[Crash("commit", 1, "p-101"), Crash("ack", 1, "p-103"), Crash("charge", 1, "p-104"),
             *(Crash("commit", n, "p-106") for n in (1, 2, 3))],
    lost_acks=[LostAck(1, "p-102"), LostAck(2, "p-104"), *(LostAck(n, "p-105") for n in (1, 2, 3)),
               LostAck(2, "p-107")],
)
"""What goes wrong for each payment of :data:`MORNING`; no fault is drawn at random."""


def morning_run() -> RunResult:
    """Exercise 1's run: the naive consumer on :data:`MORNING` under :data:`MORNING_FAULTS`."""
    return simulate(NaiveHandler(), MORNING, faults=MORNING_FAULTS, max_deliveries=MORNING_LIMIT)


def _whole_number(value: Any) -> int | None:
    """2, 2.0, numpy's 2 and "2" read as 2; a bool, a fraction or a word as None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.isdigit() else None
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(float(value))
    return None


_MORNING_HINTS = {
    "p-101": "p-101's consumer died before its commit: what did the rollback leave in payments, and what did the "
             "redelivery then do? (Section 3: the crash that the broker cannot tell from a lost ack.)",
    "p-102": "p-102's charge was committed, and only the ack went missing. What does the broker do with a message "
             "whose ack never arrived, and what does a consumer with no memory do with it? (Section 2.)",
    "p-103": "p-103's consumer died just before its ack, after the commit. To the broker that is the same as a lost "
             "ack (section 3): was the charge already saved?",
    "p-104": "p-104 crashed before the charge on delivery 1, and lost the ack of delivery 2. Count the deliveries that "
             "reached the commit.",
    "p-105": f"Every ack of p-105 was lost, and this broker gives up after {MORNING_LIMIT} deliveries. Did each of those "
             "deliveries commit its charge before the ack went missing? A message that reaches the dead-letter queue "
             "may already have been charged (section 4).",
    "p-106": "p-106 crashed before every commit it reached, then went to the dead-letter queue. What did the rollbacks "
             "leave behind?",
    "p-107": "p-107's plan loses the ack of a second delivery. Was p-107 ever delivered a second time?",
}


@exercise
def check_charges_per_message(answer: Any) -> Feedback:
    """Lesson 01, exercise 1: how many times the naive consumer charges each payment of :data:`MORNING`.

    The check runs the morning itself and compares, payment by payment.
    """
    if (missing := blank(answer, "a dict mapping each payment ID to how many times it is charged")) is not None:
        return missing
    names = [str(message.message_id) for message in MORNING]
    if not isinstance(answer, dict) or set(answer) != set(names):
        return hint(f"Answer with a dict whose keys are exactly {names}, each mapped to a whole number of charges.")
    given = {name: _whole_number(value) for name, value in answer.items()}
    if any(value is None for value in given.values()):
        return hint("Give each payment a whole number of charges (0, 1, 2, ...).")
    truth = {name: int(count) for name, count in morning_run().charges_per_message().reindex(names, fill_value=0).items()}
    wrong = [name for name in names if given[name] != truth[name]]
    if not wrong:
        return right("a charge that committed stays, whatever happens to its ack; a rollback leaves nothing; and the "
                     "dead-letter queue receives messages already charged: p-105 was charged at every delivery the "
                     "broker allowed. Replaying it from there would charge it again.")
    return hint(f"{len(wrong)} of {len(names)} are not right yet. {_MORNING_HINTS[wrong[0]]}")


class ReplayDay(TypedDict):
    messages: int
    ack_loss_rate: float
    crash_rate: float
    max_deliveries: int
    consumers: int


REPLAY_DAY: ReplayDay = {"messages": 60, "ack_loss_rate": 0.3, "crash_rate": 0.1, "max_deliveries": 1, "consumers": 4}
"""Exercise 2's day: 60 payments, 30% of acks lost, a 10% chance of a crash before each step, one delivery each."""


def replay_day_run(seed: int = 11) -> RunResult:
    """Exercise 2's day through the naive consumer, its faults drawn from ``seed``."""
    day = REPLAY_DAY
    return simulate(NaiveHandler(), payment_stream(day["messages"]),
                    faults=FaultPlan(ack_loss_rate=day["ack_loss_rate"], crash_rate=day["crash_rate"], seed=seed),
                    max_deliveries=day["max_deliveries"], consumers=day["consumers"])


def _message_ids(answer: Any) -> set[str] | None:
    if isinstance(answer, (set, frozenset, list, tuple)) and all(isinstance(item, str) for item in answer):
        return {item.strip() for item in answer}
    return None


@exercise
def check_replay_charges_again(answer: Any, *, seed: int = 11) -> Feedback:
    """Lesson 01, exercise 2: which dead-lettered payments of :data:`REPLAY_DAY` a replay of the DLQ charges again.

    ``seed`` draws the day's faults (the exercise's day by default), so the check can be
    run on other days too.
    """
    if (missing := blank(answer, "a set of message IDs")) is not None:
        return missing
    given = _message_ids(answer)
    if given is None:
        return hint(f'Answer with a set of message IDs (strings such as "p-0017"), not {answer!r}.')
    run = replay_day_run(seed)
    charges = run.charges_per_message()
    dead = {letter.message.message_id for letter in run.dead_letters}
    truth = {name for name in dead if charges.get(name, 0) > 0}
    if given == truth:
        return right(f"{len(truth)} of the {len(dead)} dead-lettered payments had been charged already (their acks were "
                     "lost, or the consumer died after its commit), so a replay through this consumer charges them "
                     "a second time. A dead-letter replay is one more source of duplicates.")
    if not given <= set(charges.index) | dead:
        return hint("Some of those IDs are not in this day's payments. Take the IDs from the run's dead_letters.")
    if given == dead:
        return hint("Not every dead-lettered payment had been charged: some went there because the consumer died "
                    "before its commit. Which of them does payments already hold?")
    if not given:
        return hint("At one delivery each, a lost ack sends a message to the dead-letter queue after its charge "
                    "committed (section 4). Look up which dead-lettered IDs payments already holds.")
    if not given <= dead:
        return hint("A replay reads the dead-letter queue only: a payment that was never dead-lettered is not "
                    "replayed. Start from the run's dead_letters.")
    return hint(f"{len(given ^ truth)} ID(s) are misplaced. For each dead-lettered payment, count its rows in the "
                "run's payments: a replay charges once more whatever is there.")
