"""Long work: the idempotency record with states, a deadline and an expiry (lesson 09).

When the work is long, or includes a call no transaction covers, the consumer
records a status instead of a bare ID. It commits the ID as *in progress* with a
deadline, does the work, then marks the record *completed* with the result kept.
A second delivery that finds *in progress* backs off (it does not ack, so the
broker redelivers after a lease); one that finds the deadline passed takes over;
one that finds *completed* gets the stored result. A record is forgotten once it
expires, and a delivery after that is new work again.

The lease (how long the broker waits for an ack) and the deadline (how long a
claim is honoured) are separate numbers. A live consumer keeps its lease by sizing
it to outlast the work or by extending it while it works; the deadline is the
safety net for a consumer that died holding a claim (see :mod:`idemlib.long_work.sizing`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, ProviderError, Steps
from idemlib.messages import Message
from idemlib.provider import PaymentProvider
from idemlib.sim import RunResult, outcome_of, simulate
from idemlib.stores import DuckDBPayments, PaymentsSession, PostgresPayments, SqlPayments
from idemlib.trace import Event

IN_PROGRESS, COMPLETED = "in progress", "completed"
BACKED_OFF, TAKEN_OVER, CLAIM_LOST = str(Event.BACKED_OFF), str(Event.TAKEN_OVER), str(Event.CLAIM_LOST)
WAITED, STUCK, ROW_TWICE = "once, after a wait", "stuck, dead-lettered", "local row twice"
"""This lesson's outcomes beside charged once, twice and lost: charged once, but only after deliveries were
refused as in progress; dead-lettered while the record still says in progress (nothing more happens until a
person replays it, and a replay after the record expires runs the work again); the card charged once but the
consumer's own payment row written twice."""
LEASE_SECONDS = 30.0
"""The broker's lease in this lesson's runs (the simulator's default visibility timeout)."""
MAX_DELIVERIES = 5
"""Deliveries after which the broker in this lesson's runs dead-letters a message (the simulator's default)."""

RECORDS_TABLE = """CREATE TABLE IF NOT EXISTS idempotency_records (
    message_id VARCHAR PRIMARY KEY,
    status     VARCHAR NOT NULL,
    claim      INTEGER NOT NULL DEFAULT 1,
    deadline   DOUBLE PRECISION,
    expires_at DOUBLE PRECISION NOT NULL,
    result     VARCHAR
)"""
"""One row per message: its status, its claim number (the fencing token: 1, then one more per takeover), the
claim's deadline (NULL: none), when the row is forgotten, the result."""


@dataclass(frozen=True)
class Record:
    """What the table holds for one message ID."""

    status: str
    claim: int
    deadline: float | None
    expires_at: float
    result: str | None


class RecordSession(PaymentsSession):
    """A consumer's session that also reads and writes the idempotency record.

    Every statement here commits on its own (outside :meth:`begin`), except
    :meth:`complete`, which the handler runs inside the transaction that writes
    the local payment row, so the row and the *completed* status commit together.
    """

    def read(self, message_id: str) -> Record | None:
        """The record for ``message_id``, or None when there is none."""
        rows = self._run("SELECT status, claim, deadline, expires_at, result FROM idempotency_records "
                         f"WHERE message_id = {self._p}",
                         (message_id,), rows=True)
        return Record(*rows[0]) if rows else None

    def claim(self, message_id: str, now: float, deadline: float | None, expires_at: float) -> bool:
        """Insert the record as in progress; True if this consumer now holds it, False if a record was there."""
        p = self._p
        return bool(self._run(
            f"INSERT INTO idempotency_records (message_id, status, deadline, expires_at) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT DO NOTHING RETURNING message_id", (message_id, IN_PROGRESS, deadline, expires_at), rows=True))

    def take_over(self, message_id: str, seen: Record, deadline: float | None, expires_at: float) -> int | None:
        """Replace the record ``seen`` (an expired one, or a claim past its deadline) with a claim of our own.

        A compare-and-set on the claim number we read: of two consumers that both saw
        the old record, exactly one replaces it. Returns our claim number (one more
        than the one replaced), or None when a rival replaced it first.
        """
        p = self._p
        rows = self._run(
            f"UPDATE idempotency_records SET status = {p}, claim = claim + 1, deadline = {p}, expires_at = {p}, "
            f"result = NULL WHERE message_id = {p} AND status = {p} AND claim = {p} RETURNING claim",
            (IN_PROGRESS, deadline, expires_at, message_id, seen.status, seen.claim), rows=True)
        return int(rows[0][0]) if rows else None

    def heartbeat(self, message_id: str, claim: int, deadline: float) -> bool:
        """Move our claim's deadline to ``deadline``; False if the claim is no longer ours (it was taken over)."""
        p = self._p
        return bool(self._run(
            f"UPDATE idempotency_records SET deadline = {p} WHERE message_id = {p} AND status = {p} AND claim = {p} "
            "RETURNING message_id", (deadline, message_id, IN_PROGRESS, claim), rows=True))

    def complete(self, message_id: str, claim: int, result: str) -> bool:
        """Mark our claim completed with ``result``; False if it is no longer ours (another consumer took over)."""
        p = self._p
        return bool(self._run(
            f"UPDATE idempotency_records SET status = {p}, result = {p} "
            f"WHERE message_id = {p} AND status = {p} AND claim = {p} RETURNING message_id",
            (COMPLETED, result, message_id, IN_PROGRESS, claim), rows=True))


class _WithRecords(SqlPayments):
    """A payments database with the idempotency-record table beside the payments."""

    def _create_schema(self) -> None:
        super()._create_schema()
        self._reader.execute(RECORDS_TABLE)

    def session(self) -> RecordSession:
        return RecordSession(self.connect(), self)

    def empty(self) -> None:
        super().empty()
        self._reader.execute("DELETE FROM idempotency_records")

    def records(self) -> pd.DataFrame:
        """Every idempotency record, as the table holds it now."""
        return pd.DataFrame(self._rows("SELECT message_id, status, claim, deadline, expires_at, result "
                                       "FROM idempotency_records"),
                            columns=["message_id", "status", "claim", "deadline", "expires_at", "result"])


class RecordsDuckDB(_WithRecords, DuckDBPayments):
    """DuckDB, in memory by default, with the idempotency-record table."""


class RecordsPostgres(_WithRecords, PostgresPayments):
    """PostgreSQL (a schema of its own per run), with the idempotency-record table."""


class InProgressHandler(Handler):
    """Claim the message as in progress with a deadline, do the long work, call the provider, mark it completed, ack.

    ``deadline_seconds`` is how long a claim is honoured (None: until the record
    expires, which is what a record without a registered deadline does);
    ``expires_after`` is how long any record is kept. ``keyed`` sends the derived
    key ``<message ID>:charge`` to the provider. ``local_write`` says where the local
    payment row is written: ``"with completion"`` in the transaction that marks the
    record completed, or ``"own commit"``, a plain insert committed on its own in
    the work step, which a takeover repeats. ``work_parts`` splits the work into
    that many ``work`` steps; with ``extend_lease`` the consumer extends its lease
    before each part (SQS's ChangeMessageVisibility, JetStream's in-progress ack,
    Pub/Sub's modifyAckDeadline), so the broker hands the message to nobody else
    while it works. With ``heartbeat`` it also moves its claim's deadline a full
    ``deadline_seconds`` ahead before each part, on the condition that the claim
    number is still its own: a consumer that was taken over learns it there and
    stops before the provider call. The claim number (a fencing token) also guards
    the completion, so a taken-over consumer's late completion is refused.
    """

    steps = ("claim", "work", "call provider", "mark completed", "ack")

    def __init__(self, deadline_seconds: float | None = 60.0, *, expires_after: float = 3600.0, keyed: bool = True,
                 local_write: str = "with completion", extend_lease: bool = False, work_parts: int = 1,
                 heartbeat: bool = False) -> None:
        if local_write not in ("with completion", "own commit"):
            raise ValueError(f"local_write must be 'with completion' or 'own commit', not {local_write!r}")
        if deadline_seconds is not None and not deadline_seconds > 0:
            raise ValueError(f"deadline_seconds must be positive (or None for no deadline), not {deadline_seconds}")
        if heartbeat and deadline_seconds is None:
            raise ValueError("a heartbeat moves a deadline: give deadline_seconds")
        if work_parts < 1:
            raise ValueError(f"work_parts must be at least 1, not {work_parts}")
        self.deadline_seconds, self.expires_after, self.keyed, self.local_write = (
            deadline_seconds, expires_after, keyed, local_write)
        self.extend_lease, self.work_parts, self.heartbeat = extend_lease or heartbeat, work_parts, heartbeat
        deadline = "no deadline" if deadline_seconds is None else f"deadline {deadline_seconds:g} s"
        lease = (f", heartbeat {work_parts} times" if heartbeat
                 else f", lease extended {work_parts} times" if extend_lease else "")
        self.name = f"in progress, {deadline}, {'key' if keyed else 'no key'}, local row {local_write}{lease}"

    def run(self, ctx: Context) -> Steps:
        charge = self.read(ctx.delivery.message)
        db = cast(RecordSession, ctx.db)  # the database of this handler (InProgressPayments) opens these
        yield "claim"
        now = ctx.now()
        deadline = None if self.deadline_seconds is None else now + self.deadline_seconds
        mine = 1  # the claim number this delivery holds: 1 for a fresh claim
        if not db.claim(ctx.message_id, now, deadline, now + self.expires_after):
            seen = db.read(ctx.message_id)
            if seen is not None and seen.status == COMPLETED and seen.expires_at > now:
                ctx.note("duplicate skipped")  # the stored result answers it
                yield "ack"
                ctx.ack()
                return
            if seen is not None and not _claim_is_over(seen, now):
                ctx.note(BACKED_OFF)  # no ack: the broker redelivers when the lease runs out
                return
            taken = None if seen is None else db.take_over(ctx.message_id, seen, deadline, now + self.expires_after)
            if seen is not None and taken is None:
                ctx.note(BACKED_OFF)  # a rival replaced it first
                return
            mine = taken or mine
            ctx.note(TAKEN_OVER)
        for _ in range(self.work_parts):
            if self.heartbeat:
                assert self.deadline_seconds is not None
                if not db.heartbeat(ctx.message_id, mine, ctx.now() + self.deadline_seconds):
                    ctx.note(CLAIM_LOST)  # taken over: it stops before the call
                    return  # no ack: whoever holds the claim now finishes and acks
            if self.extend_lease:
                ctx.extend_lease()  # the lease now runs a full lease from here, while this part of the work runs
            yield "work"
        if self.local_write == "own commit":
            db.charge(charge.order_id, charge.amount, ctx.message_id)
        yield "call provider"
        response = ctx.call_provider(f"{ctx.message_id}:charge" if self.keyed else None, charge)
        if not response.ok:
            raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}: {response.body.get('error')}")
        yield "mark completed"
        db.begin()
        if not db.complete(ctx.message_id, mine, str(response.body.get("id"))):
            db.rollback()
            ctx.note(CLAIM_LOST)  # no ack: whoever holds the claim now finishes and acks
            return
        if self.local_write == "with completion":
            db.charge(charge.order_id, charge.amount, ctx.message_id)
        db.commit()
        yield "ack"
        ctx.ack()


def waited_leases(trace: pd.DataFrame, lease: float) -> float:
    """How long a message sat refused as in progress, in leases.

    From the delivery that was first refused to the next delivery that was not (a
    takeover), or to its dead-lettering, or to the end of the run.
    """
    refusals = trace[trace["event"] == BACKED_OFF]
    if refusals.empty:
        return 0.0
    first = trace[(trace["event"] == "delivered") & (trace["delivery"] == refusals["delivery"].min())]["time"].min()
    after = trace[(trace["time"] > refusals["time"].max()) & trace["event"].isin(["delivered", "dead-lettered"])]
    end = after["time"].min() if not after.empty else trace["time"].max()
    return round(float(end - first) / lease, 2)


def outcome_of_effects(charges: tuple[int, ...], refused: int, *, stuck: bool = False) -> str:
    """The outcome of one message over its effects: the card's charges first, then the local payment rows, if any.

    The card charged twice: ``charged twice``; a local row twice: ``local row
    twice``; the message dead-lettered while its record said in progress: ``stuck,
    dead-lettered``, whatever was charged; the card not charged: ``charge lost``;
    every effect once, but only after deliveries were refused as in progress:
    ``once, after a wait``; otherwise ``charged once``.
    """
    card, *rows = charges
    if card >= 2:
        return outcome_of(card)
    if any(row >= 2 for row in rows):
        return ROW_TWICE
    if stuck:
        return STUCK
    if min(charges) == 0:
        return outcome_of(0)
    return WAITED if refused else outcome_of(1)


def _claim_is_over(record: Record, now: float) -> bool:
    """Whether a record may be replaced: it has expired, or it is an in-progress claim past its deadline."""
    if record.expires_at <= now:
        return True
    return record.status == IN_PROGRESS and record.deadline is not None and record.deadline <= now


def records_database(engine: str = "DuckDB") -> _WithRecords:
    """A fresh payments database with the record table: ``"DuckDB"`` (in memory) or ``"PostgreSQL"``."""
    engines: dict[str, Callable[[], _WithRecords]] = {"DuckDB": RecordsDuckDB, "PostgreSQL": RecordsPostgres}
    if engine not in engines:
        raise ValueError(f"engine must be one of {list(engines)}, not {engine!r}")
    return engines[engine]()


@dataclass
class LongRun:
    """One run of the in-progress handler: the simulator's result and the provider it called."""

    result: RunResult
    provider: PaymentProvider
    lease: float
    stuck: bool = False
    """Whether a message went to the dead-letter queue while its record still said in progress."""

    @property
    def card_charges(self) -> int:
        """Charges the provider really made (the customer's card statement)."""
        return len(self.provider.charges)

    @property
    def local_rows(self) -> int:
        """Payment rows committed in the consumer's own database."""
        return len(self.result.payments)

    @property
    def refused(self) -> int:
        """Deliveries that found the record in progress and backed off."""
        return len(self.result.events(BACKED_OFF))

    @property
    def waited_leases(self) -> float:
        """How long the message sat refused as in progress, in leases (see :func:`waited_leases`)."""
        return waited_leases(self.result.trace, self.lease)

    @property
    def outcome(self) -> str:
        """The outcome over both effects, the card and the local row (see :func:`outcome_of_effects`)."""
        return outcome_of_effects((self.card_charges, self.local_rows), self.refused, stuck=self.stuck)

    def summary(self) -> dict[str, Any]:
        """The figures the lesson's tables show for this run."""
        return {"deliveries": len(self.result.events("delivered")), "takeovers": len(self.result.events(TAKEN_OVER)),
                "provider calls": len(self.result.events("provider answered")), "card charges": self.card_charges,
                "local rows": self.local_rows, "refused": self.refused,
                "completions refused": len(self.result.events(CLAIM_LOST)), "waited (leases)": self.waited_leases,
                "dead-lettered": len(self.result.dead_letters), "outcome": self.outcome}


def run_long(handler: InProgressHandler, messages: Iterable[Message] = (RUNNING_EXAMPLE,), *,
             faults: FaultPlan | None = None, lease: float = LEASE_SECONDS, consumers: int = 1,
             work_seconds: float | None = None, call_seconds: float | None = None,
             database: _WithRecords | None = None, max_deliveries: int = MAX_DELIVERIES) -> LongRun:
    """Run ``messages`` through the in-progress handler with a fresh provider.

    ``work_seconds`` is how long the whole work takes, split evenly over the
    handler's work parts (the simulator's one-second step when not given);
    ``call_seconds`` how long the provider takes to answer (a slow provider).
    ``database`` (a fresh in-memory DuckDB when not given) is emptied first, so
    one database can serve many runs without one run seeing another's records.
    """
    provider = PaymentProvider()
    database = database or RecordsDuckDB()
    database.empty()
    step_seconds = {} if work_seconds is None else {"work": work_seconds / handler.work_parts}
    if call_seconds is not None:
        step_seconds["call provider"] = call_seconds
    result = simulate(handler, messages, faults=faults, consumers=consumers, visibility_timeout=lease,
                      step_seconds=step_seconds, database=database, provider=provider,
                      max_deliveries=max_deliveries)
    records = database.records()
    in_progress = set(records.loc[records["status"] == IN_PROGRESS, "message_id"])
    stuck = any(letter.message.label in in_progress for letter in result.dead_letters)
    return LongRun(result, provider, lease, stuck)
