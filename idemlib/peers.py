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
from multiprocessing import forkserver
import signal
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pandas as pd
import redis
from aws_lambda_powertools.shared.version import VERSION as POWERTOOLS_VERSION
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (IdempotencyAlreadyInProgressError,
                                                                     IdempotencyKeyError, IdempotencyValidationError)
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

from idemlib.broker import Broker, Delivery
from idemlib.clock import VirtualClock
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.facts import load_facts
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler
from idemlib.inprogress import (BACKED_OFF, LEASE_SECONDS, InProgressHandler, RecordsDuckDB, blocked_leases,
                                outcome_of_effects, run_long, server_ready)
from idemlib.messages import Message
from idemlib.sim import outcome_of, simulate
from idemlib.stores import DuckDBPayments
from idemlib.stores.cache import redis_unavailable, redis_url
from idemlib.trace import Trace

MEASURED_VERSION = str(load_facts().loc["powertools_version_measured", "value"])
"""The Powertools version the lesson's figures were measured with (``pip install aws-lambda-powertools==<it>``)."""
PEER_STEPS = ("claim", "charge", "mark completed", "ack")
STEP_TIMEOUT = 20.0
"""Seconds the parent waits for a child to reach its next step before giving up on it."""
_runs = itertools.count(1)
_PROCESSES = multiprocessing.get_context("forkserver")
# Children fork from a server process that has imported the library once, so each
# delivery costs a fork, not an import of Powertools and boto3.
_PROCESSES.set_forkserver_preload(["idemlib.peers"])


def start_fork_server() -> None:
    """Start the process that children fork from, so it imports the library while other work goes on.

    Optional: the first delivery starts it anyway, and then waits for its imports.
    """
    forkserver.ensure_running()


@dataclass(frozen=True)
class PeerSettings:
    """How the library is configured for a run (the arguments of ``IdempotencyConfig``, in the course's words).

    ``deadline_ms``: the remaining time a registered Lambda context reports when
    the record is claimed (``register_lambda_context``); None registers nothing,
    which is what code outside Lambda, or a handler that forgot, does.
    """

    expires_after_seconds: int = 3600
    deadline_ms: int | None = None
    payload_validation: bool = False
    raise_on_no_key: bool = False

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
        left = {key.decode().removeprefix(prefix): (client.ttl(key), client.get(key)) for key in client.scan_iter(match=f"{prefix}#*")}
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
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


CRASH_POINTS: tuple[tuple[str, str | None, str | None, str | None], ...] = (
    ("no fault", None, None, None),
    ("crash before the claim", "begin", "claim", "claim"),
    ("crash after the claim", "charge", "call provider", "charge"),
    ("crash after the charge", "commit", "mark completed", "mark completed"),
    ("crash before the ack", "ack", "ack", "ack"),
    ("ack lost", None, None, None),
)
"""The crash points the comparison shares, and the step each consumer has there: (point, inbox, in progress, library).

The inbox's "claim" is its ``record id`` inside the open transaction and its
"completion" is its commit; the in-progress handler's charge is its provider call.
"""


def _plan(point: str, step: str | None) -> FaultPlan:
    if point == "ack lost":
        return FaultPlan(lost_acks=[LostAck()])
    return FaultPlan(crashes=[Crash(step)]) if step else FaultPlan()


def side_by_side(peers: dict[str, PeerSettings] | None, *, lease: float = 0.2,
                 course_deadline_leases: float = 2.0) -> pd.DataFrame:
    """m-7f3 crashed at each shared point, handled by the inbox, the in-progress handler and the library.

    The course's consumers run in the simulator with a 30 s lease; each library
    configuration in ``peers`` runs for real with a lease of ``lease`` seconds (None:
    the library is left out). One row per (consumer, crash point), in the columns
    :func:`idemlib.plots.plot_crash_matrix` reads.
    """
    rows = []
    handler = InProgressHandler(course_deadline_leases * LEASE_SECONDS)
    inbox_db, records_db = DuckDBPayments(), RecordsDuckDB()
    for point, inbox_step, course_step, _ in CRASH_POINTS:
        inbox_db.empty()
        inbox = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=_plan(point, inbox_step), database=inbox_db)
        charges = len(inbox.payments)
        rows.append(("inbox (one transaction)", point, charges, 0, 0.0, len(inbox.dead_letters), outcome_of(charges)))
        course = run_long(handler, faults=_plan(point, course_step), database=records_db)
        rows.append((f"in-progress record, deadline {course_deadline_leases:g} leases", point, course.card_charges,
                     course.refused, course.blocked_leases, len(course.result.dead_letters), course.outcome))
    jobs = [(label, point, settings, _plan(point, peer_step))
            for label, settings in (peers or {}).items() for point, _, _, peer_step in CRASH_POINTS]
    runs = _in_parallel([(([RUNNING_EXAMPLE], settings), {"faults": plan, "lease": lease}) for _, _, settings, plan in jobs])
    for (label, point, _, _), run in zip(jobs, runs):
        summary = run.summary()
        rows.append((label, point, summary["charges"], summary["refused"], summary["blocked (leases)"],
                     summary["dead-lettered"], summary["outcome"]))
    table = pd.DataFrame(rows, columns=["handler", "fault", "charges", "refused", "blocked (leases)", "dead-lettered",
                                        "outcome"])
    table["total charged"] = table["charges"] * RUNNING_EXAMPLE.body["amount"]
    order = list(dict.fromkeys(table["handler"]))
    return table.sort_values("handler", key=lambda names: names.map(order.index), kind="stable").reset_index(drop=True)


def _in_parallel(calls: list[tuple[tuple[Any, ...], dict[str, Any]]], workers: int = 6) -> list[PeerRun]:
    """Several independent runs at once: each mostly waits for leases and children, so they overlap well.

    Every run has its own broker, clock and key prefix; only the machine is shared.
    """
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda call: run_powertools(*call[0], **call[1]), calls))


def compare_outcomes(table: pd.DataFrame) -> pd.DataFrame:
    """The side-by-side table as one row per crash point and one column per consumer, each cell saying what happened."""
    cells = table.assign(said=[
        f"{row['outcome']}: {row['charges']} charge{'s' if row['charges'] != 1 else ''}"
        + (f", {row['refused']} refused" if row["refused"] else "") + (", dead-lettered" if row["dead-lettered"] else "")
        for row in table.to_dict("records")])
    points = [point for point, *_ in CRASH_POINTS]
    return cells.pivot(index="fault", columns="handler", values="said").loc[points, list(dict.fromkeys(table["handler"]))]


def powertools_scenarios(lease: float = 0.2) -> pd.DataFrame:
    """The library's behaviours the lesson measures beyond :func:`side_by_side`, each a real run on the real Redis.

    One row per scenario: what the customers owe, what was charged, how many
    deliveries were refused or rejected, what was dead-lettered, and what the
    library warned. The short-expiry run waits out a real second, which the
    library's one-second minimum for a record's life requires.
    """
    reused = [RUNNING_EXAMPLE, Message.charge("m-7f3", order_id=1042, amount=50)]
    no_key = Message(None, {"order_id": 1042, "amount": 40})
    scenarios: list[tuple[str, list[Message], PeerSettings, dict[str, Any]]] = [
        ("deadline, two crashes after the claim", [RUNNING_EXAMPLE], PeerSettings(deadline_ms=50),
         {"faults": FaultPlan(crashes=[Crash("charge"), Crash("charge", delivery=2)])}),
        ("expiry 1 s, ack lost, lease 1.3 s", [RUNNING_EXAMPLE], PeerSettings(expires_after_seconds=1),
         {"faults": _plan("ack lost", None), "lease": 1.3}),
        ("ID reused for $50, payload validation off", reused, PeerSettings(), {}),
        ("ID reused for $50, payload validation on", reused, PeerSettings(payload_validation=True), {}),
        ("no key, raise_on_no_idempotency_key off, ack lost", [no_key], PeerSettings(), {"faults": _plan("ack lost", None)}),
        ("no key, raise_on_no_idempotency_key on", [no_key], PeerSettings(raise_on_no_key=True), {}),
        ("duplicate published, both copies held at once", [RUNNING_EXAMPLE, RUNNING_EXAMPLE], PeerSettings(deadline_ms=5000),
         {"overlap_at": "charge"}),
    ]
    rows = []
    runs = _in_parallel([((messages, settings), {"lease": lease, **options}) for _, messages, settings, options in scenarios])
    for (name, messages, _, _), run in zip(scenarios, runs):
        owed = sum({(m.message_id, m.body["amount"]): m.body["amount"] for m in messages}.values())  # each payload once
        summary = run.summary()
        rows.append({"scenario": name, "owed ($)": owed, "charged ($)": summary["charged ($)"], "refused": summary["refused"],
                     "rejected": summary["rejected"], "failed": summary["failed"], "dead-lettered": summary["dead-lettered"],
                     "warned": "; ".join(dict.fromkeys(w.split(".")[0] for w in run.warnings)) or "-"})
    return pd.DataFrame(rows).set_index("scenario")


def powertools_ready() -> bool:
    """True when the real Redis answers. When it does not, say why and how to start it, or raise where servers are required."""
    return server_ready(redis_unavailable(), "The Powertools runs are skipped; the course's own consumers still run.")
