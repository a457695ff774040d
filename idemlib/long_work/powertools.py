"""A real peer library under idemlib's faults: Powertools for AWS Lambda's idempotency utility.

The consumer is the real ``aws-lambda-powertools`` package: its ``idempotent_function``
and its Redis persistence layer on the real Redis server. It takes its messages from
idemlib's broker and meets idemlib's fault plans, but each delivery is handled in a
child process of its own, and a crash is a real process death: the parent sends
``SIGKILL`` between two steps, so the library gets no chance to clean up, just as
when Lambda stops an invocation at its timeout or a container is killed.

Time is the run's virtual clock, never the wall clock, so every outcome is the same
on a quiet machine and a busy one. The library reads the time through
``datetime.now()``, and Redis counts its records' lives; in the child both are the
run's clock (see :mod:`idemlib.long_work.library_process`). The broker's leases are on the same clock too,
and a piece of long work moves
it forward while the child waits at its gate.

The steps, as the parent sees them: ``claim`` (the library saves the record as
in progress), ``charge`` (the decorated function does its work, then commits a
charge to Redis), ``mark completed`` (the library saves the result), ``ack``.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

import pandas as pd
import redis
from aws_lambda_powertools.shared.version import VERSION

from idemlib.clock import VirtualClock
from idemlib.facts import load_facts
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, Steps
from idemlib.long_work.inprogress import (
    BACKED_OFF,
    LEASE_SECONDS,
    MAX_DELIVERIES,
    outcome_of_effects,
    waited_leases,
)

# The child's side, re-exported here: the lesson reads the settings, the stand-in context and the child's source.
from idemlib.long_work.library_process import (
    EPOCH,
    RAISED,
    PeerSettings,
    RemainingTime,
    consume_delivery,
    expiry_hash,
    library_defaults,
)
from idemlib.messages import BadMessage, Message
from idemlib.servers import ready
from idemlib.sim import Engine, NoSession, RunAborted, Worker
from idemlib.stores.cache import redis_unavailable, redis_url
from idemlib.trace import Event

__all__ = [
    "EPOCH",
    "MEASURED_VERSION",
    "PEER_STEPS",
    "POWERTOOLS_VERSION",
    "TIMED_OUT",
    "PeerRun",
    "PeerSettings",
    "RemainingTime",
    "consume_delivery",
    "library_defaults",
    "powertools_ready",
    "run_powertools",
    "start_fork_server",
]

POWERTOOLS_VERSION = VERSION
"""The installed version of aws-lambda-powertools."""
MEASURED_VERSION = str(load_facts().loc["powertools_version_measured", "value"])
"""The Powertools version the lesson's runs were checked with (``pip install aws-lambda-powertools==<it>``)."""
PEER_STEPS = ("claim", "charge", "mark completed", "ack")
STEP_TIMEOUT = 20.0
"""Wall seconds the parent waits for a child to reach its next step before giving up on it (a broken Redis,
not a slow machine: no outcome depends on how long a child takes)."""
TIMED_OUT = str(Event.TIMED_OUT)
"""The trace event of an invocation that Lambda would stop: its time left ran out before its work was done."""
DEFAULT_SETTINGS = PeerSettings()
"""The library's settings when a run names none: its defaults, with no Lambda context."""
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


def run_powertools(messages: Iterable[Message], settings: PeerSettings = DEFAULT_SETTINGS, *,
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
    client = redis.Redis.from_url(redis_url())
    prefix = f"idemlib-peer-{os.getpid()}-{threading.get_ident()}-{next(_runs)}"
    library = _Library(settings, prefix, work_seconds, raises)
    engine = Engine(library, NoSession, faults=faults, visibility_timeout=lease, max_deliveries=max_deliveries,
                    step_seconds=lambda step, now: library.charge_seconds if step == "charge" else 0.0)
    engine.policy = _WhileAWorks(engine.clock)
    engine.add_consumers(consumers)
    engine.publish(messages)
    try:
        engine.run()
        charges = [json.loads(raw) for raw in client.lrange(f"{prefix}:charges", 0, -1)]
        records = _records_left(client, prefix, engine.clock.now())
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=10_000):
            client.delete(key)
    return PeerRun(messages, engine.trace.to_frame(), charges, list(engine.broker.dead_letters), lease, records,
                   library.warnings)


_RAISES = {"before the charge": "raise before", "after the charge": "raise after"}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _records_left(client: redis.Redis, prefix: str, now: float) -> pd.DataFrame:
    """The library's keys in Redis, each with its time to live on the run's clock (None: kept for ever)."""
    expiries = {_text(key): float(at) for key, at in client.hgetall(expiry_hash(prefix)).items()}
    rows = []
    # Large batches: a shared server may hold many other keys, and SCAN's default batch of 10 would take
    # a round trip per ten of them.
    for key in sorted(_text(k) for k in client.scan_iter(match=f"{prefix}#*", count=10_000)):
        at = expiries.get(key)
        rows.append((key.removeprefix(prefix), None if at is None else round(at - now, 3),
                     _text(client.get(key) or b"")))
    return pd.DataFrame(rows, columns=["key (after the run's prefix)", "seconds to live", "value"])


class _WhileAWorks:
    """Who moves: consumer A, except while A waits on its charge's work, when consumer B takes what the broker
    hands out and finishes each before A moves again."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def choose(self, workers: Sequence[Worker]) -> Worker:
        a, b = workers[0], workers[-1]
        a_waits = a.busy and a.step == "charge" and max(b.ready_at, self.clock.now()) < a.ready_at
        return b if b.busy or a_waits else a


class _Library(Handler):
    """The real library as a consumer on the simulator's engine: one child process per delivery, driven step by step.

    The engine pauses the job before each step the child announces (a crash there
    is a ``SIGKILL``), and the charge's step lasts ``work_seconds``, or until the
    invocation's time runs out (then Lambda stops it, another ``SIGKILL``).
    """

    name = "Powertools"
    steps = PEER_STEPS
    restart_seconds = 0.0  # a new invocation starts at once

    def __init__(self, settings: PeerSettings, prefix: str, work_seconds: float, raises: str | None) -> None:
        self.settings, self.prefix, self.work_seconds, self.raises = settings, prefix, work_seconds, raises
        self.charge_seconds = work_seconds
        """How long the charge now pending lasts: read by the engine as the step's duration."""
        self.warnings: list[str] = []

    def run(self, ctx: Context) -> Steps:
        delivery, label = ctx.delivery, ctx.delivery.message_id
        parent, child = _PROCESSES.Pipe()
        message = delivery.message
        event = {**message.body, **({"message_id": message.message_id} if message.message_id else {})}
        started = ctx.now()
        process: Any = _PROCESSES.Process(target=consume_delivery, args=(child, event, self.settings, self.prefix,
                                                                    redis_url(), started), daemon=True)
        try:
            process.start()
        except Exception as error:  # the harness, not the delivery, failed: the run cannot go on
            raise RunAborted(f"could not start the Powertools consumer for {label}: {error}") from error
        child.close()
        try:
            while True:
                kind, detail, said = self._hear(parent, process, label)
                if kind != "before":
                    break
                stopped = detail == "charge" and self._stopped_before_its_work_is_done(started, ctx.now())
                try:
                    yield detail
                except GeneratorExit:  # the fault plan's crash: no cleanup, no finally, a real process death
                    os.kill(process.pid, signal.SIGKILL)
                    raise
                if stopped:
                    os.kill(process.pid, signal.SIGKILL)  # what Lambda does when an invocation's time is up
                    ctx.record(delivery, TIMED_OUT, "before its charge")
                    return
                first_charge = detail == "charge" and self.raises and delivery.count == 1
                parent.send((_RAISES[self.raises] if first_charge and self.raises else "go", ctx.now()))
            self.warnings += [w for w in said if w not in self.warnings]
            if kind == "refused":
                ctx.record(delivery, BACKED_OFF, detail)  # raised: no ack, the lease runs out
            elif kind == "rejected":
                raise BadMessage(detail)  # the engine gives the message back
            elif kind in (RAISED, "failed"):
                ctx.record(delivery, kind, detail)  # an invocation error: no ack
            else:
                ctx.record(delivery, Event.STEP, detail)
                ctx.ack()
        finally:
            process.join(timeout=STEP_TIMEOUT)
            parent.close()

    def _stopped_before_its_work_is_done(self, started: float, now: float) -> bool:
        """Set how long the charge's work lasts; True when the invocation's time runs out first."""
        self.charge_seconds = self.work_seconds
        if self.settings.stopped_at_timeout and self.settings.time_left is not None:
            stop = started + self.settings.time_left
            if stop < now + self.work_seconds:
                self.charge_seconds = max(0.0, stop - now)
                return True
        return False

    @staticmethod
    def _hear(parent: Connection, process: Any, label: str) -> tuple[str, str, list[str]]:
        if not parent.poll(STEP_TIMEOUT):
            raise RunAborted(f"the Powertools consumer for {label} said nothing for {STEP_TIMEOUT} s; "
                             f"is Redis at {redis_url()} answering?")
        try:
            kind, detail, said = parent.recv()
        except EOFError:
            process.join(timeout=STEP_TIMEOUT)
            raise RunAborted(f"the Powertools consumer for {label} ended without a word (exit code "
                             f"{process.exitcode}); run it by hand to see its error") from None
        return str(kind), str(detail), list(said)


def powertools_ready() -> bool:
    """True when the real Redis answers. When it does not, say why and how to start it, or raise where servers are required."""
    return ready(redis_unavailable(), "The Powertools runs are skipped; the course's own consumers still run.")
