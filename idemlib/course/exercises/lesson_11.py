"""Checks for lesson 11, Operating it."""

from __future__ import annotations

from functools import cache
from typing import Any

import pandas as pd

from idemlib.operating.batch import STEPS, consume
from idemlib.operating.day import DAY_SECONDS, NOON, Day, clock_time, run_day
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.faults import Crash, FaultPlan
from idemlib.messages import Message
from idemlib.operating.metrics import SkipRateAlert, quiet_hour, skip_rate
from idemlib.sim import RunResult
from idemlib.stores import DuckDBPayments

__all__ = ["LESSON_DAYS", "WINDOW_SECONDS", "check_alert_rule", "check_batch_crash", "lesson_days"]

WINDOW_SECONDS = 900
LESSON_DAYS = {
    "quiet day": Day(),
    "slow from noon": Day(slow_from=NOON),
    "lost-ack storm from noon": Day(storm_from=NOON, storm_until=NOON + 3 * 3600),
}
"""The three days of lesson 11: the same arrivals, and from noon either nothing, a slow handler, or lost acks."""


@cache
def lesson_days() -> dict[str, RunResult]:
    """The three days of lesson 11, run once per process and shared by the lesson and its check."""
    return {name: run_day(day) for name, day in LESSON_DAYS.items()}


def _rates(name: str) -> pd.DataFrame:
    return skip_rate(lesson_days()[name].trace, WINDOW_SECONDS, until=DAY_SECONDS)


@exercise
def check_alert_rule(alert: Any) -> Feedback:
    """Lesson 11: a SkipRateAlert that pages by 12:15 on both bad days (a window after noon), never on the quiet day,
    never at the quiet hour of :func:`~idemlib.operating.metrics.quiet_hour`."""
    if (missing := blank(alert, "SkipRateAlert(threshold=..., windows=...)")) is not None:
        return missing
    if not isinstance(alert, SkipRateAlert):
        return hint(f"Give a SkipRateAlert, such as SkipRateAlert(threshold=0.5, windows=3), "
                    f"not {type(alert).__name__}.")
    quiet = alert.fires_at(_rates("quiet day"), WINDOW_SECONDS)
    if quiet is not None:
        return hint(f"Your rule pages someone on the quiet day at {clock_time(quiet)}, when nothing is wrong: "
                    "a stray lost ack is normal. Read the quiet day's highest window in the plot and stay above it.")
    night = quiet_hour()
    if (paged := alert.fires_at(night, WINDOW_SECONDS)) is not None:
        return hint(f"Your rule pages at {clock_time(paged)} in the quiet hour of section 2, where a window handles "
                    f"{int(night['handled'].iloc[0])} deliveries and one stray lost ack is one skip. Which setting "
                    "decides whether such a thin window counts at all?")
    deadline = NOON + WINDOW_SECONDS
    for name in ("slow from noon", "lost-ack storm from noon"):
        fired = alert.fires_at(_rates(name), WINDOW_SECONDS)
        if fired is None:
            return hint(f"Your rule never fires on the day '{name}'. Look at the skip rates after noon in the "
                        "plot: is your threshold above them?")
        if fired > deadline:
            if alert.windows > 1:
                return hint(f"On the day '{name}' your rule fires at {clock_time(fired)}. It waits for "
                            f"{alert.windows} high windows in a row; how many windows after noon have ended by "
                            f"{clock_time(deadline)}?")
            return hint(f"On the day '{name}' your rule fires at {clock_time(fired)}, after {clock_time(deadline)}. "
                        "Read that day's first window after noon in the plot (and how many deliveries it "
                        "handled): does your rule count it as high?")
    return right(f"Quiet on the quiet day and at the quiet hour, and it pages at {clock_time(deadline)} on both bad "
                 "days, a window sooner than the lesson's rule. The price: a single noisy window is enough to page, "
                 "so its floor has to keep thin windows out, and a busier normal day would need a higher threshold. "
                 "Which of the two troubles it is, the delivery signals answer.")


@exercise
def check_batch_crash(step: Any) -> Feedback:
    """Lesson 11: the batch step before which a crash makes the redelivered batch all skips."""
    if (missing := blank(step, "the name of a step of the batched inbox")) is not None:
        return missing
    if not isinstance(step, str):
        return hint(f"Name the step as text, one of {list(STEPS)}.")
    # "crash before the commit", "the commit", "right after the commit": the words around a step name
    # say where the crash falls, and "after X" is the moment before the step that follows X.
    words = [word for word in step.lower().replace("_", " ").replace("-", " ").split()
             if word not in ("crash", "the", "right", "just", "immediately", "a")]
    after = words[:1] == ["after"]
    name = " ".join(words[1:] if words[:1] in (["after"], ["before"]) else words)
    if name not in STEPS:
        return hint(f"The batched inbox has no step {step!r}; its steps are {list(STEPS)}.")
    if after:
        if name == STEPS[-1]:
            return hint("After 'ack all' the batch is acknowledged: the broker redelivers nothing, so there is no "
                        "redelivered batch to watch. Name the step before which the crash falls.")
        name = STEPS[STEPS.index(name) + 1]
    # IDs of different lengths, out of order, two for one order: a batch like a real one.
    messages = [Message.charge(label, order, amount) for label, order, amount in
                (("m-7f3", 1042, 40), ("m-10b2c", 1042, 15), ("m-1", 1044, 40), ("m-a9", 1043, 25), ("m-3e", 1045, 5))]
    result = consume(DuckDBPayments(), messages, batch_size=5, faults=FaultPlan(crashes=[Crash(name)]))
    redelivered = result.trace[(result.trace["delivery"] == 2)]
    skipped = int((redelivered["event"] == "duplicate skipped").sum())
    if not (result.outcomes() == "charged once").all():
        return hint(f"Something is off: with a crash before {name!r} not every message was charged once.")
    if skipped == len(messages):
        return right(f"A crash before {name!r} comes after the commit: the IDs are saved, no ack went out, "
                     "so the broker redelivers the whole batch and every message in it is skipped.")
    return hint(f"A crash before {name!r} rolls the whole batch back: the redelivered batch finds none of its IDs "
                "and charges every message then, with no skips. Where must the crash fall for the IDs to be saved?")
