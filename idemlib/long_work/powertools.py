"""A real peer library under idemlib's faults: Powertools for AWS Lambda's idempotency utility.

The consumer is the real ``aws-lambda-powertools`` package: its ``idempotent_function``
and its Redis persistence layer on the real Redis server. It takes its messages from
idemlib's broker and meets idemlib's fault plans, but each delivery is handled in a
child process of its own, and a crash is a real process death: the parent sends
``SIGKILL`` between two steps, so the library gets no chance to clean up, just as
when Lambda stops an invocation at its timeout or a container is killed.

Time is the run's virtual clock, never the wall clock, so every outcome is the same
on a quiet machine and a busy one. The library reads the time through
``datetime.now()``; in the child that call answers with the run's clock (sent with
every go-ahead). Redis keeps the library's records, but their time to live is
counted on the same clock: the client the library is given stores each key without
an expiry and forgets it once the run's clock passes the time to live it was set
with. The broker's leases are on the same clock too, and a piece of long work moves
it forward while the child waits at its gate.

The steps, as the parent sees them: ``claim`` (the library saves the record as
in progress), ``charge`` (the decorated function does its work, then commits a
charge to Redis), ``mark completed`` (the library saves the result), ``ack``.
"""

from __future__ import annotations

import datetime
import itertools
import json
import multiprocessing
import os
import signal
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

import pandas as pd
import redis
from aws_lambda_powertools.shared.version import VERSION
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency import base as _library_base
from aws_lambda_powertools.utilities.idempotency.exceptions import (IdempotencyAlreadyInProgressError,
                                                                     IdempotencyKeyError, IdempotencyValidationError)
from aws_lambda_powertools.utilities.idempotency.persistence import base as _persistence_base
from aws_lambda_powertools.utilities.idempotency.persistence import datarecord as _datarecord
from aws_lambda_powertools.utilities.idempotency.persistence import redis as _redis_layer
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

from idemlib.broker import Broker, Delivery
from idemlib.clock import VirtualClock
from idemlib.facts import load_facts
from idemlib.faults import FaultPlan
from idemlib.long_work.inprogress import BACKED_OFF, LEASE_SECONDS, MAX_DELIVERIES, outcome_of_effects, waited_leases
from idemlib.messages import Message
from idemlib.servers import ready
from idemlib.stores.cache import redis_unavailable, redis_url
from idemlib.trace import Trace

POWERTOOLS_VERSION = VERSION
"""The installed version of aws-lambda-powertools."""
MEASURED_VERSION = str(load_facts().loc["powertools_version_measured", "value"])
"""The Powertools version the lesson's runs were checked with (``pip install aws-lambda-powertools==<it>``)."""
PEER_STEPS = ("claim", "charge", "mark completed", "ack")
STEP_TIMEOUT = 20.0
"""Wall seconds the parent waits for a child to reach its next step before giving up on it (a broken Redis,
not a slow machine: no outcome depends on how long a child takes)."""
EPOCH = 1_767_225_600.0
"""The wall-clock moment (2026-01-01 UTC) the library sees as the run's time 0."""
TIMED_OUT = "stopped at its timeout"
"""The trace event of an invocation that Lambda would stop: its time left ran out before its work was done."""
RAISED = "raised"
"""The trace event of a delivery whose function raised an error (the library deletes its record, then re-raises)."""
_runs = itertools.count(1)
_PROCESSES = multiprocessing.get_context("forkserver")
# Children fork from a server process that has imported the library once, so each
# delivery costs a fork, not an import of Powertools and boto3.
_PROCESSES.set_forkserver_preload(["idemlib.long_work.powertools"])


def start_fork_server() -> None:
    """Start the process that children fork from, so it imports the library while other work goes on.

    Optional: the first run starts it anyway, and then waits for its imports.
    """
    forkserver.ensure_running()


def library_defaults() -> dict[str, Any]:
    """What the library's own ``IdempotencyConfig()`` sets when given nothing, read from the installed package."""
    config = IdempotencyConfig()
    return {"records expire after (s)": config.expires_after_seconds,
            "payload validation": config.payload_validation_jmespath or "off",
            "raise_on_no_idempotency_key": config.raise_on_no_idempotency_key,
            "Lambda context registered (deadline)": config.lambda_context is not None}


@dataclass(frozen=True)
class PeerSettings:
    """How the library is configured for a run (the arguments of ``IdempotencyConfig``, in the course's words).

    ``time_left``: the seconds a registered Lambda context reports as left in the
    invocation when the record is claimed (``register_lambda_context``), which the
    library turns into the claim's deadline; None registers nothing, which is what
    code outside Lambda, or a handler that forgot, does. ``stopped_at_timeout``:
    the invocation is killed when that time runs out, as Lambda does; off, nothing
    enforces the deadline, as with a stand-in context outside Lambda.
    """

    expires_after_seconds: int = IdempotencyConfig().expires_after_seconds
    time_left: float | None = None
    stopped_at_timeout: bool = False
    payload_validation: bool = False
    raise_on_no_key: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.expires_after_seconds, bool) or not isinstance(self.expires_after_seconds, int) \
                or self.expires_after_seconds < 1:
            raise ValueError("expires_after_seconds must be a whole number of seconds, at least 1 (the library counts "
                             f"a record's life in whole seconds), not {self.expires_after_seconds!r}")
        if self.time_left is not None and not 0 <= self.time_left < float("inf"):
            raise ValueError(f"time_left must be None (no deadline) or seconds left, 0 or more, not {self.time_left!r}")
        if self.stopped_at_timeout and self.time_left is None:
            raise ValueError("stopped_at_timeout needs a time_left: without a registered context there is no timeout")

    def config(self) -> IdempotencyConfig:
        """The library's own configuration object for these settings."""
        config = IdempotencyConfig(event_key_jmespath="message_id", expires_after_seconds=self.expires_after_seconds,
                                   payload_validation_jmespath="[order_id, amount]" if self.payload_validation else "",
                                   raise_on_no_idempotency_key=self.raise_on_no_key)
        if self.time_left is not None:
            config.register_lambda_context(RemainingTime(round(self.time_left * 1000)))
        return config


@dataclass(frozen=True)
class RemainingTime:
    """Stands in for a Lambda context: all the library asks of it is the time left, in milliseconds.

    It only reports a number. Inside Lambda the same number is a promise that the
    invocation is stopped when it runs out; this stand-in promises nothing.
    """

    millis: int

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


@dataclass
class PeerRun:
    """What a run of the library did: the trace, the charges committed, and what it said along the way."""

    messages: list[Message]
    trace: pd.DataFrame
    charges: list[dict[str, Any]]
    dead_letters: list[Any]
    lease: float
    records: pd.DataFrame
    """What the library left in Redis at the end of the run: each key, its time to live on the run's clock, its value."""
    warnings: list[str] = field(default_factory=list)

    def count(self, event: str) -> int:
        """How many trace events of one kind the run had."""
        return int((self.trace["event"] == event).sum())

    @property
    def refused(self) -> int:
        """Deliveries the library refused because the record was in progress."""
        return self.count(BACKED_OFF)

    @property
    def outcome(self) -> str:
        """For a run of one message: its outcome over the card (see :func:`outcome_of_effects`)."""
        in_progress = self.records["value"].str.contains('"INPROGRESS"').any()
        return outcome_of_effects((len(self.charges),), self.refused, stuck=bool(self.dead_letters) and bool(in_progress))

    def summary(self) -> dict[str, Any]:
        """The figures the lesson's tables show for this run."""
        return {"charges": len(self.charges), "charged ($)": sum(c["amount"] for c in self.charges),
                "refused": self.refused, "waited (leases)": round(waited_leases(self.trace, self.lease), 2),
                "raised": self.count(RAISED), "rejected": self.count("rejected"), "failed": self.count("failed"),
                "stopped": self.count(TIMED_OUT), "dead-lettered": len(self.dead_letters), "outcome": self.outcome}


def run_powertools(messages: Iterable[Message], settings: PeerSettings = PeerSettings(), *,
                   faults: FaultPlan | None = None, lease: float = LEASE_SECONDS, max_deliveries: int = MAX_DELIVERIES,
                   consumers: int = 1, work_seconds: float = 0.0, raises: str | None = None) -> PeerRun:
    """Deliver ``messages`` to the library, one child process per delivery, until the queue is empty.

    ``faults`` crashes a child (``SIGKILL``) before a step of :data:`PEER_STEPS` or
    loses an ack, as it does to idemlib's handlers. ``work_seconds`` is how long the
    function works before it charges, on the run's clock; with ``consumers=2``,
    whatever the broker hands out meanwhile (a second copy, or a redelivery once the
    lease runs out) goes to consumer B while consumer A is still at work. ``raises``
    (``"before the charge"`` or ``"after the charge"``) makes the function raise an
    error on the first delivery, where ``faults`` would kill the process. Every Redis
    key of the run shares a prefix of its own and is deleted after.
    """
    messages = list(messages)
    if consumers not in (1, 2):
        raise ValueError(f"consumers must be 1 or 2 (consumer B only ever works while A waits), not {consumers}")
    if raises not in (None, *_RAISES):
        raise ValueError(f"raises must be None or one of {list(_RAISES)}, not {raises!r}")
    clock = VirtualClock()
    trace = Trace(clock)
    broker = Broker(clock, trace, visibility_timeout=lease, max_deliveries=max_deliveries)
    for message in messages:
        broker.publish(message)
    client = redis.Redis.from_url(redis_url())
    prefix = f"idemlib-peer-{os.getpid()}-{threading.get_ident()}-{next(_runs)}"
    run = _Run(broker, clock, trace, faults or FaultPlan(), settings, prefix, consumers, work_seconds, raises)
    try:
        while not broker.is_empty:
            delivery = broker.receive("consumer A")
            if delivery is None:
                expiry = broker.next_lease_expiry()
                if expiry is None:
                    continue  # the receive just dead-lettered the last message
                clock.advance_to(expiry)
                continue
            run.deliver(delivery)
        charges = [json.loads(raw) for raw in client.lrange(f"{prefix}:charges", 0, -1)]
        records = _records_left(client, prefix, clock.now())
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=10_000):
            client.delete(key)
    return PeerRun(messages, trace.to_frame(), charges, list(broker.dead_letters), lease, records, run.warnings)


_RAISES = {"before the charge": "raise before", "after the charge": "raise after"}


def _records_left(client: redis.Redis, prefix: str, now: float) -> pd.DataFrame:
    """The library's keys in Redis, each with its time to live on the run's clock (None: kept for ever)."""
    expiries = {key.decode(): float(at) for key, at in client.hgetall(_expiry_hash(prefix)).items()}
    rows = []
    # Large batches: a shared server may hold many other keys, and SCAN's default batch of 10 would take
    # a round trip per ten of them.
    for key in sorted(k.decode() for k in client.scan_iter(match=f"{prefix}#*", count=10_000)):
        at = expiries.get(key)
        rows.append((key.removeprefix(prefix), None if at is None else round(at - now, 3),
                     (client.get(key) or b"").decode()))
    return pd.DataFrame(rows, columns=["key (after the run's prefix)", "seconds to live", "value"])


def _expiry_hash(prefix: str) -> str:
    return f"{prefix}:expiries"


@dataclass
class _Run:
    broker: Broker
    clock: VirtualClock
    trace: Trace
    faults: FaultPlan
    settings: PeerSettings
    prefix: str
    consumers: int
    work_seconds: float
    raises: str | None
    warnings: list[str] = field(default_factory=list)

    def deliver(self, delivery: Delivery, *, rivals: bool = True) -> None:
        """Hand one delivery to a fresh child process and play its steps, killing it where the plan says."""
        parent, child = _PROCESSES.Pipe()
        event = {**delivery.message.body, **({"message_id": delivery.message.message_id} if delivery.message.message_id else {})}
        started = self.clock.now()
        process = _PROCESSES.Process(target=consume_delivery, args=(child, event, self.settings, self.prefix, redis_url(),
                                                                    started), daemon=True)
        process.start()
        child.close()
        actor, label = delivery.consumer, delivery.message_id
        try:
            while True:
                if not parent.poll(STEP_TIMEOUT):
                    raise RuntimeError(f"the Powertools consumer for {label} said nothing for {STEP_TIMEOUT} s; "
                                       f"is Redis at {redis_url()} answering?")
                try:
                    kind, detail, said = parent.recv()
                except EOFError:
                    process.join(timeout=STEP_TIMEOUT)
                    raise RuntimeError(f"the Powertools consumer for {label} ended without a word (exit code "
                                       f"{process.exitcode}); run it by hand to see its error") from None
                if kind != "before":
                    break
                if self.faults.crashes_before(detail, label, delivery.count):
                    os.kill(process.pid, signal.SIGKILL)  # no cleanup, no finally: a real process death
                    self.trace.record(actor, "crashed", label, delivery.count, f"before {detail}")
                    return
                action = "go"
                if detail == "charge":
                    if self.raises and delivery.count == 1:
                        action = _RAISES[self.raises]
                    if not self._work(started, rivals):
                        os.kill(process.pid, signal.SIGKILL)  # what Lambda does when an invocation's time is up
                        self.trace.record(actor, TIMED_OUT, label, delivery.count, "before its charge")
                        return
                parent.send((action, self.clock.now()))
            self.warnings += [w for w in said if w not in self.warnings]
            self._settle(delivery, kind, detail)
        finally:
            process.join(timeout=STEP_TIMEOUT)
            parent.close()

    def _work(self, started: float, rivals: bool) -> bool:
        """Let ``work_seconds`` pass while the child waits at its charge; False if its invocation's time runs out first.

        Meanwhile consumer B (with two consumers, and when this is not B's own
        delivery) takes whatever the broker hands out, and works it to its end.
        """
        end = self.clock.now() + self.work_seconds
        if self.settings.stopped_at_timeout and self.settings.time_left is not None:
            stop = started + self.settings.time_left
            if stop < end:
                self._wait(stop, rivals)
                return False
        self._wait(end, rivals)
        return True

    def _wait(self, until: float, rivals: bool) -> None:
        while rivals and self.consumers > 1 and self.clock.now() < until:
            rival = self.broker.receive("consumer B")
            if rival is not None:
                self.deliver(rival, rivals=False)
                continue
            expiry = self.broker.next_lease_expiry()
            if expiry is None or expiry > until:
                break
            self.clock.advance_to(expiry)
        self.clock.advance_to(max(until, self.clock.now()))

    def _settle(self, delivery: Delivery, kind: str, detail: str) -> None:
        actor, label = delivery.consumer, delivery.message_id
        if kind == "refused":
            self.trace.record(actor, BACKED_OFF, label, delivery.count, detail)  # raised: no ack, the lease runs out
        elif kind == "rejected":
            self.trace.record(actor, "rejected", label, delivery.count, detail)
            self.broker.release(delivery, detail)
        elif kind in (RAISED, "failed"):
            self.trace.record(actor, kind, label, delivery.count, detail)  # an invocation error: no ack
        elif self.faults.loses_ack(label, delivery.count):
            self.trace.record(actor, "ack lost", label, delivery.count)
        else:
            self.trace.record(actor, "step", label, delivery.count, detail)
            self.broker.ack(delivery)


class ChargeFailed(RuntimeError):
    """The error the decorated function raises where a run asks it to (a provider that timed out, say)."""


class _RunClock:
    """The child's view of the run's clock: the moment the parent last sent, as ``datetime.now()`` answers it."""

    now = 0.0

    @classmethod
    def datetime_module(cls) -> types.SimpleNamespace:
        """The ``datetime`` module as the library's modules see it in the child: the same, but ``now()`` is the run's."""

        class RunDateTime(datetime.datetime):
            @classmethod
            def now(cls_, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # noqa: N805 - a classmethod
                return datetime.datetime.fromtimestamp(EPOCH + cls.now, tz)

        return types.SimpleNamespace(**{**vars(datetime), "datetime": RunDateTime})


class RunClockRedis:
    """The real Redis, with each key's time to live counted on the run's clock instead of Redis's own.

    The library gets this as its client (it needs ``get``, ``set`` and ``delete``).
    A key set with an expiry is stored without one; the moment it should expire is
    kept in a hash beside it, and the key is forgotten once the run's clock passes it.
    """

    def __init__(self, client: redis.Redis, prefix: str, now: Callable[[], float]) -> None:
        self._client, self._expiries, self._now = client, _expiry_hash(prefix), now

    def _forget_if_expired(self, name: str) -> None:
        at = self._client.hget(self._expiries, name)
        if at is not None and float(at) <= self._now():
            self._client.delete(name)
            self._client.hdel(self._expiries, name)

    def get(self, name: str) -> bytes | None:
        self._forget_if_expired(name)
        return self._client.get(name)

    def set(self, name: str, value: Any, ex: float | None = None, px: float | None = None, nx: bool = False) -> Any:
        self._forget_if_expired(name)
        stored = self._client.set(name, value, nx=nx)
        if stored:
            seconds = ex if ex is not None else (px / 1000 if px is not None else None)
            if seconds is None:
                self._client.hdel(self._expiries, name)
            else:
                self._client.hset(self._expiries, name, self._now() + float(seconds))
        return stored

    def delete(self, *names: str) -> Any:
        self._client.hdel(self._expiries, *names)
        return self._client.delete(*names)


with warnings.catch_warnings():
    # In 3.37 the recommended name is an alias of a class marked deprecated for v4, and
    # subclassing it warns about the alias's old name; nothing here uses the old name.
    warnings.simplefilter("ignore", DeprecationWarning)

    class _GatedRedisLayer(CachePersistenceLayer):
        """The library's Redis layer, pausing before it claims and before it completes, so the parent can kill there."""

        def __init__(self, gate: Callable[[str], str], client: RunClockRedis) -> None:
            super().__init__(client=client)
            self._gate = gate

        def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
            self._gate("claim")
            super().save_inprogress(data, remaining_time_in_millis)

        def save_success(self, data: dict[str, Any], result: dict) -> None:
            self._gate("mark completed")
            super().save_success(data, result)


def consume_delivery(conn: Connection, event: dict[str, Any], settings: PeerSettings, prefix: str, url: str,
                     now: float) -> None:
    """The child process: one delivery through the library, reporting before each step and waiting for a go."""
    _RunClock.now = now
    run_datetime = _RunClock.datetime_module()
    for module in (_library_base, _persistence_base, _datarecord, _redis_layer):
        module.dt = run_datetime  # type: ignore[attr-defined]  # the library's clock is the run's

    def gate(step: str) -> str:
        conn.send(("before", step, []))
        action, _RunClock.now = conn.recv()
        return str(action)

    client = redis.Redis.from_url(url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @idempotent_function(data_keyword_argument="event",
                             persistence_store=_GatedRedisLayer(gate, RunClockRedis(client, prefix, lambda: _RunClock.now)),
                             config=settings.config(), key_prefix=prefix)
        def charge(event: dict[str, Any]) -> dict[str, Any]:
            action = gate("charge")
            if action == "raise before":
                raise ChargeFailed("the provider timed out before charging")
            client.rpush(f"{prefix}:charges", json.dumps(event))  # committed at once: the side effect
            if action == "raise after":
                raise ChargeFailed("the provider charged, then the answer timed out")
            return {"charged": event.get("amount")}

        try:
            result = charge(event=event)
            gate("ack")
            verdict = ("done", f"result {result}")
        except IdempotencyAlreadyInProgressError as error:
            verdict = ("refused", f"{type(error).__name__}: {error}")
        except (IdempotencyValidationError, IdempotencyKeyError) as error:
            verdict = ("rejected", f"{type(error).__name__}: {error}")
        except ChargeFailed as error:
            verdict = (RAISED, f"{type(error).__name__}: {error}")
        except Exception as error:  # noqa: BLE001 - whatever else the library raises fails the invocation
            verdict = ("failed", f"{type(error).__name__}: {error}")
    conn.send((*verdict, [str(w.message) for w in caught]))


def powertools_ready() -> bool:
    """True when the real Redis answers. When it does not, say why and how to start it, or raise where servers are required."""
    return ready(redis_unavailable(), "The Powertools runs are skipped; the course's own consumers still run.")
