"""Checks for lesson 09, Long work: the in-progress record."""

from __future__ import annotations

from numbers import Real
from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan
from idemlib.inprogress import TAKEN_OVER, InProgressHandler, RecordsDuckDB, run_long
from idemlib.messages import payment_stream

__all__ = ["check_deadline"]

WORK_SECONDS = 70.0
"""The exercise's long work: a little over two leases of 30 s."""


@exercise
def check_deadline(deadline_seconds: Any) -> Feedback:
    """Lesson 09: a claim deadline (seconds) that neither hands live work over nor outlives the broker's retries."""
    if (missing := blank(deadline_seconds, "a number of seconds, such as deadline_seconds = 45")) is not None:
        return missing
    if isinstance(deadline_seconds, bool) or not isinstance(deadline_seconds, Real):
        return hint(f"Give the deadline as a number of seconds, not {type(deadline_seconds).__name__}.")
    if deadline_seconds <= 0:
        return hint("A deadline must be positive: a claim that is over before it starts protects nothing.")
    handler = InProgressHandler(float(deadline_seconds))
    messages = [RUNNING_EXAMPLE, *payment_stream(2)]
    database = RecordsDuckDB()
    # A race: two consumers, the work outliving the lease, so the broker hands each message to the second.
    slow = run_long(handler, messages, consumers=2, step_seconds={"work": WORK_SECONDS}, database=database)
    if takeovers := len(slow.result.events(TAKEN_OVER)):
        return hint(f"With {deadline_seconds:g} s, {takeovers} live consumer(s) still at work were taken over, so the "
                     "work ran twice for the same message, and the broker even dead-lettered "
                     f"{len(slow.result.dead_letters)}. The deadline should outlast the longest work.")
    # A restart: each consumer dies after its claim, before the provider call.
    crashed = run_long(handler, messages, faults=FaultPlan(crashes=[Crash("call provider", message_id=None)]),
                       database=database)
    if crashed.result.dead_letters or crashed.card_charges < len(messages):
        return hint(f"With {deadline_seconds:g} s, after a crash the claim refused every redelivery: "
                     f"{len(crashed.result.dead_letters)} of {len(messages)} messages went to the dead-letter queue "
                     "with nothing charged. The claim must end while the broker is still redelivering.")
    return right(f"{deadline_seconds:g} s outlasts the {WORK_SECONDS:g} s of work (no live consumer taken over) and ends "
                  f"before the broker gives up: after a crash, {crashed.refused} redeliveries backed off, then a takeover "
                  f"charged each of the {len(messages)} messages once.")
