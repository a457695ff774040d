"""Checks for lesson 06, Where to remember IDs."""

from __future__ import annotations

from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.handlers import BusinessRowHandler, InboxHandler
from idemlib.messages import Message
from idemlib.sim import simulate

__all__ = ["check_version_order"]

VERSIONED = {"m-1": Message("m-1", {"order_id": 1042, "amount": 40, "version": 1}),
             "m-2": Message("m-2", {"order_id": 1042, "amount": 5, "version": 2})}


def charges_by_row(order: list[str]) -> dict[str, int]:
    """Dollars charged when ``order`` (message IDs) is delivered to each business row and to the inbox (what is owed)."""
    messages = [VERSIONED[message_id] for message_id in order]
    return {handler.name: simulate(handler, messages).total_charged
            for handler in (BusinessRowHandler(), BusinessRowHandler(by="version"), InboxHandler())}


@exercise
def check_version_order(order: Any) -> Feedback:
    """Lesson 06: deliveries of m-1 (version 1) and m-2 (version 2) for which the last-ID row charges too much
    and the versioned row too little, both at once."""
    if (missing := blank(order, 'a list of message IDs such as ["m-1", "m-2", "m-1"]')) is not None:
        return missing
    if isinstance(order, str) or not isinstance(order, (list, tuple)) or not order:
        return hint('Answer with a list of message IDs, in the order they are delivered, such as ["m-1", "m-2"].')
    ids = [item.strip() if isinstance(item, str) else item for item in order]
    unknown = [item for item in ids if not isinstance(item, str) or item not in VERSIONED]
    if unknown:
        return hint(f"Only m-1 (version 1, $40) and m-2 (version 2, $5) take part; {unknown!r} is neither.")
    charged = charges_by_row(ids)
    last_id, versioned, owed = charged["business row"], charged["business row, version"], charged["inbox"]
    if versioned >= owed:
        return hint(f"In that order the versioned row charged what was owed (${owed}): every message it refused had "
                    "been applied already. When would it refuse a message it has never applied?")
    if last_id <= owed:
        return hint(f"The versioned row charged ${versioned} of the ${owed} owed, as asked, but the last-ID row charged "
                    f"${last_id}, not more than owed. It remembers one ID only: which copy does it take for new? "
                    "(Section 4 shows one.)")
    return right(f"In that order the last-ID row charged ${last_id} and the versioned row ${versioned}, where ${owed} "
                 "was owed: one row forgets what it applied before its last message, the other refuses what it never "
                 "applied because something newer came first.")
