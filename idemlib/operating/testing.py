"""Deliver every message twice: a helper for your own test suite.

The seeds' advice for testing an idempotent consumer is blunt: deliver every
message twice in integration tests. :func:`assert_idempotent` does that, and a
little more. It runs a stream once, cleanly, to learn what one delivery of each
message does (which payments it commits), then runs the same stream again
under each duplicate-making scenario:

- every message published twice, each copy right after the other;
- the same doubled stream, shuffled (seeded), so a copy may come first;
- every message's first ack lost, so the broker redelivers it;
- a crash before each step of the handler, on every message's first delivery.

Whatever the scenario, each message must end with the effect of one delivery:
the same number of charges and the same dollars. If one does not, it raises
:class:`NotIdempotent`, an ``AssertionError`` whose text names the scenario, the
message, what it did and what one delivery does. In a pytest suite::

    from idemlib.operating.testing import assert_idempotent

    def test_my_consumer_survives_duplicates():
        assert_idempotent(MyHandler(), my_messages)

Your consumer takes part by being a :class:`~idemlib.handlers.Handler`: name its
steps and ``yield`` each name just before doing it, so a crash can land there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pandas as pd

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import Handler
from idemlib.messages import Message
from idemlib.sim import simulate
from idemlib.stores import DuckDBPayments, PaymentsDatabase

Effect = tuple[int, int]
"""What a run did for one message: (charges committed, dollars charged)."""


class NotIdempotent(AssertionError):
    """A duplicate changed what a message did: the text names the scenario, the message and the effect."""


def scenarios(handler: Handler, messages: Sequence[Message], *, seed: int = 0) -> dict[str, tuple[list[Message], FaultPlan]]:
    """The duplicate-making runs :func:`assert_idempotent` tries, by name: (messages to publish, faults)."""
    twice = [copy for message in messages for copy in (message, message)]
    shuffled = random.Random(seed).sample(twice, len(twice))
    runs = {
        "every message delivered twice, in order": (twice, FaultPlan()),
        f"every message delivered twice, shuffled (seed {seed})": (shuffled, FaultPlan()),
        "every first ack lost": (list(messages), FaultPlan(lost_acks=[LostAck()])),
    }
    for step in handler.steps:
        runs[f"crash before {step} on every first delivery"] = (list(messages), FaultPlan(crashes=[Crash(step)]))
    return runs


def effects(payments: pd.DataFrame, messages: Sequence[Message]) -> dict[str, Effect]:
    """For each message ID: how many charges its deliveries committed, and how many dollars."""
    grouped = payments.groupby("message_id")["amount"].agg(["count", "sum"])
    return {message.label: (int(grouped.at[message.label, "count"]), int(grouped.at[message.label, "sum"]))
            if message.label in grouped.index else (0, 0) for message in messages}


def _describe(message: Message, got: Effect, once: Effect) -> str:
    body = message.body if isinstance(message.body, dict) else {}
    what = f"charge order {body.get('order_id')} ${body.get('amount')}" if body else "its payload"
    return f"{message.label} ({what}): charged {_times(got)}; one delivery charges {_times(once)}"


def _times(effect: Effect) -> str:
    return f"{effect[0]} time{'' if effect[0] == 1 else 's'}, ${effect[1]}"


def idempotency_report(
    handler: Handler,
    messages: Sequence[Message],
    *,
    database: Callable[[], PaymentsDatabase] = DuckDBPayments,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per scenario: how many messages ended with a different effect than one delivery's, and the first.

    ``database`` makes a fresh database for each run (DuckDB in memory by default;
    pass ``SQLitePayments`` or ``PostgresPayments`` to test on another engine).
    """
    messages = list(messages)
    if not messages:
        raise ValueError("give assert_idempotent at least one message: with none, every handler passes")
    distinct = list({message.label: message for message in messages}.values())
    once = effects(simulate(handler, distinct, database=database()).payments, distinct)
    if not any(charges for charges, _ in once.values()):
        # Every scenario would compare nothing with nothing and pass: a test that cannot fail.
        raise ValueError(f"one clean delivery of these messages through {handler.name or handler!r} committed no "
                         "payment, so a duplicate's effect cannot be seen: give messages the handler charges "
                         "(Message.charge(...)), and make it write through ctx.db.charge(...) and commit")
    rows = []
    for name, (published, plan) in scenarios(handler, distinct, seed=seed).items():
        got = effects(simulate(handler, published, faults=plan, database=database(), max_deliveries=10).payments,
                      distinct)
        wrong = [_describe(message, got[message.label], once[message.label])
                 for message in distinct if got[message.label] != once[message.label]]
        rows.append((name, len(distinct), len(wrong), wrong[0] if wrong else ""))
    return pd.DataFrame(rows, columns=["scenario", "messages", "changed by the duplicate", "first one changed"])


def assert_idempotent(
    handler: Handler,
    messages: Sequence[Message],
    *,
    database: Callable[[], PaymentsDatabase] = DuckDBPayments,
    seed: int = 0,
) -> pd.DataFrame:
    """Deliver every message twice (in order, shuffled, after a lost ack, after a crash at each step).

    Passes, returning the report of :func:`idempotency_report`, when every message
    ends with the effect of one delivery in every scenario. Otherwise raises
    :class:`NotIdempotent` naming each failing scenario and its first message.
    """
    __tracebackhide__ = True  # pytest shows the reader's test line and the message, not this helper's insides
    report = idempotency_report(handler, messages, database=database, seed=seed)
    failed = report[report["changed by the duplicate"] > 0]
    if not failed.empty:
        lines = [f"- {row['scenario']}: {row['changed by the duplicate']} of {row['messages']} messages changed, "
                 f"e.g. {row['first one changed']}" for _, row in failed.iterrows()]
        raise NotIdempotent(f"handler {handler.name!r} is not idempotent in {len(failed)} of {len(report)} "
                            "scenarios:\n" + "\n".join(lines))
    return report
