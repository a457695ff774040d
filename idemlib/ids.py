"""Choosing the ID the inbox trusts: the producer's, the broker's, or a hash of the content.

A *fact* is one thing that really happened (a payment was requested); a *copy* is
one message on the queue that carries it. Real systems make extra copies of a fact:

- a **producer retry**: the publisher timed out waiting for the broker's
  confirmation and published again, though the first copy had arrived;
- a **relay republish**: a transactional outbox relay crashed after sending and
  sent the event again when it restarted;
- a **replay** of a dead-lettered message, put back on the queue by an operator;
- a **redelivery**: the broker handed the same stored message out again (lost ack).

And two different facts can have identical bytes: the same $40 charge for the same
order, requested on two different days.

Each copy gets an ID by one of three strategies (or by a function of the copy's
:func:`record`), the copies go through the real inbox consumer on SQLite (DuckDB
gives the same counts, more slowly), and the money says which strategy was right. Lost acks are drawn per copy on the queue, not
per ID, so every strategy meets the very same faults.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from idemlib.faults import FaultPlan
from idemlib.handlers import InboxHandler
from idemlib.messages import Message
from idemlib.sim import simulate
from idemlib.stores import PaymentsDatabase, SQLitePayments

STRATEGIES = ("producer", "broker", "content hash")
SOURCES = ("producer retry", "relay republish", "replay", "redelivery")


@dataclass(frozen=True)
class Copy:
    """One message on the queue: which fact it carries, why it exists, and its body.

    ``request_id`` names the client's payment request (``req-0007`` for fact 7 when
    empty); ``seconds_later`` is how long after the original this copy was sent (its
    source's usual delay when None: a producer retry 2 seconds later, a relay's
    republish 5).
    """

    fact: int
    source: str
    position: int
    body: dict[str, int]
    request_id: str = ""
    seconds_later: float | None = None


def record(copy: Copy) -> dict[str, Any]:
    """What a copy carries besides its ID: the payment, the request it came from, and how it was sent.

    ``request_id`` is created with the fact (the client's payment request), so every
    copy of one fact has the same one; ``attempt`` is the producer's publish attempt
    (2 for its retry); ``sent_at`` is when this copy was sent, in seconds. A replay
    keeps the original's ``sent_at`` but comes back changed by its trip through the
    dead-letter queue: ``x_death`` counts its dead-letterings, as the header RabbitMQ
    adds (an SQS redrive changes the message ID instead).
    """
    usual = {"producer retry": 2.0, "relay republish": 5.0}.get(copy.source, 0.0)
    later = 0.0 if copy.source in ("original", "replay") else usual if copy.seconds_later is None else copy.seconds_later
    return {"request_id": copy.request_id or f"req-{copy.fact:04d}", **copy.body,
            "attempt": 2 if copy.source == "producer retry" else 1, "sent_at": copy.fact * 60.0 + later,
            "x_death": 1 if copy.source == "replay" else 0}


def whole_message_hash(carried: dict[str, Any]) -> str:
    """A digest of everything a copy carries, ``attempt``, ``sent_at`` and ``x_death`` included, as hashing the whole
    message gives.

    The ``content hash`` strategy digests the body alone (order and amount).
    """
    return "sha-" + hashlib.sha256(json.dumps(carried, sort_keys=True).encode()).hexdigest()[:12]


Strategy = str | Callable[[dict[str, Any]], Any]


def assign_id(copy: Copy, strategy: Strategy) -> str:
    """The ID a copy carries under ``strategy``.

    ``producer``: the event ID created with the fact, the same on every copy.
    ``broker``: a new ID for every message the broker accepts (a redelivery keeps it).
    ``content hash``: a digest of the body (order and amount), the same for the same bytes.
    A function is given the copy's :func:`record` and returns the ID.
    """
    if callable(strategy):
        return str(strategy(record(copy)))
    if strategy == "producer":
        return f"evt-{copy.fact:04d}"
    if strategy == "broker":
        return f"brk-{copy.position:05d}"
    if strategy == "content hash":
        return "sha-" + hashlib.sha256(json.dumps(copy.body, sort_keys=True).encode()).hexdigest()[:12]
    raise ValueError(f"no ID strategy {strategy!r}; choose one of {STRATEGIES}")


def make_copies(facts: list[dict[str, int]], duplicated: dict[str, float], *, seed: int = 5) -> list[Copy]:
    """The copies on the queue: one per fact, plus extra ones at the given share per source.

    ``duplicated`` maps a source (producer retry, relay republish, replay) to the
    share of facts that get an extra copy from it. Redelivery is not a copy: the
    broker hands out the same message again, so it is a fault of the run instead.
    """
    draw = random.Random(seed)
    copies: list[Copy] = []
    for number, body in enumerate(facts):
        copies.append(Copy(number, "original", len(copies), body))
        for source, share in duplicated.items():
            if draw.random() < share:
                copies.append(Copy(number, source, len(copies), body))
    return copies


def judge(strategy: Strategy, copies: list[Copy], facts: list[dict[str, int]], *, ack_loss_rate: float = 0.0,
          database: Callable[[], PaymentsDatabase] = SQLitePayments) -> dict[str, int]:
    """Run the copies through the inbox consumer with IDs by ``strategy`` on a new ``database()`` and count what happened.

    ``duplicates caught``: extra deliveries of a fact that were skipped.
    ``duplicates missed``: charges beyond one per fact.
    ``real messages dropped``: facts never charged because their ID collided with another fact's.
    """
    messages = [Message(assign_id(copy, strategy), dict(copy.body)) for copy in copies]
    result = simulate(InboxHandler(), messages, faults=FaultPlan(ack_loss_rate=ack_loss_rate, seed=11, per_copy=True),
                      max_deliveries=20, database=database())
    owed = pd.Series([json.dumps(body, sort_keys=True) for body in facts]).value_counts()
    paid = result.payments.apply(lambda row: json.dumps({"amount": int(row["amount"]), "order_id": int(row["order_id"])},
                                                        sort_keys=True), axis=1).value_counts()
    paid = paid.reindex(owed.index, fill_value=0)
    missed = int((paid - owed).clip(lower=0).sum())
    dropped = int((owed - paid).clip(lower=0).sum())
    skipped = len(result.events("duplicate skipped"))
    return {"deliveries": len(result.events("delivered")), "duplicates caught": skipped - dropped,
            "duplicates missed": missed, "real messages dropped": dropped}


def twin_facts(count: int, *, twins: int, seed: int = 5) -> list[dict[str, int]]:
    """``count`` payment facts, ``twins`` of which repeat an earlier fact's order and amount (a second, real payment)."""
    draw = random.Random(seed)
    facts = [{"order_id": 5000 + n, "amount": 5 * draw.randint(1, 20)} for n in range(count - twins)]
    facts += [dict(facts[draw.randrange(len(facts))]) for _ in range(twins)]
    return facts


def compare_strategies(facts: list[dict[str, int]], *, share: float = 0.2, ack_loss_rate: float = 0.2) -> pd.DataFrame:
    """One row per (strategy, source of duplicates): caught, missed, dropped. Plus every source at once."""
    rows = []
    for source in (*SOURCES, "all at once"):
        if source == "redelivery":
            copies, loss = make_copies(facts, {}), ack_loss_rate
        elif source == "all at once":
            copies, loss = make_copies(facts, {s: share for s in SOURCES if s != "redelivery"}), ack_loss_rate
        else:  # each source its own draw, so the three do not pick the very same facts
            copies, loss = make_copies(facts, {source: share}, seed=SOURCES.index(source) + 5), 0.0
        for strategy in STRATEGIES:
            rows.append({"source of duplicates": source, "strategy": strategy,
                         **judge(strategy, copies, facts, ack_loss_rate=loss)})
    return pd.DataFrame(rows)
