"""The mortgage case of lesson 12: opening one loan account, and paying the loan out once.

An application is approved; the approval service publishes "open an account for
application 42". The account service consumes it, opens the loan account in its
own database and asks the payment system to pay the loan out. Every design of
that service here is one :class:`AccountService`: a *guard* (how it recognises a
message it has seen) and a *payout key* (what it sends the payment system), so
the typical mistakes and the safe designs differ in exactly one setting each, and
run on the same simulator, faults and engines as the rest of the course.

The simulator counts effects as rows of a ``payments`` table; :class:`LoanBank`
gives it the opened loan accounts instead, so "charged twice" reads here as "two
accounts for one application".
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd

from idemlib.handlers import Context, Handler, ProviderError, Steps
from idemlib.messages import BadMessage, Charge, Message
from idemlib.stores.duckdb_store import DuckDBPayments
from idemlib.stores.sql import PaymentsSession

GUARDS = ("none", "check outside", "memory", "inbox", "unique application", "version")
PAYOUT_KEYS = ("derived", "per attempt", "none")

LOAN_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS loan_accounts (
           application_id INTEGER NOT NULL,
           amount         INTEGER NOT NULL,
           message_id     VARCHAR
       )""",
    """CREATE TABLE IF NOT EXISTS applications (
           application_id INTEGER PRIMARY KEY,
           status         VARCHAR NOT NULL,
           version        INTEGER NOT NULL
       )""",
    # When each inbox ID was saved, so the service can prune IDs older than it keeps them.
    """CREATE TABLE IF NOT EXISTS inbox_saved_at (
           message_id VARCHAR PRIMARY KEY,
           saved_at   DOUBLE NOT NULL
       )""",
)


@dataclass(frozen=True)
class OpenAccount:
    """What the message asks: open a loan account of ``amount`` for ``application_id``, approved at ``version``."""

    application_id: int
    amount: int
    version: int = 1


def open_account_message(message_id: str, application_id: int = 42, amount: int = 250_000, version: int = 1) -> Message:
    """The approval service's message: "open an account for application 42"."""
    return Message(message_id, {"application_id": application_id, "amount": amount, "version": version})


APPLICATION_42 = open_account_message("m-42")
"""The case's message: open a loan account of \\$250,000 for application 42."""


def parse_open_account(message: Message) -> OpenAccount:
    """Read the instruction in ``message``; :class:`BadMessage` names the field at fault."""
    body = message.body if isinstance(message.body, dict) else None
    if not isinstance(message.message_id, str) or not message.message_id or body is None:
        raise BadMessage(f"{message.label}: an open-account message needs an ID and a JSON object body")
    values = {}
    for name in ("application_id", "amount", "version"):
        value = body.get(name, 1 if name == "version" else None)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise BadMessage(f"{message.label}: {name} must be a whole number from 1 to 2147483647, not {value!r}")
        values[name] = value
    return OpenAccount(**values)


class LoanSession(PaymentsSession):
    """The account service's connection: the payments session's transactions and inbox, plus loan accounts."""

    def charge(self, order_id: int, amount: int, message_id: str) -> None:
        """Open a loan account (the effect this service exists for); the simulator calls every effect a charge."""
        self.open_account(order_id, amount, message_id)

    def open_account(self, application_id: int, amount: int, message_id: str) -> None:
        """Insert the loan account row."""
        p = self._p
        self._run(f"INSERT INTO loan_accounts VALUES ({p}, {p}, {p})", (application_id, amount, message_id))

    def open_account_once(self, application_id: int, amount: int, message_id: str) -> bool:
        """Open the account unless the application has one: False means "already done".

        Relies on the unique index on ``application_id`` that :class:`LoanBank` creates
        when ``unique_per_application`` is set.
        """
        p = self._p
        return bool(self._run(f"INSERT INTO loan_accounts VALUES ({p}, {p}, {p}) ON CONFLICT DO NOTHING "
                              "RETURNING application_id", (application_id, amount, message_id), rows=True))

    def save_id_at(self, message_id: str, moment: float) -> bool:
        """Record ``message_id`` in the inbox, noting when: False if it is there already (a twin committed it)."""
        p = self._p
        if not self.record_message(message_id):
            return False
        self._run(f"INSERT INTO inbox_saved_at VALUES ({p}, {p}) ON CONFLICT DO NOTHING", (message_id, moment))
        return True

    def prune_inbox(self, before: float) -> None:
        """Delete the inbox IDs saved before ``before`` (lesson 10's pruning): the service forgets them."""
        p = self._p
        self._run(f"DELETE FROM processed_messages WHERE message_id IN "
                  f"(SELECT message_id FROM inbox_saved_at WHERE saved_at < {p})", (before,))
        self._run(f"DELETE FROM inbox_saved_at WHERE saved_at < {p}", (before,))

    def advance_application(self, application_id: int, expected_version: int) -> bool:
        """Move the application on from ``expected_version``; False if it has moved already (optimistic concurrency)."""
        p = self._p
        return bool(self._run(
            f"UPDATE applications SET status = 'account opened', version = version + 1 "
            f"WHERE application_id = {p} AND version = {p} RETURNING application_id",
            (application_id, expected_version), rows=True))


class LoanBank(DuckDBPayments):
    """The account service's DuckDB database: loan accounts, approved applications and the inbox.

    ``unique_per_application`` adds the business constraint "one account per
    application". ``payments()`` returns the opened accounts, which is what the
    simulator counts as the effect.
    """

    engine = "DuckDB"

    def __init__(self, *, unique_per_application: bool = False, approved: tuple[int, ...] = (42,)) -> None:
        super().__init__()
        for statement in LOAN_SCHEMA:
            self._reader.execute(statement)
        if unique_per_application:
            self._reader.execute("CREATE UNIQUE INDEX one_account_per_application ON loan_accounts (application_id)")
        self._approved = approved
        self._approve()

    def _approve(self) -> None:
        for application_id in self._approved:
            self._reader.execute("INSERT INTO applications VALUES (?, 'approved', 1)", (application_id,))

    def session(self) -> LoanSession:
        return LoanSession(self.connect(), self)

    def empty(self) -> None:
        super().empty()
        for table in ("loan_accounts", "applications", "inbox_saved_at"):
            self._reader.execute(f"DELETE FROM {table}")
        self._approve()

    def payments(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows("SELECT application_id, amount, message_id FROM loan_accounts"),
                            columns=["order_id", "amount", "message_id"])

    def total_charged(self) -> int:
        return int(self._rows("SELECT coalesce(sum(amount), 0) FROM loan_accounts")[0][0])

    def accounts(self) -> pd.DataFrame:
        """The opened loan accounts, as the bank sees them."""
        return self.payments().rename(columns={"order_id": "application_id"})


class AccountService(Handler):
    """The account service: open the loan account for an application, pay the loan out, acknowledge.

    ``guard`` is how it recognises a message it has handled:

    - ``"none"``: it does not;
    - ``"check outside"``: it reads the inbox, then writes, each statement on its own;
    - ``"memory"``: it keeps handled IDs in a Python set, which a restart empties;
    - ``"inbox"``: the reference article's handler: the check, then the account and the ID saved together in
      one transaction, the ID under a unique key, so a racing twin fails and is treated as done;
    - ``"unique application"``: no inbox; one account per application, enforced by a unique index;
    - ``"version"``: no inbox; the account is opened only while the application is at the
      version the message was approved at (optimistic concurrency).

    ``payout_key`` is what it sends with the payout: ``"derived"`` (``<message ID>:payout``,
    the same on every retry), ``"per attempt"`` (a fresh UUID each time, as a key made up
    on the receiving side would be) or ``"none"`` (the key is not passed on). ``payout=False``
    leaves the payout out.

    ``keep_hours`` is how long the inbox keeps a processed ID: the service's own retention,
    modelled as a pruner that has deleted every older ID by the time a delivery looks.
    ``look_up``, when given, is asked before every payout whether the payment system has
    already paid this application out (a reconciliation), and the payout is sent only if not:
    what a team does when the payment system may forget a key before the longest outage ends.
    """

    def __init__(self, guard: str = "inbox", payout_key: str = "derived", *, payout: bool = True,
                 keep_hours: float = math.inf, look_up: Callable[[int], bool] | None = None) -> None:
        if guard not in GUARDS:
            raise ValueError(f"guard must be one of {GUARDS}, not {guard!r}")
        if payout_key not in PAYOUT_KEYS:
            raise ValueError(f"payout_key must be one of {PAYOUT_KEYS}, not {payout_key!r}")
        self.guard, self.payout_key, self.payout = guard, payout_key, payout
        self.keep_hours, self.look_up = keep_hours, look_up
        self.handled: set[str] = set()  # only the "memory" guard uses it
        self.name = f"{guard}, {payout_key} key" if payout else guard
        pay = ((("look up payout",) if look_up else ()) + ("pay out",)) if payout else ()
        # BEGIN goes out with the first statement, as drivers send it: one step, one pause fewer to explore.
        self.steps = {
            "none": ("begin, open account", *pay, "commit", "ack"),
            "check outside": ("check id", "open account", *pay, "record id", "ack"),
            "memory": ("check memory", "begin, open account", *pay, "commit", "remember", "ack"),
            "inbox": ("begin, check id", "save", *pay, "commit", "ack"),
            "unique application": ("begin, open account", *pay, "commit", "ack"),
            "version": ("begin, advance application", "open account", *pay, "commit", "ack"),
        }[guard]

    def run(self, ctx: Context) -> Steps:
        order = self.read(ctx.delivery.message)
        db: LoanSession = ctx.db  # type: ignore[assignment]  # LoanBank hands out LoanSessions
        if self.guard == "memory":
            yield from self._remembering(ctx, db, order)
            return
        if self.guard == "check outside":
            yield "check id"
            if db.has_processed(ctx.message_id):
                ctx.note("duplicate skipped")
            else:
                yield "open account"
                db.open_account(order.application_id, order.amount, ctx.message_id)
                yield from self._pay(ctx, order)
                yield "record id"
                db.record_message(ctx.message_id)
            yield "ack"
            ctx.ack()
            return
        if (yield from self._already_done(ctx, db, order)):
            ctx.note("duplicate skipped")
        elif self.guard == "inbox":
            # The reference article's handler: the account and the processed ID saved together (one SaveChanges).
            yield "save"
            db.open_account(order.application_id, order.amount, ctx.message_id)
            if self._save_id(ctx, db):
                yield from self._pay(ctx, order)
            else:
                # A twin committed the same ID while we worked (PostgreSQL makes us wait for it):
                # the unique key says "already done", so our account goes.
                db.rollback()
                ctx.note("duplicate skipped")
        else:
            if self.guard == "version":
                yield "open account"
                db.open_account(order.application_id, order.amount, ctx.message_id)
            yield from self._pay(ctx, order)
        yield "commit"
        if db.in_transaction:
            db.commit()
        yield "ack"
        ctx.ack()

    def _already_done(self, ctx: Context, db: LoanSession, order: OpenAccount) -> Iterator[str]:
        """Open the transaction and apply the guard's test; the generator returns True for a duplicate.

        The unguarded service and the unique constraint open the account in this step:
        for the constraint, opening it *is* the test.
        """
        first = self.steps[0]
        yield first
        db.begin()
        if self.guard == "inbox":
            if self.keep_hours < math.inf:
                db.prune_inbox(before=ctx.now() - self.keep_hours * 3600)
            return db.has_processed(ctx.message_id)
        if self.guard == "version":
            return not db.advance_application(order.application_id, order.version)
        if self.guard == "unique application":
            return not db.open_account_once(order.application_id, order.amount, ctx.message_id)
        db.open_account(order.application_id, order.amount, ctx.message_id)
        return False

    def _save_id(self, ctx: Context, db: LoanSession) -> bool:
        """Save the processed ID (with the moment, where IDs are pruned); False if a twin saved it first."""
        if self.keep_hours < math.inf:
            return db.save_id_at(ctx.message_id, ctx.now())
        return db.record_message(ctx.message_id)

    def _remembering(self, ctx: Context, db: LoanSession, order: OpenAccount) -> Steps:
        try:
            yield "check memory"
            if ctx.message_id in self.handled:
                ctx.note("duplicate skipped")
            else:
                yield "begin, open account"
                db.begin()
                db.open_account(order.application_id, order.amount, ctx.message_id)
                yield from self._pay(ctx, order)
                yield "commit"
                db.commit()
                yield "remember"
                self.handled.add(ctx.message_id)
            yield "ack"
            ctx.ack()
        except GeneratorExit:
            # The process died (the simulator closes a crashed job): its memory goes with it.
            self.handled.clear()
            raise

    def read(self, message: Message) -> OpenAccount:  # type: ignore[override]  # an order, not a charge
        return parse_open_account(message)

    def key_for(self, message_id: str) -> str | None:
        """The payout's idempotency key, by this design's rule."""
        if self.payout_key == "derived":
            return f"{message_id}:payout"
        return str(uuid.uuid4()) if self.payout_key == "per attempt" else None

    def _pay(self, ctx: Context, order: OpenAccount) -> Steps:
        if not self.payout:
            return
        if self.look_up is not None:
            yield "look up payout"
            if self.look_up(order.application_id):
                ctx.note("payout found at the payment system: not sent again")
                return
        yield "pay out"
        response = ctx.call_provider(self.key_for(ctx.message_id), Charge(order.application_id, order.amount))
        if not response.ok:
            raise ProviderError(f"{ctx.message_id}: the payment system answered {response.status}")
