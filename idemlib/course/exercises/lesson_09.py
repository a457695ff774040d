"""Checks for lesson 09, Long work: the in-progress record."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from numbers import Real
from typing import Any

import pandas as pd

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.faults import Crash, FaultPlan
from idemlib.long_work.inprogress import BACKED_OFF, TAKEN_OVER, InProgressHandler, RecordsDuckDB, run_long
from idemlib.messages import Message

__all__ = ["check_deadline"]

DELIVERY_TO_ACK = 75.0
"""The exercise's longest payment, from its delivery to its ack (the fraud check is most of it)."""
RECOVERY_LIMIT = 300.0
"""After a crash, each payment must still be charged within this many seconds of its first delivery."""
_STEPS_AROUND_WORK = 4.0
"""The simulator's one-second steps around the work: the claim, the provider call, the completion, the ack."""
SLOW_DAY = 1.1
"""On a busy day every payment runs up to this much longer (the provider and the fraud check slow down): a
plan sized to the quiet day's longest payment, with no margin, fails then."""
WORK_LENGTHS = (DELIVERY_TO_ACK, 40.0, 12.0, DELIVERY_TO_ACK * SLOW_DAY)
"""Payments of different lengths, the quiet day's longest first, the busy day's last; a plan must fit the
longest, not the usual one."""
PAYMENTS = [Message.charge("m-10a2b", order_id=2210, amount=25), Message.charge("m-7f3", order_id=1042, amount=40),
            Message.charge("m-9c", order_id=877, amount=12)]
"""IDs of different lengths, not in rising order, several in one run."""


def _seconds(answer: Any) -> float | None:
    """90, 90.0, numpy's 90, Decimal("90"), a Fraction, timedelta(seconds=90) and "90" read as 90 s; anything else is None."""
    if isinstance(answer, timedelta):
        return answer.total_seconds()
    if isinstance(answer, str):
        try:
            answer = Decimal(answer.strip().removesuffix("s").strip())
        except InvalidOperation:
            return None
    if isinstance(answer, bool) or not isinstance(answer, (Real, Decimal)):
        return None
    return float(answer)


def _a(seconds: float) -> str:
    """The seconds with the article they take when read aloud: "a 90 s", "an 80 s", "an 11 s", "an 18000 s"."""
    said = f"{seconds:g}"
    whole = said.split(".")[0]
    vowel = said.startswith(("8", "inf")) or whole in ("11", "18") or (len(whole) == 5 and whole[:2] in ("11", "18"))
    return f"{'an' if vowel else 'a'} {said} s"


def _read(name: str, answer: Any) -> float | Feedback:
    seconds = _seconds(answer)
    if seconds is None:
        return hint(f"Give {name} as a number of seconds, not {type(answer).__name__}.")
    if math.isnan(seconds):
        return hint(f"Give {name} as a number of seconds; NaN is not one, and no clock ever passes it.")
    if seconds <= 0:
        return hint(f"{name} must be positive: a lease or a claim that is over before it starts protects nothing.")
    return seconds


def _claim_span(trace: pd.DataFrame) -> float:
    """The longest time any delivery held its claim: from its claim to its completion."""
    steps = trace[trace["event"] == "step"]
    at = steps.pivot_table(index=["message_id", "delivery"], columns="detail", values="time", aggfunc="min")
    return float((at["mark completed"] - at["claim"]).max()) if "mark completed" in at else 0.0


def _uncovered(trace: pd.DataFrame, deadline: float) -> tuple[str, float] | None:
    """The claim that ran out longest before its consumer, still working, marked it completed, and by how much.

    Whether a copy happens to arrive in that gap depends on when the producer
    retries; the gap itself is the defect.
    """
    steps = trace[trace["event"] == "step"]
    at = steps.pivot_table(index=["message_id", "delivery"], columns="detail", values="time", aggfunc="min")
    if "mark completed" not in at:
        return None
    gaps = (at["mark completed"] - at["claim"] - deadline).dropna()
    if gaps.empty or gaps.max() < 0:
        return None
    return str(gaps.idxmax()[0]), float(gaps.max())


def _lease_margin(trace: pd.DataFrame, lease: float) -> float:
    """The least time any delivery's lease had left when its ack reached the broker."""
    keys = ["message_id", "delivery"]
    delivered = trace[trace["event"] == "delivered"].groupby(keys)["time"].min()
    acked = trace[trace["event"] == "acked"].groupby(keys)["time"].min()
    return float((delivered + lease - acked).dropna().min())


def _charged_after(trace: pd.DataFrame) -> pd.Series:
    """For each message, seconds from its first delivery to the provider's first answer (NaN: never charged)."""
    first = trace[trace["event"] == "delivered"].groupby("message_id")["time"].min()
    charged = trace[trace["event"] == "provider answered"].groupby("message_id")["time"].min()
    return (charged - first).reindex(first.index)


@exercise
def check_deadline(lease_seconds: Any, deadline_seconds: Any) -> Feedback:
    """Lesson 09: a lease that outlasts the longest payment and a claim deadline that covers it and ends in time."""
    for answer, example in ((lease_seconds, "lease_seconds = 45"), (deadline_seconds, "deadline_seconds = 45")):
        if answer is ... and (missing := blank(answer, f"a number of seconds, such as {example}")) is not None:
            return missing
    if lease_seconds is None:
        return hint("A queue always has a lease (its visibility timeout): give it as a number of seconds.")
    lease = _read("the lease", lease_seconds)
    if isinstance(lease, Feedback):
        return lease
    # None is the lesson's own "no deadline" (InProgressHandler(None)): judged, not taken for a blank.
    deadline = None if deadline_seconds is None else _read("the deadline", deadline_seconds)
    if isinstance(deadline, Feedback):
        return deadline
    handler = InProgressHandler(deadline)
    database = RecordsDuckDB()
    held = 0.0
    # No fault at all: two consumers, payments of several lengths. Nothing should be handed out twice.
    for length in WORK_LENGTHS:
        calm = run_long(handler, PAYMENTS, consumers=2, lease=lease, database=database,
                        work_seconds=length - _STEPS_AROUND_WORK)
        spent = len(calm.result.events(BACKED_OFF)) + len(calm.result.events(TAKEN_OVER))
        day = "on a busy day, " if length > DELIVERY_TO_ACK else ""
        if spent or calm.result.dead_letters:
            deliveries = "delivery was" if spent == 1 else "deliveries were"
            return hint(f"With no fault at all, {day}{_a(lease)} lease ran out while a payment of {length:g} s was "
                        f"still being worked on: the broker handed it to the other consumer, and {spent} {deliveries} "
                        "refused or took over live work. The lease has to outlast the longest payment, with room "
                        "for the day the work runs slow.")
        if (margin := _lease_margin(calm.result.trace, lease)) <= 0:
            when = f"{-margin:g} s after" if margin < 0 else "the very moment"
            return hint(f"With {_a(lease)} lease, {day}a payment of {length:g} s reached its ack {when} its lease ran out. "
                        "No other consumer was free to take it in this run, but one that was would have. The lease has "
                        "to outlast the longest payment.")
        held = max(held, _claim_span(calm.result.trace))
        if deadline is not None and (gap := _uncovered(calm.result.trace, deadline)) is not None:
            message_id, by = gap
            when = f"{by:g} s before" if by > 0 else "the very moment"
            return hint(f"With {_a(deadline)} deadline, {day}the claim on {message_id} ran out {when} its consumer, "
                        "still working, marked it completed. No copy arrived in that gap in this run, but a producer's "
                        "retry that did would have taken over and repeated the work. The claim has to cover the work, "
                        "with room for the day the work runs slow.")
    if math.isinf(lease):
        return hint("A lease that never runs out never hands a dead consumer's message to anyone else: after a crash "
                    "the payment would never be charged. The lease has to end, soon enough for the redelivery to "
                    f"take over within {RECOVERY_LIMIT:g} s.")
    # A restart: every consumer dies right after its first claim of each payment, and comes back with nothing.
    # One consumer per payment, so no payment waits for a free consumer: the wait is the lease's and the claim's.
    crashed = run_long(handler, PAYMENTS, consumers=len(PAYMENTS), lease=lease, database=database,
                       work_seconds=DELIVERY_TO_ACK * SLOW_DAY - _STEPS_AROUND_WORK,
                       faults=FaultPlan(crashes=[Crash("work", message_id=None)]))
    if deadline is None and (crashed.result.dead_letters or crashed.card_charges < len(PAYMENTS)):
        return hint("With no deadline, a claim is honoured until its record expires: after a crash it refused every "
                    f"redelivery, and {len(crashed.result.dead_letters)} of {len(PAYMENTS)} payments went to the "
                    "dead-letter queue with nothing charged. The claim must end while the broker is still redelivering.")
    if deadline is not None and (crashed.result.dead_letters or crashed.card_charges < len(PAYMENTS)):
        return hint(f"With {_a(deadline)} deadline and {_a(lease)} lease, after a crash the claim refused every "
                    f"redelivery: {len(crashed.result.dead_letters)} of {len(PAYMENTS)} payments went to the dead-letter "
                    "queue with nothing charged. The claim must end while the broker is still redelivering.")
    waits = _charged_after(crashed.result.trace)
    if waits.max() > RECOVERY_LIMIT:
        slowest = str(waits.idxmax())
        return hint(f"After a crash, {slowest} was charged {waits.max():g} s after its first delivery, over the "
                    f"{RECOVERY_LIMIT:g} s allowed: the redelivery that may take over a dead claim comes only after "
                    "both the lease and the deadline have run out. Think about how each one adds to the wait.")
    assert deadline is not None  # no deadline never recovers from a crash, above
    return right(f"{_a(lease).capitalize()} lease outlasts the longest payment, a busy day's "
                 f"{DELIVERY_TO_ACK * SLOW_DAY:g} s, so nothing was handed out twice without a fault; "
                 f"{_a(deadline)} claim covers the work (a claim is "
                 f"held {held:g} s at most, from the claim to the completion); after a crash every "
                 f"payment was charged once, the slowest {waits.max():g} s after its first delivery.")
