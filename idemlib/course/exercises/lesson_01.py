"""Checks for lesson 01, Why duplicates arrive."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import FaultPlan
from idemlib.handlers import NaiveHandler
from idemlib.messages import payment_stream
from idemlib.sim import simulate

__all__ = ["check_triple_charge", "check_overcharge"]


def _delivery_number(value: Any) -> Any:
    """2, numpy's 2 (what a pandas column gives) and "2" all name the second delivery; anything else stays as it is."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def _with_whole_deliveries(plan: FaultPlan) -> FaultPlan:
    """``plan`` with every named fault's delivery read as a plain int, so 2, np.int64(2) and "2" mean the same."""
    def fixed(faults: Any) -> Any:
        return [dataclasses.replace(fault, delivery=_delivery_number(fault.delivery))
                if dataclasses.is_dataclass(fault) and hasattr(fault, "delivery") else fault for fault in faults]

    return dataclasses.replace(plan, crashes=fixed(plan.crashes), lost_acks=fixed(plan.lost_acks))


OTHER_DRAWS = 8
"""How many fresh sets of random draws a plan with fault rates must also triple under: one that triples
only by how its draws fell (about one in seven at best for each set) fails at least one of them."""


def _naive_charge(plan: FaultPlan) -> tuple[int, list[Any]]:
    """What the naive consumer charges for m-7f3 under ``plan``, and what it dead-lettered."""
    result = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=plan)
    return result.total_charged, list(result.dead_letters)


def _draws_at_random(plan: FaultPlan) -> bool:
    return any(rate > 0 for rate in (plan.ack_loss_rate, plan.crash_rate, plan.response_loss_rate))


@exercise
def check_triple_charge(plan: Any) -> Feedback:
    """Lesson 01: a fault plan under which the naive consumer charges m-7f3 three times ($120).

    A plan that draws faults at a rate is also run with fresh draws: it must charge three
    times under every one of them, as a plan that names its faults does, not by chance.
    """
    if (missing := blank(plan, "a FaultPlan(...)")) is not None:
        return missing
    if not isinstance(plan, FaultPlan):
        return hint(f"That is a {type(plan).__name__}; the answer is a FaultPlan(...).")
    plan = _with_whole_deliveries(plan)
    (charged, dead_letters), target = _naive_charge(plan), 3 * RUNNING_EXAMPLE.body["amount"]
    if charged == target:
        redrawn = [plan.seed + n for n in range(1, OTHER_DRAWS + 1)] if _draws_at_random(plan) else []
        otherwise = sorted({_naive_charge(dataclasses.replace(plan, seed=draw))[0] for draw in redrawn} - {target})
        if otherwise:
            return hint(f"Your plan charged ${charged} this time, but only because of how its random draws fell: "
                        f"drawn afresh, the same plan charged {' or '.join(f'${other}' for other in otherwise)}. "
                        "A fault at a rate may or may not happen. Name the faults the plan needs, so that it "
                        "charges three times whatever is drawn.")
        return right(f"the naive consumer charged ${charged}: every delivery that committed but whose ack never reached "
                     "the broker was delivered again and charged again.")
    if (unheard := _faults_that_cannot_happen(plan)) is not None:
        return unheard
    if dead_letters:
        return hint(f"Your plan sent m-7f3 to the dead-letter queue after {dead_letters[0].deliveries} deliveries, "
                     f"with ${charged} charged. Fewer faults, placed where a commit has already happened.")
    if charged < target:
        return hint(f"Your plan charged ${charged}. Each extra charge needs a delivery that commits and yet is delivered "
                     "again. Which fault lets the commit stand but keeps the message on the queue?")
    return hint(f"Your plan charged ${charged}: too many redeliveries. Count how many deliveries must commit.")


def _faults_that_cannot_happen(plan: FaultPlan) -> Feedback | None:
    """A hint for a named fault that never fires here: a crash before a step the naive consumer does not
    have, or a fault for a message other than m-7f3. None when every named fault can happen."""
    steps = NaiveHandler().steps
    for crash in plan.crashes:
        if getattr(crash, "before", None) not in steps:
            return hint(f"Crash({getattr(crash, 'before', None)!r}) names no step of the naive consumer, so that crash "
                        f"never happens. Its steps are {', '.join(steps)}.")
    for fault in [*plan.crashes, *plan.lost_acks]:
        if getattr(fault, "message_id", None) not in (None, RUNNING_EXAMPLE.message_id):
            return hint(f"Your plan names a fault for message {fault.message_id!r}, and the only message in this run "
                        f"is {RUNNING_EXAMPLE.label}, so that fault never happens.")
    return None


def _dollars(answer: Any) -> float | None:
    """120, 120.0, numpy's 120 (a pandas sum), "120", "$1,120", "USD 120" and "120 dollars" all read as dollars;
    anything else is None."""
    if isinstance(answer, (bool, np.bool_)):
        return None
    if isinstance(answer, str):
        answer = answer.strip().lower().removeprefix("usd").removesuffix("dollars").removesuffix("usd")
        answer = answer.strip().lstrip("$").replace(",", "")
    try:
        return float(answer)
    except (TypeError, ValueError):
        return None


@exercise
def check_overcharge(answer: Any, *, messages: int = 200, rate: float = 0.25, seed: int = 7) -> Feedback:
    """Lesson 01: dollars overcharged by the naive consumer on ``payment_stream(messages)`` at ``rate`` ack loss."""
    if (missing := blank(answer, "a number of dollars")) is not None:
        return missing
    dollars = _dollars(answer)
    if dollars is None:
        return hint(f"Give a number of dollars (such as 120 or \"$120\"), not {answer!r}.")
    stream = payment_stream(messages)
    result = simulate(NaiveHandler(), stream, faults=FaultPlan(ack_loss_rate=rate, seed=seed))
    overcharge = result.total_charged - result.expected_total
    answer = dollars
    if answer == overcharge:
        return right(f"${overcharge:,} more than the customers owe, from nothing but lost acks.")
    if answer == result.total_charged:
        return hint("That is everything charged. The question asks how much more than the customers owe.")
    if answer == result.expected_total:
        return hint("That is what the customers owe. The question asks how much was charged on top of it.")
    if answer == -overcharge:
        return hint("Right size, wrong sign: subtract what is owed from what was charged.")
    if answer == len(result.payments) - result.payments["message_id"].nunique():
        return hint("That is how many extra charges there were, a count of rows. The question asks for dollars: "
                    "each extra charge costs its own payment's amount.")
    shown = f"{answer:,.0f}" if answer == int(answer) else f"{answer:,.2f}"  # 3840.4 must not read as $3,840
    return hint(f"Not ${shown}. Run the naive consumer on payment_stream({messages}) with "
                 f"FaultPlan(ack_loss_rate={rate}, seed={seed}) and compare total_charged with expected_total.")
