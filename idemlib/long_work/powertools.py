"""A real peer library under idemlib's faults: Powertools for AWS Lambda's idempotency utility.

The consumer is the real ``aws-lambda-powertools`` package: its ``idempotent_function``
and its Redis persistence layer on the real Redis server. It takes its messages from
idemlib's broker and meets idemlib's fault plans, but each delivery is handled in a
child process of its own, and a crash is a real process death: the parent sends
``SIGKILL`` between two steps, so the library gets no chance to clean up, just as
when Lambda times an invocation out or a container is killed.

The library keeps its own time (wall-clock timestamps in its records, Redis's own
expiry), so these runs use a broker on the wall clock with short leases: a run of
one message takes a fraction of a second, and its counts do not depend on the
machine's speed as long as the margins (lease, deadline, expiry) are not tiny.

The steps, as the parent sees them: ``claim`` (the library saves the record as
in progress), ``charge`` (the decorated function commits a charge to Redis),
``mark completed`` (the library saves the result), ``ack``.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

import pandas as pd
import redis
from aws_lambda_powertools.shared.version import VERSION
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (IdempotencyAlreadyInProgressError,
                                                                     IdempotencyKeyError, IdempotencyValidationError)
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

from idemlib.broker import Broker, Delivery
from idemlib.clock import VirtualClock
from idemlib.facts import load_facts
from idemlib.faults import FaultPlan
from idemlib.long_work.inprogress import BACKED_OFF, blocked_leases, outcome_of_effects
from idemlib.messages import Message
from idemlib.servers import ready
from idemlib.stores.cache import redis_unavailable, redis_url
from idemlib.trace import Trace

POWERTOOLS_VERSION = VERSION
"""The installed version of aws-lambda-powertools."""
MEASURED_VERSION = str(load_facts().loc["powertools_version_measured", "value"])
"""The Powertools version the lesson's figures were measured with (``pip install aws-lambda-powertools==<it>``)."""
PEER_STEPS = ("claim", "charge", "mark completed", "ack")
STEP_TIMEOUT = 20.0
"""Seconds the parent waits for a child to reach its next step before giving up on it."""
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


_server_ready = threading.Event()


def _wait_for_fork_server() -> None:
    """Fork one child that does nothing, once per process, before any run starts its clock.

    The first fork waits for the server's imports (over a second on a loaded
    machine); on a run's wall clock that wait would count against a lease or an
    expiry and change what the run measures.
    """
    if not _server_ready.is_set():
        warm_up = _PROCESSES.Process(target=time.sleep, args=(0,), daemon=True)
        warm_up.start()
        warm_up.join(timeout=STEP_TIMEOUT)
        _server_ready.set()


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

    ``deadline_ms``: the remaining time a registered Lambda context reports when
    the record is claimed (``register_lambda_context``); None registers nothing,
    which is what code outside Lambda, or a handler that forgot, does.
    """

    expires_after_seconds: int = IdempotencyConfig().expires_after_seconds
    deadline_ms: int | None = None
    payload_validation: bool = False
    raise_on_no_key: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.expires_after_seconds, bool) or not isinstance(self.expires_after_seconds, int) \
                or self.expires_after_seconds < 1:
            raise ValueError("expires_after_seconds must be a whole number of seconds, at least 1 (Redis keeps keys "
                             f"for whole seconds), not {self.expires_after_seconds!r}")
        if self.deadline_ms is not None and (not isinstance(self.deadline_ms, int) or self.deadline_ms < 0):
            raise ValueError(f"deadline_ms must be None (no deadline) or milliseconds left, 0 or more, not {self.deadline_ms!r}")

    def config(self) -> IdempotencyConfig:
        """The library's own configuration object for these settings."""
        config = IdempotencyConfig(event_key_jmespath="message_id", expires_after_seconds=self.expires_after_seconds,
                                   payload_validation_jmespath="[order_id, amount]" if self.payload_validation else "",
                                   raise_on_no_idempotency_key=self.raise_on_no_key)
        if self.deadline_ms is not None:
            config.register_lambda_context(RemainingTime(self.deadline_ms))
        return config


@dataclass(frozen=True)
class RemainingTime:
    """Stands in for a Lambda context: all the library asks of it is the time left, in milliseconds."""

    millis: int

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


class WallClock(VirtualClock):
    """Real time, for a broker whose consumer is a library that reads the wall clock itself."""

    def __init__(self) -> None:
        super().__init__()
        self._started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._started

    def advance(self, seconds: float) -> float:
        time.sleep(max(seconds, 0.0))
        return self.now()

    def advance_to(self, moment: float) -> float:
        return self.advance(moment - self.now())


@dataclass
class PeerRun:
    """What a run of the library did: the trace, the charges committed, and what it said along the way."""

    messages: list[Message]
    trace: pd.DataFrame
    charges: list[dict[str, Any]]
    dead_letters: list[Any]
    lease: float
    records: pd.DataFrame
    """What the library left in Redis at the end of the run: each key, its time to live and its value."""
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
        """For a run of one message: charged once, twice, lost, or ``blocked`` (once, after refusals)."""
        return outcome_of_effects((len(self.charges),), self.refused)

    def summary(self) -> dict[str, Any]:
        """The figures the lesson's tables show for this run."""
        return {"charges": len(self.charges), "charged ($)": sum(c["amount"] for c in self.charges),
                "refused": self.refused, "blocked (leases)": round(blocked_leases(self.trace, self.lease)),
                "rejected": self.count("rejected"), "failed": self.count("failed"), "dead-lettered": len(self.dead_letters), "outcome": self.outcome}


def run_powertools(messages: Iterable[Message], settings: PeerSettings = PeerSettings(), *,
                   faults: FaultPlan | None = None, lease: float = 0.2, max_deliveries: int = 5,
                   overlap_at: str | None = None) -> PeerRun:
    """Deliver ``messages`` to the library, one child process per delivery, until the queue is empty.

    ``faults`` crashes a child (``SIGKILL``) before a step of :data:`PEER_STEPS` or
    loses an ack, as it does to idemlib's handlers. With ``overlap_at`` (a step
    name), when a child reaches that step the next waiting delivery is handled by a
    second child before the first goes on: two consumers holding one message ID at
    once. Every Redis key of the run shares a prefix of its own and is deleted after.
    """
    messages = list(messages)
    faults = faults or FaultPlan()
    _wait_for_fork_server()
    clock = WallClock()
    trace = Trace(clock)
    broker = Broker(clock, trace, visibility_timeout=lease, max_deliveries=max_deliveries)
    for message in messages:
        broker.publish(message)
    client = redis.Redis.from_url(redis_url())
    prefix = f"idemlib-peer-{os.getpid()}-{next(_runs)}"
    run = _Run(broker, trace, faults, settings, prefix, overlap_at)
    try:
        while not broker.is_empty:
            delivery = broker.receive("consumer A")
            if delivery is None:
                expiry = broker.next_lease_expiry()
                clock.advance_to((expiry if expiry is not None else clock.now()) + 0.005)
                continue
            run.deliver(delivery)
        charges = [json.loads(raw) for raw in client.lrange(f"{prefix}:charges", 0, -1)]
        # Large batches: a shared server may hold many other keys, and SCAN's default batch of 10 would take
        # a round trip per ten of them.
        left = {key.decode().removeprefix(prefix): (client.ttl(key), client.get(key))
                for key in client.scan_iter(match=f"{prefix}#*", count=10_000)}
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=10_000):
            client.delete(key)
    records = pd.DataFrame([(key, ttl, (value or b"").decode()) for key, (ttl, value) in sorted(left.items())],
                           columns=["key (after the run's prefix)", "seconds to live", "value"])
    return PeerRun(messages, trace.to_frame(), charges, list(broker.dead_letters), lease, records, run.warnings)


@dataclass
class _Run:
    broker: Broker
    trace: Trace
    faults: FaultPlan
    settings: PeerSettings
    prefix: str
    overlap_at: str | None
    warnings: list[str] = field(default_factory=list)

    def deliver(self, delivery: Delivery) -> None:
        """Hand one delivery to a fresh child process and play its steps, killing it where the plan says."""
        parent, child = _PROCESSES.Pipe()
        event = {**delivery.message.body, **({"message_id": delivery.message.message_id} if delivery.message.message_id else {})}
        process = _PROCESSES.Process(target=consume_delivery, args=(child, event, self.settings, self.prefix, redis_url()), daemon=True)
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
                if detail == self.overlap_at:
                    self.overlap_at = None
                    if (rival := self.broker.receive("consumer B")) is not None:
                        self.deliver(rival)
                parent.send("go")
            self.warnings += [w for w in said if w not in self.warnings]
            self._settle(delivery, kind, detail)
        finally:
            process.join(timeout=STEP_TIMEOUT)
            parent.close()

    def _settle(self, delivery: Delivery, kind: str, detail: str) -> None:
        actor, label = delivery.consumer, delivery.message_id
        if kind == "refused":
            self.trace.record(actor, BACKED_OFF, label, delivery.count, detail)  # raised: no ack, the lease runs out
        elif kind == "rejected":
            self.trace.record(actor, "rejected", label, delivery.count, detail)
            self.broker.release(delivery, detail)
        elif kind == "failed":
            self.trace.record(actor, "failed", label, delivery.count, detail)  # an invocation error: no ack
        elif self.faults.loses_ack(label, delivery.count):
            self.trace.record(actor, "ack lost", label, delivery.count)
        else:
            self.trace.record(actor, "step", label, delivery.count, detail)
            self.broker.ack(delivery)


with warnings.catch_warnings():
    # In 3.37 the recommended name is an alias of a class marked deprecated for v4, and
    # subclassing it warns about the alias's old name; nothing here uses the old name.
    warnings.simplefilter("ignore", DeprecationWarning)

    class _GatedRedisLayer(CachePersistenceLayer):
        """The library's Redis layer, pausing before it claims and before it completes, so the parent can kill there."""

        def __init__(self, gate: Any, client: redis.Redis) -> None:
            super().__init__(client=client)
            self._gate = gate

        def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
            self._gate("claim")
            super().save_inprogress(data, remaining_time_in_millis)

        def save_success(self, data: dict[str, Any], result: dict) -> None:
            self._gate("mark completed")
            super().save_success(data, result)


def consume_delivery(conn: Connection, event: dict[str, Any], settings: PeerSettings, prefix: str, url: str) -> None:
    """The child process: one delivery through the library, reporting before each step and waiting for a go."""

    def gate(step: str) -> None:
        conn.send(("before", step, []))
        conn.recv()

    client = redis.Redis.from_url(url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @idempotent_function(data_keyword_argument="event", persistence_store=_GatedRedisLayer(gate, client),
                             config=settings.config(), key_prefix=prefix)
        def charge(event: dict[str, Any]) -> dict[str, Any]:
            gate("charge")
            client.rpush(f"{prefix}:charges", json.dumps(event))  # committed at once: the side effect
            return {"charged": event.get("amount")}

        try:
            result = charge(event=event)
            gate("ack")
            verdict = ("done", f"result {result}")
        except IdempotencyAlreadyInProgressError as error:
            verdict = ("refused", f"{type(error).__name__}: {error}")
        except (IdempotencyValidationError, IdempotencyKeyError) as error:
            verdict = ("rejected", f"{type(error).__name__}: {error}")
        except Exception as error:  # noqa: BLE001 - whatever else the library raises fails the invocation
            verdict = ("failed", f"{type(error).__name__}: {error}")
    conn.send((*verdict, [str(w.message) for w in caught]))


def powertools_ready() -> bool:
    """True when the real Redis answers. When it does not, say why and how to start it, or raise where servers are required."""
    return ready(redis_unavailable(), "The Powertools runs are skipped; the course's own consumers still run.")
