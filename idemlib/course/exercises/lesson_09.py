"""Checks for lesson 09, Long work: the in-progress record."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from numbers import Real
from typing import Any

import pandas as pd

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan
from idemlib.long_work.inprogress import TAKEN_OVER, InProgressHandler, RecordsDuckDB, run_long
from idemlib.messages import payment_stream

__all__ = ["check_deadline"]

WORK_SECONDS = 70.0
"""The exercise's long work, from the claim to marking the record completed: a little over two leases of 30 s."""
_STEP_SECONDS = 1.0
"""The simulator's default step: the provider call and the completion take one each after the work step."""


def _longest_uncovered(trace: pd.DataFrame, deadline_seconds: float) -> tuple[str, float] | None:
    """The delivery whose claim ran out longest before its consumer marked it completed, and by how much.

    Whether a rival happens to arrive in that gap depends on timing (a redelivery,
    a duplicate the producer sent); the gap itself is the defect.
    """
    steps = trace[trace["event"] == "step"]
    at = steps.pivot_table(index=["message_id", "delivery"], columns="detail", values="time", aggfunc="min")
    if "mark completed" not in at:
        return None
    gaps = (at["mark completed"] - at["claim"] - deadline_seconds).dropna()
    if gaps.empty or gaps.max() < 0:
        return None
    return str(gaps.idxmax()[0]), float(gaps.max())


@exercise
def check_deadline(deadline_seconds: Any) -> Feedback:
    """Lesson 09: a claim deadline (seconds) that neither hands live work over nor outlives the broker's retries."""
    if (missing := blank(deadline_seconds, "a number of seconds, such as deadline_seconds = 45")) is not None:
        return missing
    if isinstance(deadline_seconds, timedelta):
        deadline_seconds = deadline_seconds.total_seconds()
    if isinstance(deadline_seconds, Decimal):
        deadline_seconds = float(deadline_seconds)
    if isinstance(deadline_seconds, bool) or not isinstance(deadline_seconds, Real):
        return hint(f"Give the deadline as a number of seconds, not {type(deadline_seconds).__name__}.")
    seconds = float(deadline_seconds)
    if math.isnan(seconds):
        return hint("Give the deadline as a number of seconds; NaN is not one, and no clock ever passes it.")
    if seconds <= 0:
        return hint("A deadline must be positive: a claim that is over before it starts protects nothing.")
    handler = InProgressHandler(seconds)
    messages = [RUNNING_EXAMPLE, *payment_stream(2)]
    database = RecordsDuckDB()
    # A race: two consumers, the work outliving the lease, so the broker hands a message to the second.
    work_step = WORK_SECONDS - 2 * _STEP_SECONDS
    slow = run_long(handler, messages, consumers=2, step_seconds={"work": work_step}, database=database)
    if takeovers := len(slow.result.events(TAKEN_OVER)):
        return hint(f"With {seconds:g} s, {takeovers} live consumer(s) still at work were taken over, so the "
                     "work ran twice for the same message, and the broker even dead-lettered "
                     f"{len(slow.result.dead_letters)}. The deadline should outlast the longest work.")
    if (gap := _longest_uncovered(slow.result.trace, seconds)) is not None:
        message_id, by = gap
        when = f"{by:g} s before" if by > 0 else "the very moment"
        return hint(f"With {seconds:g} s, the claim on {message_id} ran out {when} its consumer, still "
                     "working, marked it completed. No rival arrived in that gap in this run, but a redelivery or a "
                     "duplicate that did would have taken over and repeated the work. The deadline should outlast "
                     "the longest work.")
    # A restart: each consumer dies after its claim, before the provider call.
    crashed = run_long(handler, messages, faults=FaultPlan(crashes=[Crash("call provider", message_id=None)]),
                       database=database)
    if crashed.result.dead_letters or crashed.card_charges < len(messages):
        return hint(f"With {seconds:g} s, after a crash the claim refused every redelivery: "
                     f"{len(crashed.result.dead_letters)} of {len(messages)} messages went to the dead-letter queue "
                     "with nothing charged. The claim must end while the broker is still redelivering.")
    return right(f"{seconds:g} s outlasts the {WORK_SECONDS:g} s of work (no live consumer taken over) and ends "
                  f"before the broker gives up: after a crash, {crashed.refused} redeliveries backed off, then a takeover "
                  f"charged each of the {len(messages)} messages once.")
