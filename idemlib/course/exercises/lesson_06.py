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


MOST_DELIVERIES = 20
"""The longest order :func:`check_version_order` plays: each delivery runs through DuckDB three times."""


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
    if hasattr(order, "tolist") and not isinstance(order, (str, bytes)):
        order = order.tolist()  # a NumPy array of the IDs, in order
    if isinstance(order, str) or not isinstance(order, (list, tuple)) or not order:
        return hint('Answer with a list of message IDs, in the order they are delivered, such as ["m-1", "m-2"].')
    if len(order) > MOST_DELIVERIES:
        return hint(f"That is {len(order)} deliveries; answer with at most {MOST_DELIVERIES} (each one runs through "
                    "both rows and the inbox in DuckDB, and a short order shows it).")
    if any(isinstance(item, Message) for item in order):
        return hint('Answer with the messages\' IDs, not the Message objects: m2.message_id is "m-2".')
    ids = [item.strip() if isinstance(item, str) else item for item in order]
    unknown = [item for item in ids if not isinstance(item, str) or item not in VERSIONED]
    if unknown:
        # ascii() shows a look-alike dash or space as its code point, where repr() would print "m‐2" as if it were m-2
        return hint(f"Only the message IDs m-1 (version 1, $40) and m-2 (version 2, $5) take part, as strings; "
                    f"{ascii(unknown[0])} is neither.")
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


CACHE_LOSSES = ("evicts early", "forgets every claim on a restart", "loses the last second if the machine fails",
                "loses recent claims on a failover", "none")
"""The ways a cache server can forget a claim while a duplicate may still come, as lesson 06's second exercise names them."""

CACHE_SERVERS = ("payments", "loyalty")
"""The two servers of lesson 06's second exercise."""

# What each server of that exercise loses, and why (rows of data/facts.csv):
# payments: maxmemory 0 sets no limit, so allkeys-lru never runs (valkey_maxmemory_zero_no_limit); the container's
#   out-of-memory kill is a restart that reads the append-only file back from the persistent volume, losing at most a
#   single write (valkey_aof_process_failure); without the volume the restarted container starts clean and forgets every
#   claim (kubernetes_container_restart_clean_state), which is why the table names it; with everysec the machine
#   failing loses about the last second (redis_aof_everysec_loss).
# loyalty: claims written without EX carry no time to live, which volatile-ttl never evicts (valkey_volatile_ttl,
#   valkey_volatile_like_noeviction); appendfsync always keeps every write (valkey_appendfsync_always); a replica that
#   Sentinel promotes lacks the writes not yet replicated (redis_replication_async).
_SERVERS_LOSE = {"payments": frozenset({"loses the last second if the machine fails"}),
                 "loyalty": frozenset({"loses recent claims on a failover"})}

_TOO_MANY = {
    ("payments", "evicts early"): "payments has maxmemory 0: under what limit would allkeys-lru evict? (Section 2, How a "
                                  "cache forgets early: what the course's own server's maxmemory of 0 means.)",
    ("payments", "forgets every claim on a restart"): "The container's memory limit kills payments when it outgrows it: a "
        "restart. With appendonly yes, and its data directory on a persistent volume that outlives the container, what "
        "does the server read when it starts again? (Section 2, after the private Valkey.)",
    ("payments", "loses recent claims on a failover"): "payments runs alone: which replica would take over?",
    ("loyalty", "evicts early"): "loyalty writes its claims without EX: which keys may a volatile- policy evict, and what "
                                 "does it do when none of them is left? (Section 2, How a cache forgets early.)",
    ("loyalty", "forgets every claim on a restart"): "loyalty has appendonly yes: what does the server read when it starts "
                                                     "again? (Section 2, after the private Valkey.)",
    ("loyalty", "loses the last second if the machine fails"): "loyalty fsyncs after every write (appendfsync always), so "
        "its file holds the last second. When its machine fails, though, who answers the next claim, and what has that "
        "server received? (Section 2, after the private Valkey.)",
}
_TOO_FEW = {
    ("payments", "loses the last second if the machine fails"): "payments syncs its append-only file once a second "
        "(everysec): what becomes of the claims written since the last sync if the machine fails? (Section 2, after "
        "the private Valkey.)",
    ("loyalty", "loses recent claims on a failover"): "When loyalty's primary fails, Sentinel promotes its replica: does "
        "a replica hold every claim the primary had answered? (Section 2, How a cache forgets early, and after the "
        "private Valkey.)",
}


def _named_losses(server: str, losses: Any) -> frozenset[str] | Feedback:
    """``losses`` as a set of :data:`CACHE_LOSSES` names, or the hint that says what is off."""
    if hasattr(losses, "tolist") and not isinstance(losses, (str, bytes)):
        losses = losses.tolist()  # a NumPy array of the names
    if isinstance(losses, str) or not isinstance(losses, (set, frozenset, list, tuple)):
        return hint(f'Give each server a set of the names, such as {{"none"}}; the one for {server} is {losses!r}.')
    named: set[str] = set()
    for loss in losses:
        name = one_of(loss, CACHE_LOSSES, f"each name in the set for {server}")
        if not isinstance(name, str):
            return name
        named.add(name)
    if not named:
        return hint(f'The set for {server} is empty; if no way of forgetting applies to it, give it {{"none"}}.')
    if "none" in named and len(named) > 1:
        return hint(f'"none" says {server} forgets nothing early; it cannot stand beside another name.')
    return frozenset(named - {"none"})


@exercise
def check_cache_losses(losses: Any) -> Feedback:
    """Lesson 06: which of :data:`CACHE_LOSSES` apply to each server of :data:`CACHE_SERVERS`, whose settings the
    exercise gives."""
    if (missing := blank(losses, 'a dict such as {"payments": {"none"}, "loyalty": {"none"}}')) is not None:
        return missing
    keys = {" ".join(key.split()).casefold(): value for key, value in losses.items()
            if isinstance(key, str)} if isinstance(losses, dict) else None
    if keys is None or set(keys) != set(CACHE_SERVERS) or len(keys) != len(losses):
        return hint(f"Answer with a dict whose keys are exactly {list(CACHE_SERVERS)}, each mapped to a set of the names "
                    f"from {list(CACHE_LOSSES)}.")
    for server in CACHE_SERVERS:
        named = _named_losses(server, keys[server])
        if isinstance(named, Feedback):
            return named
        if extra := sorted(named - _SERVERS_LOSE[server]):
            return hint(_TOO_MANY[(server, extra[0])])
        if lacking := sorted(_SERVERS_LOSE[server] - named):
            return hint(_TOO_FEW[(server, lacking[0])])
    return right("payments never evicts (maxmemory 0 sets no limit, whatever the policy), and the out-of-memory kill its "
                 "container deals is a restart that reads the append-only file back from its volume, all but at most the "
                 "single write in flight; only a machine failure costs it the last second. loyalty never evicts a claim "
                 "(they carry no time to live) and keeps every write on disk, but its replica, promoted by Sentinel, lacks "
                 "what had not reached it yet. Each lets duplicates through, so a guard that commits with the work stays.")
