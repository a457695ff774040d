"""Walks every crash point of a handler and reports what each one does to the money."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import HANDLERS, Handler
from idemlib.messages import Message
from idemlib.sim import outcome_of, simulate

RUNNING_EXAMPLE = Message.charge("m-7f3", order_id=1042, amount=40)
"""The course's running example: message m-7f3 asks to charge order 1042 $40."""


def fault_points(handler: Handler) -> list[tuple[str, FaultPlan]]:
    """Every single fault that can strike one delivery of ``handler``: a crash before each step, or a lost ack."""
    points = [("no fault", FaultPlan())]
    points += [(f"crash before {step}", FaultPlan(crashes=[Crash(step)])) for step in handler.steps]
    points.append(("ack lost", FaultPlan(lost_acks=[LostAck()])))
    return points


def crash_matrix(handlers: Iterable[Handler] = HANDLERS, message: Message = RUNNING_EXAMPLE) -> pd.DataFrame:
    """Run ``message`` through each handler once per fault point, redelivering until it is acked.

    One row per (handler, fault): the dollars charged, how many charges that is,
    and the outcome (charge lost, charged once, charged twice).
    """
    rows = []
    amount = message.body["amount"]
    for handler in handlers:
        for fault, plan in fault_points(handler):
            total = simulate(handler, [message], faults=plan).total_charged
            rows.append((handler.name, fault, total, total // amount, outcome_of(total // amount)))
    return pd.DataFrame(rows, columns=["handler", "fault", "total charged", "charges", "outcome"])


def ack_loss_sweep(
    handlers: Iterable[Handler],
    messages: list[Message],
    rates: Iterable[float],
    *,
    seed: int = 7,
) -> pd.DataFrame:
    """Total charged by each handler as the share of lost acks grows.

    Every handler meets the same lost acks at a given rate (the fault draws depend
    only on the seed, the message and the delivery), so the totals compare like for like.
    """
    rows = []
    for rate in rates:
        plan = FaultPlan(ack_loss_rate=rate, seed=seed)
        for handler in handlers:
            result = simulate(handler, messages, faults=plan)
            rows.append((handler.name, rate, result.total_charged, result.expected_total))
    return pd.DataFrame(rows, columns=["handler", "ack loss rate", "total charged", "expected total"])
