"""The consumers, each written as a sequence of named steps.

A handler is a generator: it yields the name of a step just before doing it. That
pause is where the simulator can kill the process (a crash *before* that step) or
let another consumer run, so a fault can strike between any two steps without the
handler knowing anything about faults.

The five handlers of lessons 01 and 02 differ only in the order of the same few
steps, which is the whole point: the order decides what a crash does.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from idemlib.broker import Delivery
from idemlib.messages import BadMessage, Charge, Message, parse_charge
from idemlib.provider import Response, key_of_call
from idemlib.stores import PaymentsDatabase, PaymentsSession
from idemlib.stores.cache import Cache


class ProviderError(Exception):
    """The payment provider's call did not give a usable answer; the delivery is given back and retried."""


class ResponseLost(ProviderError):
    """The call reached the provider, which may have charged, but no answer came back (a timeout)."""


def _no_provider(key: str | None, charge: Charge) -> Response:
    raise RuntimeError("this run has no payment provider: pass provider=PaymentProvider() to simulate()")


def _no_clock() -> float:
    raise RuntimeError("this context has no clock: run the handler through simulate(), which gives it the run's clock")


def _no_lease() -> bool:
    raise RuntimeError("this context has no broker: run the handler through simulate(), which lets it extend its lease")


def _no_trace(delivery: Delivery, event: str, detail: str) -> None:
    raise RuntimeError("this context has no trace: run the handler through simulate(), which records its events")


@dataclass
class Context:
    """What a handler works with for one delivery: its database session, its ack and the provider."""

    delivery: Delivery
    db: PaymentsSession
    ack: Callable[[], object]
    """Acks the delivery; what it returns (a broker's answer, where it gives one) is not read."""
    note: Callable[[str], None]
    call_provider: Callable[[str | None, Charge], Response] = _no_provider
    now: Callable[[], float] = _no_clock
    """The run's clock, for handlers that keep deadlines (lesson 09's in-progress record)."""
    extend_lease: Callable[[], bool] = _no_lease
    """Ask the broker for a fresh lease on this delivery, for handlers whose work outlasts one (lesson 09)."""
    deliveries: tuple[Delivery, ...] = ()
    """Every delivery the handler holds: the batch of a batched consumer (``delivery`` is its first), else just one."""
    record: Callable[[Delivery, str, str], None] = _no_trace
    """Write one event with a detail into the run's trace, for one of the ``deliveries``."""

    def __post_init__(self) -> None:
        if not self.deliveries:
            self.deliveries = (self.delivery,)

    @property
    def message_id(self) -> str:
        return self.delivery.message_id


Steps = Generator[str, None, None]
"""A handler's job for one delivery: it yields each step's name just before doing it, and may be closed at a pause."""


def no_steps() -> Steps:
    """A job of no steps, for a hook that adds none."""
    yield from ()


_Result = TypeVar("_Result")
StepsThen = Generator[str, None, _Result]
"""Steps that end in a value a caller reads with ``fresh = yield from ...`` (``StepsThen[bool]``)."""


class Handler:
    """A consumer's logic. Subclasses name their ``steps`` and yield them in :meth:`run`.

    Anything with this shape runs on the simulator's engine: the course's handlers, a
    batched consumer (``batch_size`` set: it takes up to that many deliveries at once),
    a real process driven step by step.
    """

    name: str = ""
    steps: tuple[str, ...] = ()
    batch_size: int | None = None
    """None: one delivery per job. A number: a batch consumer, given up to that many deliveries per job, each read
    on receipt (:meth:`read`) so a message it cannot read is given back on its own."""
    restart_seconds: float = 5.0
    """Simulated seconds a crashed consumer of this kind takes to come back and ask for work again."""

    def run(self, ctx: Context) -> Steps:
        raise NotImplementedError

    def read(self, message: Message) -> Charge:
        """What this handler reads from ``message``: its amount above all (the explorers count effects
        with it). Raises :class:`~idemlib.messages.BadMessage`, saying why, for a message it cannot read."""
        return parse_charge(message)

    def crash_detail(self, step: str, ctx: Context) -> str:
        """How the trace describes a crash of this consumer just before ``step``."""
        return f"before {step}"

    def sessions(self, database: PaymentsDatabase) -> Callable[[], Any]:
        """Where this consumer's sessions on ``database`` come from: one per consumer process, and a new one
        after a crash."""
        return database.session

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {' → '.join(self.steps)}>"


class NaiveHandler(Handler):
    """Charges every delivery. No check for duplicates, so each redelivery charges again."""

    name = "naive"
    steps = ("begin", "charge", "commit", "ack")

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "begin"
        ctx.db.begin()
        yield "charge"
        self.apply_charge(ctx, charge)
        yield "commit"
        ctx.db.commit()
        yield "ack"
        ctx.ack()

    def apply_charge(self, ctx: Context, charge: Charge) -> None:
        """Write the charge: unconditionally, which is this handler's whole problem."""
        ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)


class IdFirstHandler(Handler):
    """Saves the ID, then charges, each write committed on its own.

    A crash between the two marks the message as handled although nothing was
    charged: the redelivery is skipped and the charge is lost.
    """

    name = "ID first"
    steps = ("record id", "charge", "ack")

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "record id"
        if ctx.db.record_message(ctx.message_id):
            yield "charge"
            ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
        else:
            ctx.note("duplicate skipped")
        yield "ack"
        ctx.ack()


class WorkFirstHandler(Handler):
    """Checks the ID, charges, then saves the ID, each write committed on its own.

    A crash between the charge and the ID leaves the work done but unmarked: the
    redelivery finds no ID and charges a second time.
    """

    name = "work first"
    steps = ("check id", "charge", "record id", "ack")

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "check id"
        if ctx.db.has_processed(ctx.message_id):
            ctx.note("duplicate skipped")
        else:
            yield "charge"
            ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
            yield "record id"
            ctx.db.record_message(ctx.message_id)
        yield "ack"
        ctx.ack()


class InboxHandler(Handler):
    """The idempotent consumer: the ID and the charge in one transaction, the ack after commit.

    A duplicate makes the insert write zero rows; the handler then skips the charge,
    commits the empty transaction and acks, so the message leaves the queue.
    """

    name = "inbox"
    steps: tuple[str, ...] = ("begin", "record id", "charge", "commit", "ack")

    def __init__(self, *, check_payload: bool = False) -> None:
        # With check_payload, the inbox also stores a fingerprint of the body, so an ID
        # reused for a different message is refused loudly instead of skipped silently.
        self.check_payload = check_payload
        if check_payload:
            self.name = "inbox, payload checked"

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "begin"
        ctx.db.begin()
        yield "record id"
        fingerprint = f"{charge.order_id}:{charge.amount}" if self.check_payload else None
        if ctx.db.record_message(ctx.message_id, fingerprint):
            yield from self.with_the_charge(ctx, charge)
            yield "charge"
            ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
        else:
            ctx.note("duplicate skipped")
        yield "commit"
        ctx.db.commit()
        yield "ack"
        ctx.ack()

    def with_the_charge(self, ctx: Context, charge: Charge) -> Steps:
        """Steps a subclass does inside the transaction, only for a new message, just before the charge."""
        return no_steps()


class AckFirstHandler(InboxHandler):
    """The inbox's transaction, but acknowledged on receipt: at-most-once.

    Once the ack is in, the broker forgets the message, so a crash anywhere after it
    loses the charge for good. The inbox cannot help with a message that never returns.
    """

    name = "ack first"
    steps = ("ack", "begin", "record id", "charge", "commit")

    def run(self, ctx: Context) -> Steps:
        parse_charge(ctx.delivery.message)
        yield "ack"
        ctx.ack()
        # The rest is the inbox's transaction; its own ack step is dropped.
        for step in super().run(_without_ack(ctx)):
            if step != "ack":
                yield step


def _without_ack(ctx: Context) -> Context:
    return replace(ctx, ack=lambda: None)


class BusinessRowHandler(NaiveHandler):
    """No inbox table: the order's own row remembers what was applied, and the charge is conditional on it.

    ``by="last id"`` keeps the last message ID: it catches a repeat of the latest
    message for an order, but an older duplicate arriving after a newer message is
    charged again. ``by="version"`` keeps the highest version applied (the message
    carries the order's sequence number in ``version``): any older message is refused,
    a late duplicate and a real message that was overtaken alike.
    """

    def __init__(self, *, by: str = "last id") -> None:
        if by not in ("last id", "version"):
            raise ValueError(f"by must be 'last id' or 'version', not {by!r}")
        self.by = by
        self.name = "business row" if by == "last id" else "business row, version"

    def apply_charge(self, ctx: Context, charge: Charge) -> None:
        version = message_version(ctx.delivery.message) if self.by == "version" else None
        if not ctx.db.charge_order_once(charge.order_id, charge.amount, ctx.message_id, version=version):
            ctx.note("duplicate skipped")


def message_version(message: Message) -> int:
    """The order's sequence number a message carries in ``version``; refuses a message without a usable one."""
    version = message.body.get("version") if isinstance(message.body, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadMessage(f"{message.label}: a versioned business row needs a positive whole 'version' in the body "
                         f"(the order's sequence number, set by the producer), got {version!r}.")
    return version


class CacheGuardHandler(Handler):
    """Remembers IDs in a cache with a time to live (Redis ``SET NX EX``), outside the database transaction.

    ``order="claim first"`` claims the ID, then charges in the database: a crash in
    between leaves the ID claimed and the charge never made, so the redelivery skips it.
    ``order="work first"`` charges and commits, then claims: a crash in between leaves
    the charge made and no claim, so the redelivery charges again.
    """

    def __init__(self, cache: Cache, order: str = "claim first", *, ttl_seconds: int = 3600, prefix: str = "idem") -> None:
        if order not in ("claim first", "work first"):
            raise ValueError(f"order must be 'claim first' or 'work first', not {order!r}")
        self.cache, self.order, self.ttl_seconds, self.prefix = cache, order, ttl_seconds, prefix
        self.name = f"cache, {order}"
        local = ("begin", "charge", "commit")
        self.steps = ("claim id", *local, "ack") if order == "claim first" else ("check id", *local, "claim id", "ack")

    def _claim(self, message_id: str) -> bool:
        return bool(self.cache.set(f"{self.prefix}:{message_id}", "1", nx=True, ex=self.ttl_seconds))

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        first = self.order == "claim first"
        yield "claim id" if first else "check id"
        new = self._claim(ctx.message_id) if first else self.cache.get(f"{self.prefix}:{ctx.message_id}") is None
        if new:
            yield "begin"
            ctx.db.begin()
            yield "charge"
            ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
            yield "commit"
            ctx.db.commit()
            if not first:
                yield "claim id"
                self._claim(ctx.message_id)
        else:
            ctx.note("duplicate skipped")
        yield "ack"
        ctx.ack()


class ProviderHandler(InboxHandler):
    """The inbox consumer that also charges the card through an external payment provider.

    ``call`` says where the call sits: ``"inside"`` the open transaction, after the
    ID is recorded (a redelivery after the commit never calls, though two consumers
    racing on DuckDB both can; the connection stays open for as long as the provider
    takes), or ``"before"`` it (no connection held, but every redelivery calls again).
    ``keyed`` sends ``<message ID>:charge`` as the idempotency key, one key per call,
    the same on every retry.
    """

    def __init__(self, call: str = "inside", keyed: bool = True) -> None:
        super().__init__()
        if call not in ("inside", "before"):
            raise ValueError(f"call must be 'inside' or 'before' the transaction, not {call!r}")
        self.call, self.keyed = call, keyed
        self.name = f"call {call}, {'with' if keyed else 'no'} key"
        local = InboxHandler.steps
        self.steps: tuple[str, ...] = (("call provider", *local) if call == "before"
                                       else (*local[:2], "call provider", *local[2:]))

    def key_for(self, message_id: str) -> str | None:
        """The idempotency key for this message's charge: derived from its ID, so every retry reuses it."""
        return key_of_call(message_id, "charge") if self.keyed else None

    def run(self, ctx: Context) -> Steps:
        if self.call == "before":
            yield from self._pay(ctx, parse_charge(ctx.delivery.message))
        yield from super().run(ctx)

    def with_the_charge(self, ctx: Context, charge: Charge) -> Steps:
        return self._pay(ctx, charge) if self.call == "inside" else no_steps()

    def _pay(self, ctx: Context, charge: Charge) -> Steps:
        yield "call provider"
        response = ctx.call_provider(self.key_for(ctx.message_id), charge)
        if not response.ok:
            raise ProviderError(f"{ctx.message_id}: the provider answered {response.status}: {response.body.get('error')}")


HANDLERS: tuple[Handler, ...] = (NaiveHandler(), IdFirstHandler(), WorkFirstHandler(), InboxHandler(), AckFirstHandler())
"""Every handler of lessons 01 and 02, in the order the lessons introduce them."""


def handler_named(name: str) -> Handler:
    """The handler called ``name`` (as in :data:`HANDLERS`), with a list of names if there is none."""
    for handler in HANDLERS:
        if handler.name == name:
            return handler
    raise KeyError(f"no handler named {name!r}; choose one of {[h.name for h in HANDLERS]}")
