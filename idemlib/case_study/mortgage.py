"""The mortgage case of lesson 12: opening one loan account, and paying the loan out once.

An application is approved; the approval service publishes "open an account for
application 42". The account service consumes it, opens the loan account in its
own database and asks the payment system to pay the loan out. Every design of
that service here is one :class:`AccountService`: a *guard* (how it recognises a
message it has seen) and a *payout key* (what it sends the payment system), so
the typical mistakes and the safe designs differ in exactly one setting each, and
run on the same simulator, faults and engines as the rest of the course. Its
database is :class:`~idemlib.case_study.loan_bank.LoanBank`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from idemlib.case_study.loan_bank import LoanSession
from idemlib.handlers import Context, Handler, ProviderError, Steps, StepsThen
from idemlib.messages import BadMessage, Charge, Message

GUARDS = ("none", "check outside", "memory", "inbox", "unique application", "version")
PAYOUT_KEYS = ("derived", "approval", "per attempt", "none")


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


class AccountService(Handler):
    """The account service: open the loan account for an application, pay the loan out, acknowledge.

    ``guard`` is how it recognises a message it has handled:

    - ``"none"``: it does not;
    - ``"check outside"``: it reads the inbox, then writes, each statement on its own;
    - ``"memory"``: it keeps handled IDs in a Python set, which a restart empties;
    - ``"inbox"``: the usual handler: the check, then the account and the ID saved together in
      one transaction, the ID under a unique key, so a racing twin fails and is treated as done;
    - ``"unique application"``: no inbox; one account per application, enforced by a unique index;
    - ``"version"``: no inbox; the account is opened only while the application is at the
      version the message was approved at (optimistic concurrency).

    ``payout_key`` is what it sends with the payout: ``"derived"`` (``<message ID>:payout``,
    the same on every retry of one message), ``"approval"`` (``application-<id>-v<version>:payout``,
    derived from the business fact, the approval the payout is for, so the same for any message about
    it, a copy re-sent under a new message ID included, and another for a later approval),
    ``"per attempt"`` (a fresh UUID each time, as a key made up on the receiving side would be)
    or ``"none"`` (the key is not passed on). ``payout=False``
    leaves the payout out.

    ``keep_hours`` is how long the inbox keeps a processed ID: the service's own retention,
    modelled as a pruner that has deleted every older ID by the time a delivery looks.

    ``look_up``, when given, makes the service reconcile, which is what a team does when the
    payment system may forget a key before the longest outage ends. It records the payout
    intent ("payout of \\$250,000 intended for application 42") in the transaction that opens
    the account, commits, and only then calls the payment system and records the payout made.
    A later delivery that finds the intent still unconfirmed cannot know whether the call went
    out, so it asks ``look_up`` whether the payment system paid this application out, records
    the payout if so and sends it only if not. The lookup sees payouts made, not one still on
    its way: against a twin working at the same moment, the key is what protects.
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
        # The payout: called inside the open transaction, or (reconciling) after the commit that holds its intent.
        pay = ("pay out",) if payout and look_up is None else ()
        settle = ("look up payout", "pay out", "record payout") if payout and look_up is not None else ()
        # BEGIN goes out with the first statement, as drivers send it: one step, one pause fewer to explore.
        self.steps = {
            "none": ("begin, open account", *pay, "commit", *settle, "ack"),
            "check outside": ("check id", "open account", *pay, *settle, "record id", "ack"),
            "memory": ("check memory", "begin, open account", *pay, "commit", *settle, "remember", "ack"),
            "inbox": ("begin, check id", "save", *pay, "commit", *settle, "ack"),
            "unique application": ("begin, open account", *pay, "commit", *settle, "ack"),
            "version": ("begin, advance application", "open account", *pay, "commit", *settle, "ack"),
        }[guard]

    def run(self, ctx: Context) -> Steps:
        order = self.read(ctx.delivery.message)
        db: LoanSession = ctx.db  # type: ignore[assignment]  # LoanBank hands out LoanSessions
        if self.guard == "memory":
            yield from self._remembering(ctx, db, order)
            return
        fresh = False  # whether this delivery wrote the payout intent (a reconciling service only)
        if self.guard == "check outside":
            yield "check id"
            if db.has_processed(ctx.message_id):
                ctx.note("duplicate skipped")
                yield from self._settle(ctx, db, order, fresh=False)
            else:
                yield "open account"
                db.open_account(order.application_id, order.amount, ctx.message_id)
                fresh = yield from self._pay(ctx, order)
                yield from self._settle(ctx, db, order, fresh=fresh)
                yield "record id"
                db.record_message(ctx.message_id)
            yield "ack"
            ctx.ack()
            return
        if (yield from self._already_done(ctx, db, order)):
            ctx.note("duplicate skipped")
        elif self.guard == "inbox":
            # The usual handler: the account and the processed ID saved together (one SaveChanges).
            yield "save"
            db.open_account(order.application_id, order.amount, ctx.message_id)
            if self._save_id(ctx, db):
                fresh = yield from self._pay(ctx, order)
            else:
                # A twin committed the same ID while we worked (PostgreSQL makes us wait for it):
                # the unique key says "already done", so our account goes.
                db.rollback()
                ctx.note("duplicate skipped")
        else:
            if self.guard == "version":
                yield "open account"
                db.open_account(order.application_id, order.amount, ctx.message_id)
            fresh = yield from self._pay(ctx, order)
        yield "commit"
        if db.in_transaction:
            db.commit()
        yield from self._settle(ctx, db, order, fresh=fresh)
        yield "ack"
        ctx.ack()

    def _already_done(self, ctx: Context, db: LoanSession, order: OpenAccount) -> StepsThen[bool]:
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
                yield from self._settle(ctx, db, order, fresh=False)
            else:
                yield "begin, open account"
                db.begin()
                db.open_account(order.application_id, order.amount, ctx.message_id)
                fresh = yield from self._pay(ctx, order)
                yield "commit"
                db.commit()
                yield from self._settle(ctx, db, order, fresh=fresh)
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

    def key_for(self, message_id: str, order: OpenAccount) -> str | None:
        """The payout's idempotency key, by this design's rule."""
        if self.payout_key == "derived":
            return f"{message_id}:payout"
        if self.payout_key == "approval":
            return f"application-{order.application_id}-v{order.version}:payout"
        return str(uuid.uuid4()) if self.payout_key == "per attempt" else None

    def _pay(self, ctx: Context, order: OpenAccount) -> StepsThen[bool]:
        """In the step that opens the account: the payout call, or a reconciling service's payout intent.

        Returns whether this delivery wrote the intent (False when an earlier one had, or none is kept).
        """
        if not self.payout:
            return False
        if self.look_up is not None:
            db: LoanSession = ctx.db  # type: ignore[assignment]
            return db.record_intent(order.application_id, order.amount)
        yield "pay out"
        self._send(ctx, order)
        return False

    def _settle(self, ctx: Context, db: LoanSession, order: OpenAccount, *, fresh: bool) -> Steps:
        """After the commit, for a reconciling service: make the intended payout and record it.

        An intent this delivery wrote has certainly not been paid; one an earlier delivery left
        unconfirmed may have been, so the payout is looked up first and sent only if not found.
        """
        if not self.payout or self.look_up is None or db.intent_status(order.application_id) != "intended":
            return
        if not fresh:
            yield "look up payout"
            if self.look_up(order.application_id):
                ctx.note("payout found at the payment system: not sent again")
                yield "record payout"
                db.record_payout(order.application_id)
                return
        yield "pay out"
        self._send(ctx, order)
        yield "record payout"
        db.record_payout(order.application_id)

    def _send(self, ctx: Context, order: OpenAccount) -> None:
        key = self.key_for(ctx.message_id, order)
        response = ctx.call_provider(key, Charge(order.application_id, order.amount))
        if not response.ok:
            raise ProviderError(f"{ctx.message_id}: the payment system answered {response.status}")
