"""A run's trace replayed into scenes: the whole state of the world after each event.

A scene is what a step-through frame shows: every message on the broker and its
state, each consumer with its steps, the rows in the payments database (written,
committed or rolled back), the provider's stored idempotency keys, the ack on its
way back, and the total charged against what is owed. Everything is derived from
the trace (and, when the run is given, its messages and its provider), so any run
the course makes can be drawn, including events this module draws no picture for
(another topic's, such as a claim lost): those keep their own words. An event that
is not in the course's vocabulary (:class:`~idemlib.trace.Event`: a misspelt name)
is refused, never drawn as a status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from idemlib.messages import Message
from idemlib.provider import PaymentProvider
from idemlib.trace import Event

STEP_WORDS = {
    "begin": "opens a transaction",
    "record id": "inserts the message ID into processed_messages",
    "check id": "looks the message ID up in processed_messages",
    "charge": "inserts the charge into payments",
    "commit": "commits",
    "call provider": "calls the payment provider",
}
STEP_DONE = {Event.STEP, Event.CHARGED, Event.COMMITTED}
"""Events that mark the end of a consumer's step; the step's name is in ``detail``."""
ROLLBACKS = {Event.ROLLED_BACK, Event.CONFLICT, Event.REJECTED, Event.PROVIDER_FAILED, Event.RESPONSE_LOST, Event.FAILED}
"""Events after which the consumer's open transaction is gone, its writes undone."""
UNWRITTEN_STEPS = {"begin", "commit", "ack"}
"""Steps a duplicate still does; every other step left after ``duplicate skipped`` is skipped."""


def describe(row: pd.Series) -> str:
    """One trace event as a sentence in the course's vocabulary."""
    who, mid, n, detail = row["actor"], row["message_id"], row["delivery"], row["detail"]
    sentences = {
        Event.PUBLISHED: f"{mid} is published and waits on the queue.",
        Event.DELIVERED: f"The broker delivers {mid} to {who} (delivery {n}{', a redelivery' if n > 1 else ''})"
                         " and starts its lease.",
        Event.STEP: f"{who} {STEP_WORDS.get(detail, detail)}.",
        Event.CHARGED: f"{who} {STEP_WORDS['charge']}.",
        Event.COMMITTED: f"{who} commits: what it wrote is now permanent.",
        Event.ACKED: f"{who}'s ack reaches the broker, which removes {mid} for good.",
        Event.ACK_LOST: f"{who} sends the ack for {mid}, but it is lost on the way. The broker still holds the message.",
        Event.LEASE_EXPIRED: f"The lease on {mid} runs out with no ack, so the broker will deliver it again.",
        Event.CRASHED: f"{who} crashes {detail}. No ack is sent.",
        Event.ROLLED_BACK: f"The database rolls back {who}'s open transaction.",
        Event.DUPLICATE_SKIPPED: f"{who} finds {mid} already in processed_messages: a duplicate, so it skips the charge.",
        Event.CONFLICT: f"{who}'s write loses a race: {detail}",
        Event.REJECTED: f"{who} cannot handle {mid}: {detail}",
        Event.DEAD_LETTERED: f"The broker moves {mid} to the dead-letter queue after {n} deliveries.",
        Event.PROVIDER_ANSWERED: f"The payment provider answers {who}'s call for {mid}: {detail}.",
        Event.PROVIDER_FAILED: f"{who}'s call to the provider fails: {detail}",
        Event.RESPONSE_LOST: f"{who} gets no answer from the provider for {mid}, so it gives the message back.",
        Event.FAILED: f"{who}'s step fails: {detail}",
    }
    return sentences.get(row["event"], f"{who}: {row['event']} {detail}".strip())


@dataclass(frozen=True)
class QueueEntry:
    """One stored message on the broker: ``waiting``, ``leased``, ``acked`` or ``dead-lettered``."""

    message_id: str
    state: str = "waiting"
    holder: str | None = None
    lease_left: float | None = None
    deliveries: int = 0
    leased_at: float | None = None


@dataclass(frozen=True)
class Step:
    """One step of a consumer's handler: ``todo``, ``done``, ``skipped``, ``crashed`` or ``failed``."""

    name: str
    state: str = "todo"


@dataclass(frozen=True)
class ConsumerView:
    """A consumer, the delivery in its hands, its steps and the one it is on."""

    name: str
    message_id: str | None = None
    delivery: int = 0
    steps: tuple[Step, ...] = ()
    current: str | None = None
    status: str = "idle"


@dataclass(frozen=True)
class Row:
    """A row a consumer wrote: ``pending`` inside its open transaction, ``committed``, or ``undone``."""

    table: str
    message_id: str
    writer: str
    order_id: int | None = None
    amount: int | None = None
    state: str = "pending"
    new: bool = True


@dataclass(frozen=True)
class StoredKey:
    """An idempotency key the provider keeps, with the charge its first result made."""

    key: str
    charge_id: str
    message_id: str
    used: str = "stored"
    """``new`` when this event stored it, ``replayed`` when it answered a retry, else ``stored``."""


@dataclass(frozen=True)
class Scene:
    """The state of the world right after one event of the trace."""

    number: int
    time: float
    event: str
    actor: str
    message_id: str
    sentence: str
    queue: tuple[QueueEntry, ...]
    consumers: tuple[ConsumerView, ...]
    rows: tuple[Row, ...]
    total: int
    owed: int | None
    provider_keys: tuple[StoredKey, ...] | None = None
    provider_charges: int = 0
    card_charged: int = 0
    """Dollars the provider's charges took from the card, committed locally or not."""
    ack: str | None = None
    """``acked`` or ``ack lost`` when this event is an ack on its way from ``actor`` to the broker."""
    count: int = 1
    """How many events the run has, so a scene knows whether it is the last one."""

    @property
    def last(self) -> bool:
        return self.number == self.count - 1


def amounts_of(trace: pd.DataFrame, messages: Sequence[Message] | None) -> dict[str, tuple[int | None, int | None]]:
    """(order, amount) for each message ID: from the messages when given, else from how each commit moved the total."""
    found: dict[str, tuple[int | None, int | None]] = {}
    for message in messages or ():
        body = message.body if isinstance(message.body, dict) else {}
        order, amount = body.get("order_id"), body.get("amount")
        found.setdefault(message.label, (order if isinstance(order, int) else None,
                                         amount if isinstance(amount, int) else None))
    totals = trace["total charged"].fillna(0).astype(int).tolist()
    for index, (mid, event) in enumerate(zip(trace["message_id"], trace["event"])):
        moved = totals[index] - (totals[index - 1] if index else 0)
        if mid not in found and moved > 0 and event in STEP_DONE:
            found[mid] = (None, moved)
    return found


def steps_of(trace: pd.DataFrame) -> tuple[str, ...]:
    """The handler's steps in order, as the trace shows them across all deliveries (ack included)."""
    order: list[str] = []
    for _, delivery in trace[trace["delivery"] > 0].groupby(["actor", "message_id", "delivery"], sort=False):
        previous: str | None = None
        for event, detail in zip(delivery["event"], delivery["detail"]):
            name = (detail if event in STEP_DONE else "ack" if event in (Event.ACKED, Event.ACK_LOST)
                    else detail.removeprefix("before ") if event == Event.CRASHED else None)
            if not name:
                continue
            if name not in order:
                order.insert(order.index(previous) + 1 if previous in order else len(order), name)
            previous = name
    return tuple(order)


@dataclass
class _World:
    steps: tuple[str, ...]
    amounts: dict[str, tuple[int | None, int | None]]
    lease_seconds: float | None
    queue: list[QueueEntry] = field(default_factory=list)
    consumers: dict[str, ConsumerView] = field(default_factory=dict)
    open_tx: set[str] = field(default_factory=set)
    skipping: set[str] = field(default_factory=set)
    rows: list[Row] = field(default_factory=list)
    keys: list[StoredKey] = field(default_factory=list)
    charges_made: int = 0
    card_charged: int = 0

    def entry(self, mid: str, *states: str, holder: str | None = None) -> int | None:
        for index, entry in enumerate(self.queue):
            if entry.message_id == mid and entry.state in states and holder in (None, entry.holder):
                return index
        return None

    def set_step(self, who: str, name: str, state: str) -> None:
        consumer = self.consumers.get(who) or ConsumerView(who, steps=tuple(Step(s) for s in self.steps))
        steps = tuple(replace(s, state=state) if s.name == name else s for s in consumer.steps)
        if name not in {s.name for s in steps}:
            steps = (*steps, Step(name, state))
        self.consumers[who] = replace(consumer, steps=steps, current=name)

    def next_step(self, who: str) -> str | None:
        consumer = self.consumers.get(who)
        waiting = [s.name for s in consumer.steps if s.state == "todo"] if consumer else []
        return waiting[0] if waiting else None

    def write(self, table: str, who: str, mid: str) -> None:
        order, amount = self.amounts.get(mid, (None, None))
        state = "pending" if who in self.open_tx else "committed"
        self.rows.append(Row(table, mid, who, order, amount if table == "payments" else None, state))

    def end_transaction(self, who: str, state: str) -> None:
        self.open_tx.discard(who)
        self.rows = [replace(r, state=state, new=True) if r.writer == who and r.state == "pending" else r
                     for r in self.rows]


def scenes_of(
    trace: pd.DataFrame,
    messages: Sequence[Message] | None = None,
    provider: PaymentProvider | None = None,
    *,
    steps: Sequence[str] | None = None,
    lease_seconds: float | None = None,
) -> list[Scene]:
    """Replay ``trace`` into one scene per event. The trace must come from ``simulate(..., watch_total=True)``.

    ``messages`` give each payment row its order and amount and say what is owed;
    without them both are read from how each commit moved the total. ``provider``
    (the run's own) names the idempotency keys it stored. ``lease_seconds`` is the
    broker's visibility timeout; without it, it is what the broker noted on the trace,
    or else how long the first lease that ran out lasted.
    """
    if trace.empty:
        raise ValueError("this trace has no events: simulate at least one message before stepping through it")
    if trace["total charged"].isna().any():
        raise ValueError("this trace has no running total; run the simulation with watch_total=True")
    amounts = amounts_of(trace, messages)
    lease_seconds = lease_seconds or trace.attrs.get("lease seconds") or _lease_seconds(trace)
    world = _World(tuple(steps) if steps else steps_of(trace), amounts, lease_seconds)
    key_of_charge = {charge: key for key, charge in (provider.stored_keys() if provider else {}).items() if charge}
    charge_ids = [c["id"] for c in provider.charges] if provider is not None else []
    owed_ids = list(dict.fromkeys(m.label for m in messages)) if messages else []
    scenes = []
    unknown = sorted(set(trace["event"]) - set(Event))
    if unknown:
        raise ValueError(f"no trace event {unknown[0]!r}; the events are {[str(e) for e in Event]}")
    for number, (_, row) in enumerate(trace.iterrows()):
        who, mid, event, detail, n = row["actor"], row["message_id"], row["event"], str(row["detail"]), int(row["delivery"])
        # Undone rows show for one frame, or two when the simulator also records the rollback itself.
        world.rows = [replace(r, new=False) for r in world.rows
                      if r.state != "undone" or (event == Event.ROLLED_BACK and r.writer == who)]
        world.keys = [replace(k, used="stored") for k in world.keys]
        _apply(world, row, who, mid, event, detail, n, key_of_charge, charge_ids)
        _reconcile(world, int(row["total charged"]), who, mid)
        if not messages and event == Event.PUBLISHED and mid not in owed_ids:
            owed_ids.append(mid)
        # A message with no valid amount owes nothing; one whose amount was never seen leaves the sum unknown.
        owed = [amounts.get(m, (None, None))[1] or (0 if messages else None) for m in owed_ids]
        scenes.append(Scene(
            number, float(row["time"]), event, who, mid, describe(row),
            tuple(_with_lease_left(e, world, float(row["time"])) for e in world.queue),
            tuple(world.consumers.values()), tuple(world.rows), int(row["total charged"]),
            None if None in owed else sum(a for a in owed if a is not None),
            tuple(world.keys) if provider is not None or Event.PROVIDER_ANSWERED in set(trace["event"]) else None,
            world.charges_made, world.card_charged, event if event in (Event.ACKED, Event.ACK_LOST) else None, len(trace),
        ))
    return scenes


def _reconcile(world: _World, total: int, who: str, mid: str) -> None:
    """Add the payment a handler committed under a step this module has no name for (the total says it happened).

    The rows are read from step names (``charge``, ``record id``); a handler with
    other steps still moves the committed total, and that move is drawn as the row it is.
    """
    committed = [r.amount for r in world.rows if r.table == "payments" and r.state == "committed"]
    known = [amount for amount in committed if amount is not None]
    if len(known) < len(committed) or total <= sum(known):
        return
    world.rows.append(Row("payments", mid, who, world.amounts.get(mid, (None, None))[0], total - sum(known), "committed"))


def _lease_seconds(trace: pd.DataFrame) -> float | None:
    delivered: dict[str, float] = {}
    for time, event, mid in zip(trace["time"], trace["event"], trace["message_id"]):
        if event == Event.DELIVERED:
            delivered[mid] = time
        elif event == Event.LEASE_EXPIRED and mid in delivered:
            return float(time - delivered[mid])
    return None


def _with_lease_left(entry: QueueEntry, world: _World, now: float) -> QueueEntry:
    if entry.state != "leased" or world.lease_seconds is None or entry.leased_at is None:
        return entry
    return replace(entry, lease_left=max(0.0, entry.leased_at + world.lease_seconds - now))


def _apply(world: _World, row: pd.Series, who: str, mid: str, event: str, detail: str, n: int,
           key_of_charge: dict[str, str], charge_ids: list[str]) -> None:
    """Move the world on by one event."""
    if event == Event.PUBLISHED:
        world.queue.append(QueueEntry(mid))
    elif event == Event.DELIVERED:
        index = world.entry(mid, "waiting")
        if index is not None:
            world.queue[index] = QueueEntry(mid, "leased", who, deliveries=n, leased_at=float(row["time"]))
        world.consumers[who] = ConsumerView(who, mid, n, tuple(Step(s) for s in world.steps), status="working")
        world.skipping.discard(who)
    elif event == Event.LEASE_EXPIRED:
        index = world.entry(mid, "leased")
        if index is not None:
            world.queue[index] = replace(world.queue[index], state="waiting", holder=None)
        for name, consumer in world.consumers.items():  # a slow consumer works on, not knowing
            if consumer.message_id == mid and consumer.delivery == n and consumer.status == "working":
                world.consumers[name] = replace(consumer, status="working on; its lease ran out")
    elif event == Event.ACKED:
        index = world.entry(mid, "leased", holder=who)
        index = world.entry(mid, "leased", "waiting") if index is None else index
        if index is not None:
            world.queue[index] = replace(world.queue[index], state="acked", holder=None)
        world.set_step(who, "ack", "done")
        world.consumers[who] = replace(world.consumers[who], status="acked after its work")
    elif event == Event.ACK_LOST:
        world.set_step(who, "ack", "done")
        world.consumers[who] = replace(world.consumers[who], status="its ack was lost")
    elif event == Event.DEAD_LETTERED:
        index = world.entry(mid, "waiting", "leased")
        if index is not None:
            world.queue[index] = replace(world.queue[index], state="dead-lettered", holder=None, deliveries=n)
    elif event in STEP_DONE:
        world.set_step(who, detail, "done")
        if detail == "begin":
            world.open_tx.add(who)
        elif who not in world.skipping and detail in ("record id", "charge"):
            world.write("processed_messages" if detail == "record id" else "payments", who, mid)
        if detail == "commit":
            world.end_transaction(who, "committed")
    elif event == Event.DUPLICATE_SKIPPED:
        world.skipping.add(who)
        skipper = world.consumers.get(who)
        if skipper:
            # The duplicate shows during the step in progress (the first not yet done); the writes after it are skipped.
            doing = world.next_step(who)
            world.consumers[who] = replace(skipper, status="duplicate: skips the work", current=doing, steps=tuple(
                replace(s, state="skipped") if s.state == "todo" and s.name not in UNWRITTEN_STEPS and s.name != doing
                else s for s in skipper.steps))
    elif event == Event.CRASHED:
        world.set_step(who, detail.removeprefix("before "), "crashed")
        # The process is dead; its open transaction is undone by the "rolled back" that follows.
        world.consumers[who] = replace(world.consumers[who], status="crashed: restarting")
    elif event in ROLLBACKS:
        failing = world.next_step(who)
        if failing and event != Event.ROLLED_BACK:
            world.set_step(who, failing, "failed")
        if who in world.consumers and event != Event.ROLLED_BACK:
            world.consumers[who] = replace(world.consumers[who], status=f"{event}: gives the message back")
        world.end_transaction(who, "undone")
        index = world.entry(mid, "leased", holder=who)
        if index is not None and event != Event.ROLLED_BACK:  # a failed consumer releases its lease at once
            world.queue[index] = replace(world.queue[index], state="waiting", holder=None)
    elif event == Event.PROVIDER_ANSWERED:
        # The answer arrives inside the call step, which ends with its own "step" event (or fails).
        if who in world.consumers:
            world.consumers[who] = replace(world.consumers[who], current="call provider")
        if detail.startswith("2") and "replayed" not in detail:
            charge = charge_ids[world.charges_made] if world.charges_made < len(charge_ids) else None
            world.charges_made += 1
            world.card_charged += world.amounts.get(mid, (None, None))[1] or 0
            key = key_of_charge.get(charge) if charge else None
            if key is not None and charge is not None:
                world.keys.append(StoredKey(key, charge, mid, "new"))
        elif "replayed" in detail:
            world.keys = [replace(k, used="replayed") if k.message_id == mid else k for k in world.keys]
    elif who in world.consumers:
        world.consumers[who] = replace(world.consumers[who], status=event)
