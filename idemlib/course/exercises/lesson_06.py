"""Checks for lesson 06, Where to remember IDs."""

from __future__ import annotations

from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, one_of, right
from idemlib.handlers import BusinessRowHandler, InboxHandler
from idemlib.messages import Message
from idemlib.sim import simulate

__all__ = ["CACHE_LOSSES", "check_cache_losses", "check_version_order"]

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


CACHE_LOSSES = ("evicts early", "forgets on restart", "loses the last second on a crash", "none")
"""The ways a cache server can forget a claim before its time to live, as lesson 06's second exercise names them."""

# The server of that exercise: maxmemory 4 GiB, maxmemory-policy volatile-lru, appendonly yes, appendfsync
# everysec, save none; every claim is written with SET ... NX EX, so every claim carries a time to live.
_SERVER_LOSES = frozenset({"evicts early", "loses the last second on a crash"})


@exercise
def check_cache_losses(losses: Any) -> Feedback:
    """Lesson 06: which of :data:`CACHE_LOSSES` apply to the server whose settings the exercise gives."""
    if (missing := blank(losses, 'a set of the names, such as {"none"}')) is not None:
        return missing
    if isinstance(losses, str) or not isinstance(losses, (set, frozenset, list, tuple)):
        return hint(f'Answer with a set of the names, such as {{"forgets on restart"}}, from {list(CACHE_LOSSES)}.')
    named: set[str] = set()
    for loss in losses:
        name = one_of(loss, CACHE_LOSSES, "each name")
        if not isinstance(name, str):
            return name
        named.add(name)
    if not named:
        return hint('An empty set names nothing; if no way of forgetting applies, answer {"none"}.')
    if "none" in named and len(named) > 1:
        return hint('"none" says the server forgets nothing early; it cannot stand beside another name.')
    if "evicts early" not in named:
        return hint("maxmemory is not 0 and the policy is volatile-lru: which keys does a volatile- policy evict, "
                    "and does a claim written with EX carry a time to live? (Section 2, How a cache forgets early.)")
    if "forgets on restart" in named:
        return hint("appendonly is yes: what does the server read back when it starts again? (Section 2, the "
                    "paragraph after the course's server's settings.)")
    if "loses the last second on a crash" not in named:
        return hint("appendfsync everysec writes the append-only file to disk once a second: what becomes of the "
                    "claims written since the last write when the machine fails? (Section 2, after the private Valkey.)")
    assert named == _SERVER_LOSES
    return right("Under its memory limit, volatile-lru evicts claims, all of which carry a time to live; the "
                 "append-only file brings them back after a restart, except those of the last second when the "
                 "machine fails. Two ways to let a duplicate through, so a guard that commits with the work stays.")
