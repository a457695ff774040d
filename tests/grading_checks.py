"""Checks for the grading tests' lesson, written to the contract of idemlib.course.exercises.feedback: plain
data in, and a function called only with plain data (with a keyword ``seed`` for the grader's hidden data).

They live with the tests, not the course, so the grading tests do not move when a lesson's checks do."""

from __future__ import annotations

import random
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, call_each, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process

LOST, REDELIVERED = "lost", "redelivered"  # named options, as a lesson prints them


@exercise
def check_triple_charge(plan: Any) -> Feedback:
    """Which deliveries' acks must be lost for the naive consumer to charge one payment three times?
    Each lost ack redelivers the same message, and each delivery charges again."""
    if (missing := blank(plan, "a list of the deliveries whose acks are lost")) is not None:
        return missing
    if not isinstance(plan, (list, tuple)) or not all(type(n) is int and n > 0 for n in plan):
        return hint("Answer with a list of delivery numbers (1 is the first delivery).")
    charges, delivery = 1, 1
    while delivery in plan:  # its ack lost: the broker delivers the message again
        charges, delivery = charges + 1, delivery + 1
    if charges == 3 and len(set(plan)) == 2:
        return right("two lost acks in a row make three deliveries of one message, each charging.")
    return hint(f"That plan makes {charges} charge(s) with an extra charge per redelivery; which deliveries must "
                "lose their acks in a row?")


@exercise
def check_overcharge(answer: Any, *, messages: int = 200) -> Feedback:
    """With one ack in four lost, how many charges too many for ``messages`` payments (one redelivery each)?"""
    if (missing := blank(answer, "a number")) is not None:
        return missing
    if type(answer) is not int:
        return hint("Answer with a whole number of charges.")
    return right("one extra charge per lost ack.") if answer == messages // 4 else hint(
        "Count one extra charge for each lost ack, not for each message.")


def _messages(seed: int | None) -> list[dict[str, Any]]:
    draw = random.Random(seed if seed is not None else 1)
    return [{"id": f"m-{draw.randrange(10**9)}", "amount": draw.choice([10, 20, 30]), "attempt": draw.randrange(1, 4)}
            for _ in range(200)]


@exercise
def check_message_key(key: Any, *, seed: int | None = None) -> Feedback:
    """A function from a delivered message (a dict) to its idempotency key: the same for every copy of a
    message, different for different messages. ``seed`` draws other messages than the lesson's."""
    if (missing := blank(key, "a function of one message")) is not None:
        return missing
    if not callable(key):
        return hint("Answer with a function that takes a message and returns its key.")
    messages = _messages(seed)
    try:  # through the course's call_each and in_fresh_process, as lessons 04 and 05 call an answer's function
        keys = call_each(key, [(message,) for message in messages])
        again = call_each(key, [({**message, "attempt": message["attempt"] + 1},) for message in messages])
        restarted = in_fresh_process(key, [(message,) for message in messages[:20]], OTHER_MACHINES[0], 1)
    except Exception as error:  # noqa: BLE001 - the learner's code failing is a hint
        return hint(f"Your function raised {type(error).__name__}: {error}")
    if keys != again:
        return hint("A redelivery (a higher attempt) got another key: a key must not depend on the attempt.")
    if restarted != [str(one) for one in keys[:20]]:
        return hint("A restarted consumer got other keys: a key must not depend on the process's memory.")
    if len(set(map(repr, keys))) < len({m["id"] for m in messages}):
        return hint("Two different messages got one key: the amount is not what tells messages apart.")
    return right("the message's ID is the same in every copy and different between messages.")
