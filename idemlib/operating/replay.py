"""Dead letters and their replay: a duplicate source the inbox has to absorb.

A message that fails every delivery goes to the dead-letter queue after the
broker's limit. Once the cause is fixed, an operator replays the queue. The
replay brings back messages whose first attempt may well have committed (an ack
that never arrived looks exactly like a failure to the broker), and a replay tool
that is itself at-least-once may run twice. As long as the IDs are still in the
inbox (retention longer than the dead-letter queue is kept), each replayed
message is charged once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from idemlib.faults import FaultPlan, LostAck
from idemlib.handlers import Handler
from idemlib.messages import Message
from idemlib.sim import simulate
from idemlib.stores import DuckDBPayments

POISON = Message("m-9c2", {"order_id": 1043, "amount": "25"})
"""A payment whose amount a producer bug sent as text: no delivery can be handled until someone fixes it."""


def repair_amount(body: Any) -> Any:
    """The fix: read a whole-dollar amount sent as text as the number it means (the ID stays the same)."""
    if isinstance(body, dict) and isinstance(body.get("amount"), str) and body["amount"].isdigit():
        return {**body, "amount": int(body["amount"])}
    return body


def dead_letter_replay(
    handler: Handler,
    messages: list[Message],
    *,
    acks_lost_for: str = "m-7f3",
    max_deliveries: int = 5,
    repair: Callable[[Any], Any] = repair_amount,
    replays: int = 2,
) -> pd.DataFrame:
    """Run ``messages`` with every ack of ``acks_lost_for`` lost, then replay the dead letters ``replays`` times.

    The replay sends each dead letter again with the same ID and its body passed
    through ``repair``. One row per stage: what sits in the dead-letter queue and
    the total charged per message so far.
    """
    database = DuckDBPayments()
    lost = FaultPlan(lost_acks=[LostAck(n, acks_lost_for) for n in range(1, max_deliveries + 1)])
    run = simulate(handler, messages, faults=lost, max_deliveries=max_deliveries, database=database)
    rows = [_stage("the day", run.dead_letters, database, messages)]
    letters = [Message(letter.message.message_id, repair(letter.message.body)) for letter in run.dead_letters]
    for number in range(1, replays + 1):
        simulate(handler, letters, max_deliveries=max_deliveries, database=database)
        rows.append(_stage(f"replay {number} of the fixed dead letters", [], database, messages))
    return pd.DataFrame(rows).set_index("stage")


def _stage(stage: str, letters: list[Any], database: DuckDBPayments, messages: list[Message]) -> dict[str, Any]:
    paid = database.payments().groupby("message_id")["amount"].sum()
    row: dict[str, Any] = {"stage": stage, "dead letters": ", ".join(
        f"{letter.message.label} after {letter.deliveries}: {letter.reason.removeprefix(letter.message.label + ': ')}"
        for letter in letters) or "-"}
    row.update({f"{label} charged ($)": int(paid.get(label, 0)) for label in dict.fromkeys(m.label for m in messages)})
    return row
