"""Long work: the idempotency record with states, a deadline and an expiry (lesson 09).

When the work is long, or includes a call no transaction covers, the consumer
records a status instead of a bare ID. It commits the ID as *in progress* with a
deadline, does the work, then marks the record *completed* with the result kept.
A second delivery that finds *in progress* backs off (it does not ack, so the
broker redelivers after a lease); one that finds the deadline passed takes over;
one that finds *completed* gets the stored result. A record is forgotten once it
expires, and a delivery after that is new work again.

The lease (how long the broker waits for an ack) and the deadline (how long a
claim is honoured) are separate numbers; :func:`deadline_versus_lease` shows what
each ratio of the two does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE, fault_points, open_transaction_seconds
from idemlib.faults import Crash, FaultPlan
from idemlib.handlers import Context, Handler, ProviderError, ProviderHandler, Steps
from idemlib.messages import Message, parse_charge
from idemlib.provider import PaymentProvider
from idemlib.sim import RunResult, outcome_of, simulate
from idemlib.servers import ready
from idemlib.stores import DuckDBPayments, PaymentsSession, PostgresPayments, SqlPayments, postgres_unavailable

IN_PROGRESS, COMPLETED = "in progress", "completed"
BACKED_OFF, TAKEN_OVER, CLAIM_LOST = "in progress: backed off", "deadline passed: taken over", "claim lost: left to the owner"
LEASE_SECONDS = 30.0
"""The broker's lease in this lesson's runs (the simulator's default visibility timeout)."""

RECORDS_TABLE = """CREATE TABLE IF NOT EXISTS idempotency_records (
    message_id VARCHAR PRIMARY KEY,
    status     VARCHAR NOT NULL,
    deadline   DOUBLE PRECISION,
    expires_at DOUBLE PRECISION NOT NULL,
    result     VARCHAR
)"""
"""One row per message: its status, the claim's deadline (NULL: none), when the row is forgotten, the result."""


@dataclass(frozen=True)
class Record:
    """What the table holds for one message ID."""

    status: str
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
        rows = self._run(f"SELECT status, deadline, expires_at, result FROM idempotency_records WHERE message_id = {self._p}",
                         (message_id,), rows=True)
        return Record(*rows[0]) if rows else None

    def claim(self, message_id: str, now: float, deadline: float | None, expires_at: float) -> bool:
        """Insert the record as in progress; True if this consumer now holds it, False if a record was there."""
        p = self._p
        return bool(self._run(
            f"INSERT INTO idempotency_records (message_id, status, deadline, expires_at) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT DO NOTHING RETURNING message_id", (message_id, IN_PROGRESS, deadline, expires_at), rows=True))

    def take_over(self, message_id: str, seen: Record, deadline: float | None, expires_at: float) -> bool:
        """Replace the record ``seen`` (an expired one, or a claim past its deadline) with a claim of our own.

        The update matches the status and times we read, so of two consumers that
        both saw the old record, exactly one replaces it.
        """
        p = self._p
        old_deadline = "deadline IS NULL" if seen.deadline is None else f"deadline = {p}"
        parameters = (IN_PROGRESS, deadline, expires_at, message_id, seen.status, seen.expires_at,
                      *(() if seen.deadline is None else (seen.deadline,)))
        return bool(self._run(
            f"UPDATE idempotency_records SET status = {p}, deadline = {p}, expires_at = {p}, result = NULL "
            f"WHERE message_id = {p} AND status = {p} AND expires_at = {p} AND {old_deadline} RETURNING message_id",
            parameters, rows=True))

    def complete(self, message_id: str, deadline: float | None, result: str) -> bool:
        """Mark our claim completed with ``result``; False if it is no longer ours (another consumer took over)."""
        p = self._p
        ours = "deadline IS NULL" if deadline is None else f"deadline = {p}"
        return bool(self._run(
            f"UPDATE idempotency_records SET status = {p}, result = {p} "
            f"WHERE message_id = {p} AND status = {p} AND {ours} RETURNING message_id",
            (COMPLETED, result, message_id, IN_PROGRESS, *(() if deadline is None else (deadline,))), rows=True))


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
        return pd.DataFrame(self._rows("SELECT message_id, status, deadline, expires_at, result FROM idempotency_records"),
                            columns=["message_id", "status", "deadline", "expires_at", "result"])


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
    the work step, which a takeover repeats.
    """

    steps = ("claim", "work", "call provider", "mark completed", "ack")

    def __init__(self, deadline_seconds: float | None = 60.0, *, expires_after: float = 3600.0, keyed: bool = True,
                 local_write: str = "with completion") -> None:
        if local_write not in ("with completion", "own commit"):
            raise ValueError(f"local_write must be 'with completion' or 'own commit', not {local_write!r}")
        if deadline_seconds is not None and deadline_seconds <= 0:
            raise ValueError(f"deadline_seconds must be positive (or None for no deadline), not {deadline_seconds}")
        self.deadline_seconds, self.expires_after, self.keyed, self.local_write = (
            deadline_seconds, expires_after, keyed, local_write)
        deadline = "no deadline" if deadline_seconds is None else f"deadline {deadline_seconds:g} s"
        self.name = f"in progress, {deadline}, {'key' if keyed else 'no key'}, local row {local_write}"

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        db: RecordSession = ctx.db
        yield "claim"
        now = ctx.now()
        deadline = None if self.deadline_seconds is None else now + self.deadline_seconds
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
            if seen is not None and not db.take_over(ctx.message_id, seen, deadline, now + self.expires_after):
                ctx.note(BACKED_OFF)  # a rival replaced it first
                return
            ctx.note(TAKEN_OVER)
        yield "work"
        if self.local_write == "own commit":
            db.charge(charge.order_id, charge.amount, ctx.message_id)
        yield "call provider"
        response = ctx.call_provider(f"{ctx.message_id}:charge" if self.keyed else None, charge)
        if not response.ok:
            raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}: {response.body.get('error')}")
        yield "mark completed"
        db.begin()
        if not db.complete(ctx.message_id, deadline, str(response.body.get("id"))):
            db.rollback()
            ctx.note(CLAIM_LOST)  # no ack: whoever holds the claim now finishes and acks
            return
        if self.local_write == "with completion":
            db.charge(charge.order_id, charge.amount, ctx.message_id)
        db.commit()
        yield "ack"
        ctx.ack()


def blocked_leases(trace: pd.DataFrame, lease: float) -> float:
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


def outcome_of_effects(charges: tuple[int, ...], refused: int) -> str:
    """The outcome of one message over its effects (card charges, local rows...).

    Any effect twice: ``charged twice``; any effect missing: ``charge lost``; every
    effect once, but only after deliveries were refused as in progress:
    ``blocked``; otherwise ``charged once``.
    """
    if max(charges) >= 2:
        return outcome_of(max(charges))
    if min(charges) == 0:
        return outcome_of(0)
    return "blocked" if refused else outcome_of(1)


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
    def blocked_leases(self) -> float:
        """How long the message sat refused as in progress, in leases (see :func:`blocked_leases`)."""
        return blocked_leases(self.result.trace, self.lease)

    @property
    def outcome(self) -> str:
        """Once, twice or lost over both effects (the card and the local row), or ``blocked`` (see :func:`outcome_of_effects`)."""
        return outcome_of_effects((self.card_charges, self.local_rows), self.refused)

    def summary(self) -> dict[str, Any]:
        """The figures the lesson's tables show for this run."""
        return {"takeovers": len(self.result.events(TAKEN_OVER)), "provider calls": len(self.result.events("provider answered")),
                "card charges": self.card_charges, "local rows": self.local_rows, "refused": self.refused,
                "blocked (leases)": self.blocked_leases, "dead-lettered": len(self.result.dead_letters),
                "outcome": self.outcome}


def run_long(handler: InProgressHandler, messages: Iterable[Message] = (RUNNING_EXAMPLE,), *,
             faults: FaultPlan | None = None, lease: float = LEASE_SECONDS, consumers: int = 1,
             step_seconds: dict[str, float] | None = None, database: _WithRecords | None = None,
             max_deliveries: int = 5) -> LongRun:
    """Run ``messages`` through the in-progress handler with a fresh provider.

    ``database`` (a fresh in-memory DuckDB when not given) is emptied first, so
    one database can serve many runs without one run seeing another's records.
    """
    provider = PaymentProvider()
    database = database or RecordsDuckDB()
    database.empty()
    result = simulate(handler, messages, faults=faults, consumers=consumers, visibility_timeout=lease,
                      step_seconds=step_seconds, database=database, provider=provider,
                      max_deliveries=max_deliveries)
    return LongRun(result, provider, lease)


def inprogress_matrix(handlers: dict[str, InProgressHandler], engine: str = "DuckDB", *,
                      lease: float = LEASE_SECONDS) -> pd.DataFrame:
    """Every single fault (a crash before each step, a lost ack) on one delivery of m-7f3, for each labelled handler.

    One row per (handler, fault) with the card charges, the local rows, the
    refused deliveries, the time blocked in leases and the outcome; the columns
    ``total charged`` (the card, in dollars) and ``outcome`` suit :func:`idemlib.pictures.plots.plot_crash_matrix`.
    """
    rows = []
    amount = RUNNING_EXAMPLE.body["amount"]
    database = records_database(engine)
    for label, handler in handlers.items():
        for fault, plan in fault_points(handler):
            run = run_long(handler, faults=plan, lease=lease, database=database)
            rows.append({"handler": label, "fault": fault, "total charged": run.card_charges * amount, **run.summary()})
    return pd.DataFrame(rows)


def outcomes_by_engine(matrix: pd.DataFrame, label: str, handlers: dict[str, InProgressHandler]) -> pd.DataFrame:
    """The outcome at each fault point of the handler ``label``: as measured on DuckDB in ``matrix``, and on PostgreSQL.

    ``matrix`` and ``handlers`` are what :func:`inprogress_matrix` was given and
    returned. Without a PostgreSQL server the column is left out with a message
    saying how to start one (or, where servers are required, the run fails).
    """
    columns = {"DuckDB": matrix[matrix["handler"] == label].set_index("fault")["outcome"]}
    if ready(postgres_unavailable(), "Only DuckDB is shown."):
        on_postgres = inprogress_matrix({label: handlers[label]}, "PostgreSQL")
        columns["PostgreSQL"] = on_postgres.set_index("fault")["outcome"]
    return pd.DataFrame(columns)


def deadline_versus_lease(ratios: Iterable[float] = (0.5, 1.0, 2.0, 10.0), *, lease: float = LEASE_SECONDS,
                          slow_work: float = 1.5) -> pd.DataFrame:
    """What deadlines shorter than, equal to and longer than the lease do, in two situations.

    *crashed after its claim*: the first consumer dies before its provider call,
    leaving an in-progress record; *slow, alive*: the work takes ``slow_work``
    leases, so the broker hands the message to a second consumer while the first
    is still working. ``ratios`` are deadlines as multiples of the lease.
    """
    situations: dict[str, dict[str, Any]] = {
        "crashed after its claim": {"faults": FaultPlan(crashes=[Crash("call provider")])},
        "slow, alive": {"consumers": 2, "step_seconds": {"work": slow_work * lease}},
    }
    rows = []
    database = RecordsDuckDB()
    for ratio in ratios:
        for situation, setup in situations.items():
            run = run_long(InProgressHandler(ratio * lease), lease=lease, database=database, **setup)
            rows.append({"deadline / lease": ratio, "situation": situation, **run.summary()})
    return pd.DataFrame(rows)


def where_the_call_sits(messages: list[Message], *, provider_seconds: float = 2.0, step_seconds: float = 0.05,
                        ack_loss_rate: float = 0.2, seed: int = 7) -> pd.DataFrame:
    """The provider call inside the open transaction, before it, or between a committed claim and the completion.

    Every handler sends the derived key. The table gives how long, on average, a
    delivery holds a database transaction open (simulated seconds), how many calls
    reached the provider and how many charges it made, under the same lost acks.
    """
    timings = {step: step_seconds for step in ("begin", "record id", "charge", "commit", "ack", "claim", "work",
                                               "mark completed")}
    timings["call provider"] = provider_seconds
    handlers: dict[str, Handler] = {"call inside the transaction": ProviderHandler("inside"),
                                    "call before the transaction": ProviderHandler("before"),
                                    "in-progress record": InProgressHandler(60.0)}
    rows = {}
    database = RecordsDuckDB()
    for label, handler in handlers.items():
        database.empty()
        provider = PaymentProvider()
        run = simulate(handler, messages, faults=FaultPlan(ack_loss_rate=ack_loss_rate, seed=seed), provider=provider,
                       step_seconds=timings, database=database)
        # The in-progress record opens its one transaction and commits it within the "mark completed" step.
        held = open_transaction_seconds(run.trace)
        rows[label] = {"seconds a transaction stays open": round(float(held.mean()) if not held.empty else 0.0, 2),
                       "calls to the provider": len(run.events("provider answered")),
                       "charges at the provider": len(provider.charges), "payments owed": len(messages)}
    return pd.DataFrame.from_dict(rows, orient="index")
